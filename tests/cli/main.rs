//! CLI tests: the real `modelzip` binary, run in temporary directories.

mod archive;
mod harness;
#[path = "../support/http_server.rs"]
mod http_server;
mod interop;
mod names;
mod paddle;
mod remote;
mod reports;
#[path = "../support/archive.rs"]
mod support;
#[cfg(unix)]
mod symlink;
mod tensor;
mod variants;
