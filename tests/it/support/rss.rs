//! Peak resident set size of a `modelzip` run, for the tests that bound memory
//! (tests/it/hostile.rs and tests/it/alias_amplification.rs), and of the anonymous
//! memory of imports (tests/it/import_memory.rs).

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

/// Peaks of a `modelzip` run, sampled from `/proc/PID/status` while it runs.
pub struct Peaks {
    /// The exit code.
    pub code: Option<i32>,
    /// The largest `RssAnon` seen, in KiB: the process's own memory (heap, stacks), not
    /// the file-backed pages of files it maps.
    pub anon_kib: u64,
    /// The largest `VmHWM` seen (peak resident size, mapped file pages included), in KiB.
    pub hwm_kib: u64,
    /// How many samples were taken.
    pub samples: u64,
    /// The run's stderr.
    pub stderr: String,
}

/// Runs the CLI and samples its anonymous resident memory (`RssAnon`) about every
/// millisecond until it exits. A sample can miss a short spike, never invent one: a
/// process that holds a large buffer for the time it takes to write it is seen.
pub fn peak_anon(args: &[&std::ffi::OsStr]) -> Peaks {
    let mut child = Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).map(|_| s)
    });
    let status_path = format!("/proc/{}/status", child.id());
    let kib = |s: &str, key: &str| -> Option<u64> {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let (mut anon_kib, mut hwm_kib, mut samples) = (0, 0, 0);
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_path) {
            if let Some(v) = kib(&s, "RssAnon:") {
                anon_kib = anon_kib.max(v);
                samples += 1;
            }
            if let Some(v) = kib(&s, "VmHWM:") {
                hwm_kib = hwm_kib.max(v);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            return Peaks {
                code: st.code(),
                anon_kib,
                hwm_kib,
                samples,
                stderr: reader.join().unwrap().unwrap_or_default(),
            };
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
