//! CLI tests: the real `modelzip` binary, run in temporary directories.

mod archive;
mod audit;
mod harness;
mod interop;
mod names;
mod paddle;
mod remote;
mod reports;
#[cfg(unix)]
mod symlink;
mod tensor;
mod variants;
mod view;
