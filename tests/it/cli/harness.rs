//! A small harness around the built `modelzip` binary.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// The binary under test.
pub fn modelzip() -> Command {
    Command::cargo_bin("modelzip").expect("modelzip binary is built")
}

/// Path of a file under tests/fixtures.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Runs the command, expects exit code 2 and exactly one line on stderr starting
/// with `modelzip: `, and returns that line.
pub fn expect_error(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.starts_with("modelzip: "), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    stderr.trim_end().to_string()
}

/// Parses stdout as JSON after asserting success.
pub fn json_of(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "status {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}
