//! CLI tests: the real `modelzip` binary, run in temporary directories.

mod archive;
mod harness;
#[allow(dead_code)]
#[path = "../support/archive.rs"]
mod support;
mod tensor;
