//! CLI tests: the real `modelzip` binary, run in temporary directories.

mod harness;
mod tensor;
