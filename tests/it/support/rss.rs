//! Peak resident set size of a `modelzip` run, for the tests that bound memory
//! (tests/it/hostile.rs and tests/it/alias_amplification.rs).

use std::path::Path;
use std::process::{Command, Stdio};

/// Runs the CLI and returns its exit code and peak resident set size in KiB.
pub fn peak_rss_kib(args: &[&std::ffi::OsStr]) -> (Option<i32>, u64) {
    let time = Path::new("/usr/bin/time");
    if time.exists() {
        let out = Command::new(time)
            .arg("-f")
            .arg("MAXRSS_KIB=%M")
            .arg(env!("CARGO_BIN_EXE_modelzip"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let kib = stderr
            .lines()
            .filter_map(|l| l.strip_prefix("MAXRSS_KIB="))
            .next_back()
            .and_then(|v| v.trim().parse().ok())
            .expect("time printed the peak RSS");
        // time reports the child's status as its own.
        return (out.status.code(), kib);
    }
    // Without time(1): poll VmHWM (the peak so far) while the child runs.
    let mut child = Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_path)
            && let Some(v) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        {
            peak = peak.max(v);
        }
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code(), peak);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
