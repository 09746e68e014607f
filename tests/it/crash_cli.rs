//! Crash safety of the `modelzip` binary, measured: writer processes (pack creating,
//! appending in place and by rewrite, rm, prune, compact) SIGKILLed at random moments
//! inside their writes, each kill followed by checks through the CLI; and, through the
//! library, every write operation failing after a byte budget (a full disk).
//!
//! The quick run (not ignored) lands 30 kills; the full run lands 500:
//! `cargo test --release --test it crash_cli:: -- --ignored --nocapture`
//! (MODELZIP_CRASH_KILLS and MODELZIP_CRASH_SEED override the count and the seed).

use crate::support;

use modelzip::fault::{bytes_written, set_write_budget};
use modelzip::{
    AppendMode, Archive, ArchiveWriter, Removal, Result, Tensor, WriteOptions, append_tag, compact,
    remove_tags,
};
use serde_json::Value;
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// Parameter name -> SHA-256 of its raw data, as `show --json` reports it.
type Hashes = BTreeMap<String, String>;

/// What the archive may hold after an operation, given what it held before.
enum Expect {
    /// The new tag, with these hashes, is absent or complete.
    Add(String, Hashes),
    /// The archive was deleted first; afterwards it is absent or holds just this tag.
    Create(String, Hashes),
    /// Either all of these tags are gone or none is.
    Remove(Vec<String>),
    /// The tags and their data are unchanged.
    Same,
}

/// What an operation is planned from.
struct Plan<'a> {
    tags: &'a [String],
    /// A name for a new tag, unused so far.
    new_tag: String,
    /// A persistables directory with fresh data for a new tag.
    source: String,
    source_hashes: Hashes,
    /// A random number for the operation's choices.
    pick: usize,
}

impl Plan<'_> {
    fn some_tag(&self) -> String {
        self.tags[self.pick % self.tags.len()].clone()
    }
}

/// One kind of write the harness kills.
struct Op {
    name: &'static str,
    /// Relative frequency.
    weight: u32,
    /// Whether it applies to an archive with these tags.
    when: fn(&[String]) -> bool,
    /// The arguments after `modelzip` (`ARCHIVE` stands for the archive) and the outcome.
    plan: fn(&Plan<'_>) -> (Vec<String>, Expect),
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// A Paddle ProgramDesc every packed tag carries, so `convert` has a graph to re-encode.
const GRAPH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/paddle/3.3.1/mlp.pdmodel"
);

/// The operations, one entry each.
const OPS: &[Op] = &[
    Op {
        name: "pack-create",
        weight: 1,
        when: |t| t.len() >= 3,
        plan: |p| {
            (
                words(&format!(
                    "pack ARCHIVE {} --tag {} --graph {GRAPH} -q",
                    p.source, p.new_tag
                )),
                Expect::Create(p.new_tag.clone(), p.source_hashes.clone()),
            )
        },
    },
    Op {
        name: "pack-append",
        weight: 4,
        when: |t| t.len() < 6,
        plan: |p| {
            (
                words(&format!(
                    "pack ARCHIVE {} --tag {} --graph {GRAPH} -q",
                    p.source, p.new_tag
                )),
                Expect::Add(p.new_tag.clone(), p.source_hashes.clone()),
            )
        },
    },
    Op {
        name: "pack-rewrite",
        weight: 2,
        when: |t| !t.is_empty() && t.len() < 6,
        plan: |p| {
            (
                words(&format!(
                    "pack ARCHIVE {} --tag {} --graph {GRAPH} --rewrite -q",
                    p.source, p.new_tag
                )),
                Expect::Add(p.new_tag.clone(), p.source_hashes.clone()),
            )
        },
    },
    Op {
        name: "rm",
        weight: 3,
        when: |t| t.len() >= 2,
        plan: |p| {
            (
                words(&format!("rm ARCHIVE {}", p.some_tag())),
                Expect::Remove(vec![p.some_tag()]),
            )
        },
    },
    Op {
        name: "prune",
        weight: 3,
        when: |t| t.len() >= 3,
        plan: |p| {
            (
                words("prune ARCHIVE --keep 2"),
                Expect::Remove(p.tags[..p.tags.len() - 2].to_vec()),
            )
        },
    },
    Op {
        name: "rm-in-place",
        weight: 2,
        when: |t| t.len() >= 2,
        plan: |p| {
            (
                words(&format!("rm ARCHIVE {} --in-place", p.some_tag())),
                Expect::Remove(vec![p.some_tag()]),
            )
        },
    },
    Op {
        name: "prune-in-place",
        weight: 2,
        when: |t| t.len() >= 3,
        plan: |p| {
            (
                words("prune ARCHIVE --keep 2 --in-place"),
                Expect::Remove(p.tags[..p.tags.len() - 2].to_vec()),
            )
        },
    },
    Op {
        name: "convert-flatbuffers",
        weight: 1,
        when: |t| !t.is_empty(),
        plan: |p| {
            (
                words(&format!(
                    "convert ARCHIVE --tag {} --to flatbuffers -q",
                    p.some_tag()
                )),
                Expect::Same,
            )
        },
    },
    Op {
        name: "convert-programdesc",
        weight: 1,
        when: |t| !t.is_empty(),
        plan: |p| {
            (
                words(&format!(
                    "convert ARCHIVE --tag {} --to programdesc -q",
                    p.some_tag()
                )),
                Expect::Same,
            )
        },
    },
    Op {
        name: "compact",
        weight: 2,
        when: |t| !t.is_empty(),
        plan: |_| (words("compact ARCHIVE"), Expect::Same),
    },
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_modelzip")
}

fn hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes a persistables directory for tag number `n`: `params` tensors of `floats`
/// values each, new data per tag, plus one tensor every tag shares.
fn write_source(dir: &Path, n: u64, params: usize, floats: usize) -> Hashes {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("block")).unwrap();
    let mut hashes = Hashes::new();
    let mut put = |name: &str, vals: Vec<f32>| {
        let t = Tensor::from_slice(vec![vals.len() as u64], &vals).unwrap();
        let mut bytes = Vec::new();
        modelzip::tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
        hashes.insert(name.to_string(), hex(t.view().data()));
    };
    for i in 0..params {
        put(&format!("block/w{i}"), values(n * 1000 + i as u64, floats));
    }
    put("shared", values(42, floats / 4));
    hashes
}

/// The archive's tags and their hashes, through `tags --json` and `show --json`, plus
/// `verify`; `None` when the archive does not exist.
fn observe(archive: &Path) -> std::result::Result<Option<Vec<(String, Hashes)>>, String> {
    if !archive.exists() {
        return Ok(None);
    }
    let run = |args: &[&str]| -> std::result::Result<Vec<u8>, String> {
        let out = Command::new(exe())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(format!(
                "modelzip {args:?}: exit {:?}: {}{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let a = archive.to_str().unwrap();
    let tags: Value = serde_json::from_slice(&run(&["tags", a, "--json"])?).unwrap();
    run(&["verify", a])?;
    let mut out = Vec::new();
    for t in tags["tags"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap().to_string();
        let show: Value =
            serde_json::from_slice(&run(&["show", a, "--tag", &name, "--json"])?).unwrap();
        let hashes = show["params"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["data_sha256"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        out.push((name, hashes));
    }
    Ok(Some(out))
}

/// Files beside the archive other than it and its lock: temp files and journals.
fn leftovers(dir: &Path, archive: &Path) -> Vec<String> {
    stray_files(dir, archive)
        .into_iter()
        .filter(|f| !f.starts_with("src"))
        .collect()
}

struct Totals {
    kills: u64,
    finished: u64,
    per_op: BTreeMap<&'static str, (u64, u64)>,
    journals: u64,
    temps: u64,
}

/// Runs operations until `kills` of them were SIGKILLed while running; panics on the
/// first violated guarantee.
fn harness(kills: u64, seed: u64, params: usize, floats: usize) -> Totals {
    let d = tempfile::tempdir().unwrap();
    let archive = d.path().join("model.zip");
    let src = d.path().join("src");
    let mut rng = Rng(seed);
    let mut state: Vec<(String, Hashes)> = Vec::new();
    let mut totals = Totals {
        kills: 0,
        finished: 0,
        per_op: BTreeMap::new(),
        journals: 0,
        temps: 0,
    };
    // Typical run time of each operation, learned from runs that finished.
    let mut typical: BTreeMap<&'static str, Duration> = BTreeMap::new();
    let mut n = 0u64;
    while totals.kills < kills {
        n += 1;
        assert!(
            n < kills * 20 + 200,
            "too few kills landed: {}",
            totals.kills
        );
        let tags: Vec<String> = state.iter().map(|(t, _)| t.clone()).collect();
        let candidates: Vec<&Op> = OPS.iter().filter(|o| (o.when)(&tags)).collect();
        let total_weight: u32 = candidates.iter().map(|o| o.weight).sum();
        let mut w = (rng.next() % u64::from(total_weight)) as u32;
        let op = candidates
            .iter()
            .find(|o| {
                if w < o.weight {
                    true
                } else {
                    w -= o.weight;
                    false
                }
            })
            .unwrap();
        let source_hashes = write_source(&src, n, params, floats);
        let plan = Plan {
            tags: &tags,
            new_tag: format!("s{n}"),
            source: src.to_str().unwrap().to_string(),
            source_hashes,
            pick: rng.next() as usize,
        };
        let (args, expect) = (op.plan)(&plan);
        if matches!(expect, Expect::Create(..)) {
            std::fs::remove_file(&archive).unwrap();
        }
        let args: Vec<String> = args
            .into_iter()
            .map(|a| {
                if a == "ARCHIVE" {
                    archive.to_str().unwrap().to_string()
                } else {
                    a
                }
            })
            .collect();
        // Kill at a random moment of a typical run of this operation (or a little past its
        // end, so that some runs finish and the archive grows). Its first run, and
        // every fourth, runs to the end to learn (again) how long a run takes.
        let calibrate = !typical.contains_key(op.name) || n.is_multiple_of(4);
        let span = typical
            .get(op.name)
            .map_or(1, |t| t.as_micros() as u64)
            .max(1);
        let delay = Duration::from_micros(rng.next() % span);
        let started = Instant::now();
        let mut child = Command::new(exe())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let killed = if calibrate {
            let _ = child.wait();
            typical.insert(op.name, started.elapsed());
            false
        } else {
            std::thread::sleep(delay);
            match child.try_wait().unwrap() {
                Some(_) => false,
                None => {
                    child.kill().unwrap(); // SIGKILL
                    true
                }
            }
        };
        let out = child.wait_with_output().unwrap();
        let entry = totals.per_op.entry(op.name).or_default();
        if killed {
            totals.kills += 1;
            entry.0 += 1;
        } else {
            totals.finished += 1;
            entry.1 += 1;
            assert!(
                out.status.success(),
                "{} {args:?} failed: {}",
                op.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let left = leftovers(d.path(), &archive);
        if left.iter().any(|f| f.ends_with(".journal")) {
            totals.journals += 1;
        }
        if left.iter().any(|f| f.ends_with(".tmp")) {
            totals.temps += 1;
        }
        assert!(
            killed || left.is_empty(),
            "{} finished and left {left:?}",
            op.name
        );
        assert!(left.len() <= 1, "after {} (run {n}): {left:?}", op.name);
        let seen = observe(&archive)
            .unwrap_or_else(|e| panic!("after {} (run {n}, killed {killed}): {e}", op.name));
        let journal_left = leftovers(d.path(), &archive)
            .into_iter()
            .filter(|f| f.ends_with(".journal"))
            .count();
        assert_eq!(journal_left, 0, "the journal survived an open");
        let before = state.clone();
        let after: Vec<(String, Hashes)> = match &expect {
            Expect::Add(t, h) => {
                let mut v = before.clone();
                v.push((t.clone(), h.clone()));
                v
            }
            Expect::Create(t, h) => vec![(t.clone(), h.clone())],
            Expect::Remove(gone) => before
                .iter()
                .filter(|(t, _)| !gone.contains(t))
                .cloned()
                .collect(),
            Expect::Same => before.clone(),
        };
        let seen = seen.unwrap_or_default();
        let old_ok = if matches!(expect, Expect::Create(..)) {
            seen.is_empty()
        } else {
            seen == before
        };
        assert!(
            seen == after || (killed && old_ok),
            "{} {args:?} (run {n}, killed {killed}):\nbefore {:?}\nseen {:?}",
            op.name,
            names(&before),
            names(&seen)
        );
        state = seen;
    }
    // The next writer cleans up what the last kill left; then nothing stray remains.
    if !state.is_empty() {
        let out = Command::new(exe())
            .arg("compact")
            .arg(&archive)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(leftovers(d.path(), &archive).is_empty());
    }
    totals
}

fn names(v: &[(String, Hashes)]) -> Vec<&str> {
    v.iter().map(|(t, _)| t.as_str()).collect()
}

fn report(t: &Totals) {
    eprintln!(
        "crash harness: {} kills, {} operations ({} finished before their kill), 0 failures; \
         {} kills left a journal to roll back, {} left a temp file",
        t.kills,
        t.kills + t.finished,
        t.finished,
        t.journals,
        t.temps
    );
    for (op, (k, f)) in &t.per_op {
        eprintln!("  {op:<14} {k:>5} killed {f:>5} finished");
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[cfg(unix)]
#[test]
fn cli_writers_killed_at_30_random_moments_lose_nothing() {
    let t = harness(30, env_u64("MODELZIP_CRASH_SEED", 0x5eed), 6, 16 << 10);
    report(&t);
    assert!(t.per_op.values().filter(|(k, _)| *k > 0).count() >= 3);
}

/// The full run: 500 kills, tags of about 3 MiB.
#[cfg(unix)]
#[test]
#[ignore = "slow: the full crash harness (run with --release -- --ignored)"]
fn cli_writers_killed_at_500_random_moments_lose_nothing() {
    let kills = env_u64("MODELZIP_CRASH_KILLS", 500);
    let t = harness(
        kills,
        env_u64("MODELZIP_CRASH_SEED", 0xc0ffee),
        6,
        128 << 10,
    );
    report(&t);
    assert!(t.kills >= kills);
    assert!(
        t.per_op.values().all(|(k, _)| *k > 0),
        "an operation was never killed"
    );
}

// ---- a full disk, through the library ----------------------------------------------

/// Runs `op` on copies of a three-tag archive with write budgets spread over the bytes a
/// successful run writes; after each, the archive opens with the old or the new tags,
/// verifies clean, and nothing stray is left. Returns the number of budgets tried.
fn full_disk_sweep(name: &str, op: impl Fn(&Path) -> Result<()>) -> usize {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base.zip");
    let mut w = ArchiveWriter::create(&base).unwrap();
    w.add_tag(sample_tag("a", 1)).unwrap();
    w.add_tag(sample_tag("b", 2)).unwrap();
    w.finish().unwrap();
    append_tag(
        &base,
        sample_tag("c", 3),
        AppendMode::InPlace,
        &WriteOptions::default(),
    )
    .unwrap();
    let old = Archive::open(&base).unwrap();
    let old_tags = old.tags().to_vec();
    let old_dump: Vec<_> = old_tags
        .iter()
        .map(|t| dump(&old.tag(t).unwrap()))
        .collect();
    drop(old);
    let (new_tags, total) = {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(None);
        op(&p).unwrap();
        let n = bytes_written();
        (Archive::open(&p).unwrap().tags().to_vec(), n)
    };
    let mut budgets: Vec<u64> = (0..8).collect();
    budgets.extend((0..40).map(|i| i * total / 40));
    budgets.push(total.saturating_sub(1));
    budgets.sort();
    budgets.dedup();
    for &b in &budgets {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(Some(b));
        let res = op(&p);
        set_write_budget(None);
        let a = Archive::open(&p).unwrap_or_else(|e| panic!("{name} budget {b}: {e}"));
        let tags = a.tags().to_vec();
        assert!(
            tags == old_tags || (res.is_ok() && tags == new_tags),
            "{name} budget {b} ({res:?}): {tags:?}"
        );
        let r = a.verify();
        assert!(r.is_ok(), "{name} budget {b}: {:?}", r.problems);
        if tags == old_tags {
            for (t, want) in old_tags.iter().zip(&old_dump) {
                assert_eq!(&dump(&a.tag(t).unwrap()), want, "{name} budget {b}: {t}");
            }
        }
        drop(a);
        let stray = stray_files(d.path(), &p);
        assert!(stray.is_empty(), "{name} budget {b}: {stray:?}");
    }
    budgets.len()
}

#[test]
fn every_write_operation_survives_a_full_disk() {
    let opts = WriteOptions::default();
    let mut points = 0;
    points += full_disk_sweep("create", |p| {
        let mut w = ArchiveWriter::create(p)?;
        w.add_tag(sample_tag("z", 9))?;
        w.finish()
    });
    points += full_disk_sweep("in-place append", |p| {
        append_tag(
            p,
            sample_tag("d", 4),
            AppendMode::InPlace,
            &WriteOptions::default(),
        )
    });
    points += full_disk_sweep("rewrite append", |p| {
        append_tag(
            p,
            sample_tag("d", 4),
            AppendMode::Rewrite,
            &WriteOptions::default(),
        )
    });
    points += full_disk_sweep("rm", |p| {
        remove_tags(p, Removal::tags(["a"]), &opts).map(drop)
    });
    points += full_disk_sweep("prune", |p| {
        remove_tags(p, Removal::keep_newest(1), &opts).map(drop)
    });
    points += full_disk_sweep("rm-in-place", |p| {
        remove_tags(p, Removal::tags(["a"]).in_place(true), &opts).map(drop)
    });
    points += full_disk_sweep("compact", |p| compact(p, &opts).map(drop));
    eprintln!("full-disk injection: {points} write budgets over 7 operations, 0 failures");
    assert!(points >= 6 * 40);
}
