//! Several processes and threads on one archive: a second writer fails fast or waits;
//! readers opened before or during in-place appends (by other processes) always see a
//! consistent set of complete tags.

use crate::support;

use modelzip::WriteLock;
use modelzip::{Archive, ArchiveWriter, TagBuilder, Tensor};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use support::values;

const PARAMS: usize = 4;
const FLOATS: usize = 64 << 10;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_modelzip")
}

fn data(tag: u64, i: usize) -> Vec<f32> {
    values(tag * 1000 + i as u64, FLOATS)
}

/// A persistables directory with the data of tag number `n`.
fn source(root: &Path, n: u64) -> PathBuf {
    let dir = root.join(format!("src{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..PARAMS {
        let t = Tensor::from_slice(vec![FLOATS as u64], &data(n, i)).unwrap();
        let mut bytes = Vec::new();
        modelzip::tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
        std::fs::write(dir.join(format!("w{i}")), bytes).unwrap();
    }
    dir
}

fn first_archive(path: &Path) {
    let mut b = TagBuilder::new("s0");
    for i in 0..PARAMS {
        b = b.param(
            format!("w{i}"),
            Tensor::from_slice(vec![FLOATS as u64], &data(0, i)).unwrap(),
        );
    }
    let mut w = ArchiveWriter::create(path).unwrap();
    w.add_tag(b).unwrap();
    w.finish().unwrap();
}

/// The tags are s0, s1, ... in order, and every one holds its own data (with `quick`,
/// only the newest tag's data is compared).
fn check_consistent(a: &Archive) -> usize {
    check_tags(a, false)
}

fn check_tags(a: &Archive, quick: bool) -> usize {
    let tags = a.tags();
    for (k, t) in tags.iter().enumerate() {
        assert_eq!(t, &format!("s{k}"), "tags {tags:?}");
        let tag = a.tag(t).unwrap();
        if quick && k + 1 < tags.len() {
            continue;
        }
        for i in 0..PARAMS {
            let got = tag
                .param(&format!("w{i}"))
                .unwrap()
                .view()
                .to_vec::<f32>()
                .unwrap();
            assert!(got == data(k as u64, i), "{t}/w{i} differs");
        }
    }
    tags.len()
}

#[test]
fn a_second_writer_fails_at_once_or_waits_with_wait() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("m.zip");
    first_archive(&path);
    let src = source(d.path(), 1);
    let held = WriteLock::acquire(&path, false).unwrap();
    // Another process is the second writer.
    let out = Command::new(exe())
        .args([
            "pack",
            path.to_str().unwrap(),
            src.to_str().unwrap(),
            "--tag",
            "s1",
            "-q",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("archive is locked by another process"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1);
    for cmd in [&["rm", "s0"][..], &["prune", "--keep", "1"], &["compact"]] {
        let out = Command::new(exe())
            .arg(cmd[0])
            .arg(&path)
            .args(&cmd[1..])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {stderr}");
        assert!(stderr.contains("locked"), "{cmd:?}: {stderr}");
    }
    // With --wait it waits for the lock, then succeeds.
    let mut child = spawn_pack_wait(&path, &src);
    std::thread::sleep(Duration::from_millis(400));
    assert!(child.try_wait().unwrap().is_none(), "--wait did not wait");
    drop(held);
    assert_second_tag_added(child, &path);
}

#[test]
fn readers_see_complete_tags_while_other_processes_append_in_place() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("m.zip");
    first_archive(&path);
    let appends: u64 = 20;
    let sources: Vec<PathBuf> = (1..=appends).map(|n| source(d.path(), n)).collect();
    // A reader opened before any append keeps reading its own snapshot.
    let early = Archive::open(&path).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let opens = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for r in 0..4 {
        let (path, done, opens) = (path.clone(), done.clone(), opens.clone());
        readers.push(std::thread::spawn(move || {
            let mut last = 0;
            while !done.load(Ordering::Relaxed) {
                let a = Archive::open(&path).unwrap_or_else(|e| panic!("reader: {e}"));
                // Two readers only open (many opens, to hit the start of an append); two
                // also read the newest tag's data.
                let n = if r < 2 {
                    a.tags().len()
                } else {
                    check_tags(&a, true)
                };
                assert!(n >= last, "tags went from {last} to {n}");
                last = n;
                opens.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Reader processes: `tags --json` must always succeed.
    let cli_reader = {
        let (path, done) = (path.clone(), done.clone());
        std::thread::spawn(move || {
            let mut runs = 0u64;
            while !done.load(Ordering::Relaxed) {
                let out = Command::new(exe())
                    .args(["tags", path.to_str().unwrap(), "--json"])
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "reader process: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                runs += 1;
            }
            runs
        })
    };
    // Writer processes, one after another (in place is the default).
    for (k, src) in sources.iter().enumerate() {
        let out = Command::new(exe())
            .args([
                "pack",
                path.to_str().unwrap(),
                src.to_str().unwrap(),
                "-q",
                "--tag",
            ])
            .arg(format!("s{}", k + 1))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "writer {}: {}",
            k + 1,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let runs = cli_reader.join().unwrap();
    assert_eq!(check_consistent(&early), 1);
    let last = Archive::open(&path).unwrap();
    assert_eq!(check_consistent(&last), appends as usize + 1);
    assert!(last.verify().is_ok());
    eprintln!(
        "{} library opens and {runs} reader processes during {appends} appends",
        opens.load(Ordering::Relaxed)
    );
}

/// Whether process `pid` waits for a flock (Linux: a `->` line of /proc/locks).
#[cfg(target_os = "linux")]
fn waits_for_a_lock(pid: u32) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks
        .lines()
        .any(|l| l.contains("->") && l.split_whitespace().any(|w| w == pid.to_string()))
}

/// A writer of a new archive checks the path again under the lock: `pack --wait` that
/// found no archive and waits for the lock while another writer creates one appends to
/// it when it gets the lock, instead of renaming a new archive over it (the other
/// writer's tag lost).
#[test]
fn a_new_archive_created_while_pack_waited_is_appended_to() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("m.zip");
    let src = source(d.path(), 1);
    let held = WriteLock::acquire(&path, false).unwrap();
    let mut child = spawn_pack_wait(&path, &src);
    // Past its check that m.zip does not exist: waiting for the lock.
    #[cfg(target_os = "linux")]
    {
        let start = std::time::Instant::now();
        while !waits_for_a_lock(child.id()) {
            assert!(child.try_wait().unwrap().is_none(), "pack did not wait");
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "pack never waited"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    #[cfg(not(target_os = "linux"))]
    std::thread::sleep(Duration::from_millis(400));
    assert!(child.try_wait().unwrap().is_none(), "--wait did not wait");
    // The lock's holder creates the archive with tag s0 (written beside it, renamed in).
    let side = d.path().join("side.zip");
    first_archive(&side);
    std::fs::rename(&side, &path).unwrap();
    drop(held);
    assert_second_tag_added(child, &path);
}

/// `modelzip pack PATH SRC --tag s1 -q --wait`, started.
fn spawn_pack_wait(path: &Path, src: &Path) -> std::process::Child {
    Command::new(exe())
        .args([
            "pack",
            path.to_str().unwrap(),
            src.to_str().unwrap(),
            "--tag",
            "s1",
            "-q",
            "--wait",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` (a `pack` that waited for the lock): it succeeded, and the archive
/// holds two consistent tags.
fn assert_second_tag_added(child: std::process::Child, path: &Path) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(check_consistent(&Archive::open(path).unwrap()), 2);
}
