//! CLI tests: the real `modelzip` binary, run in temporary directories.

mod archive;
mod harness;
mod names;
mod paddle;
mod reports;
#[path = "../support/archive.rs"]
mod support;
#[cfg(unix)]
mod symlink;
mod tensor;
mod variants;
