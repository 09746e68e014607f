//! Sharded saves (`modelzip::sharded`): ranks (threads here; processes in
//! python/tests/test_sharded.py) write row shards of one tag; the committed tag equals
//! the concatenated rows and verifies; a missing rank, a gap, an overlap or ranks that
//! disagree on the plan leave the archive reading as it did (every entry's bytes), the
//! extension's blocks freed, and nothing cut that a reader of the staged archive holds.

use modelzip::sharded::{ShardedOptions, ShardedReport, ShardedWriter, TensorSpec};
use modelzip::{Archive, ArchiveWriter, DType, TagBuilder, Tensor, WriteOptions};
use std::path::Path;
use std::time::Duration;

/// Rows of tensor `t` (`rows` x 3 f32), deterministic per seed.
fn rows_of(seed: u32, rows: u64) -> Vec<f32> {
    (0..rows * 3)
        .map(|i| (seed * 1000 + i as u32) as f32 * 0.5)
        .collect()
}

fn specs() -> Vec<TensorSpec> {
    vec![
        TensorSpec::param("emb", DType::Fp32, vec![10, 3]),
        TensorSpec::param("w", DType::Fp32, vec![7, 3]),
        TensorSpec::updater("w", 0, DType::Fp32, vec![7, 3]),
        TensorSpec::updater("w", 1, DType::Fp32, vec![7, 3]),
    ]
}

/// Rows `[a, b)` of `n` split over `world` ranks (as numpy.array_split).
fn split(n: u64, world: u32, rank: u32) -> (u64, u64) {
    let (w, r) = (u64::from(world), u64::from(rank));
    let (q, m) = (n / w, n % w);
    let a = r * q + r.min(m);
    (a, a + q + u64::from(r < m))
}

fn opts(rank: u32, world: u32, timeout: Duration) -> ShardedOptions {
    let mut o = ShardedOptions::new(rank, world);
    o.timeout = timeout;
    o.write = WriteOptions {
        fsync: false,
        ..WriteOptions::default()
    };
    o
}

/// Rank `rank` of `world` writes its rows of every tensor of `specs()`, seeds from
/// `seed` (emb always seed 1: a frozen embedding).
fn rank_save(
    path: &Path,
    tag: &str,
    rank: u32,
    world: u32,
    seed: u32,
    timeout: Duration,
) -> modelzip::Result<ShardedReport> {
    let mut w = ShardedWriter::open(path, tag, &specs(), &opts(rank, world, timeout))?;
    for (i, s) in specs().iter().enumerate() {
        let n = s.dims[0];
        let (a, b) = split(n, world, rank);
        let seed = if s.name == "emb" { 1 } else { seed + i as u32 };
        let all = rows_of(seed, n);
        let t = Tensor::from_slice(vec![b - a, 3], &all[(a * 3) as usize..(b * 3) as usize])?;
        match s.updater_slot {
            None => w.write_param(&s.name, a, &t.view())?,
            Some(k) => w.write_updater(&s.name, k, a, &t.view())?,
        }
    }
    if rank == 0 {
        w.metadata(br#"{"step": 5}"#)?;
    }
    w.finish()
}

fn group_save(
    path: &Path,
    tag: &str,
    world: u32,
    seed: u32,
) -> Vec<modelzip::Result<ShardedReport>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| s.spawn(move || rank_save(path, tag, r, world, seed, Duration::from_secs(30))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// What a reader sees of an archive: its tags and every entry's bytes.
type Contents = (Vec<String>, std::collections::BTreeMap<String, Vec<u8>>);

fn contents(path: &Path) -> Contents {
    let a = Archive::open(path).unwrap();
    let entries = a
        .entry_names()
        .map(|n| (n.to_string(), a.entry_bytes(n).unwrap().to_vec()))
        .collect();
    (a.tags().to_vec(), entries)
}

/// Bytes the file occupies on disk (its blocks, holes not counted).
fn allocated(path: &Path) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(path).unwrap()) * 512
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).unwrap().len()
    }
}

fn base_archive(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("run.zip");
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(
        TagBuilder::new("init").param("x", Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap()),
    )
    .unwrap();
    w.finish().unwrap();
    path
}

#[test]
fn four_ranks_write_one_tag_that_equals_the_concatenated_rows_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    for r in group_save(&path, "step-1", 4, 10) {
        let r = r.unwrap();
        assert_eq!((r.world_size, r.shards), (4, 4));
    }
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["init", "step-1"]);
    let t = a.tag("step-1").unwrap();
    assert_eq!(
        t.param("emb").unwrap().view().to_vec::<f32>().unwrap(),
        rows_of(1, 10)
    );
    assert_eq!(
        t.param("w").unwrap().view().to_vec::<f32>().unwrap(),
        rows_of(11, 7)
    );
    assert_eq!(t.param("w").unwrap().view().dims(), &[7, 3]);
    let upd = &t.updater()[0];
    assert_eq!(upd.name, "w");
    for (k, loc) in upd.arrays.iter().enumerate() {
        let v = t.tensor(loc).unwrap();
        assert_eq!(v.view().to_vec::<f32>().unwrap(), rows_of(12 + k as u32, 7));
    }
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    let meta: serde_json::Value = serde_json::from_slice(&t.metadata().unwrap().unwrap()).unwrap();
    assert_eq!(meta["step"], 5);
    assert_eq!(meta["sharded"]["world_size"], 4);
    // The sharded commit's summary is current and records the world size (summary
    // version 2), so a listing reads no metadata.json.
    let summary = a.summary().unwrap();
    assert_eq!(summary[1].sharded, Some(4));
    assert_eq!(summary[0].sharded, None);
    // `tags` marks the sharded tag and says by how many ranks; the column appears only
    // when a tag is sharded.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .args(["tags", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["tags"][0]["sharded"], serde_json::Value::Null);
    assert_eq!(doc["tags"][1]["sharded"]["world_size"], 4);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .arg("tags")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].trim_end().ends_with("ranks"), "{text}");
    assert!(lines[1].trim_end().ends_with(" -"), "{text}");
    assert!(lines[2].trim_end().ends_with(" 4"), "{text}");
    // Nothing left beside the archive but the lock and lease files.
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "run.zip" && n != "run.zip.lock" && n != "run.zip.sharded-lease")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_tampered_shard_is_found_by_verify_naming_the_entry_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    for r in group_save(&path, "step-1", 2, 10) {
        r.unwrap();
    }
    let a = Archive::open(&path).unwrap();
    let shards = a.entry_bytes("step-1/shards.txt").unwrap().to_vec();
    let text = String::from_utf8(shards).unwrap();
    // Every tensor file: its record header and one range per rank.
    assert_eq!(text.lines().count(), 4 * 3, "{text}");
    drop(a);
    // Flip a data byte of the last row of "w" (rank 1's).
    let mut bytes = std::fs::read(&path).unwrap();
    // The entry's local header is its name's first occurrence; its last data byte is
    // in rank 1's rows.
    let name = b"step-1/params/1.lodtensor";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() - 30;
    let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]) as usize;
    let size = u32::from_le_bytes(bytes[at + 18..at + 22].try_into().unwrap()) as usize;
    let end = at + 30 + u16_at(at + 26) + u16_at(at + 28) + size;
    bytes[end - 2] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let a = Archive::open(&path).unwrap();
    let problems = a.verify().problems;
    assert!(
        problems
            .iter()
            .any(|p| p.entry.as_deref() == Some("step-1/params/1.lodtensor")
                && p.message.contains("(written by rank 1) have SHA-256")),
        "{problems:?}"
    );
}

#[test]
fn a_missing_rank_times_out_naming_it_and_leaves_the_archive_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let before = contents(&path);
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = [0u32, 1, 2]
            .into_iter()
            .map(|r| {
                let path = &path;
                s.spawn(move || rank_save(path, "step-1", r, 4, 10, Duration::from_millis(800)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let e = results[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("waiting for rank 3 of 4"), "{e}");
    assert!(e.contains("nothing was committed"), "{e}");
    for r in &results[1..] {
        let e = r.as_ref().unwrap_err().to_string();
        assert!(e.contains("was not committed"), "{e}");
    }
    assert_eq!(contents(&path), before);
    // The next save succeeds.
    for r in group_save(&path, "step-1", 2, 10) {
        r.unwrap();
    }
    assert!(Archive::open(&path).unwrap().verify().is_ok());
}

#[test]
fn gaps_overlaps_and_disagreeing_ranks_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let before = contents(&path);
    let one = |rank: u32, rows: std::ops::Range<u64>, dims: Vec<u64>| {
        let path = path.clone();
        move || -> modelzip::Result<ShardedReport> {
            let specs = vec![TensorSpec::param("w", DType::Fp32, dims)];
            let mut w =
                ShardedWriter::open(&path, "s", &specs, &opts(rank, 2, Duration::from_secs(2)))?;
            let n = rows.end - rows.start;
            let t = Tensor::from_slice(vec![n, 3], &rows_of(rank, n))?;
            w.write_param("w", rows.start, &t.view())?;
            w.finish()
        }
    };
    let run = |a: Box<dyn FnOnce() -> modelzip::Result<ShardedReport> + Send>,
               b: Box<dyn FnOnce() -> modelzip::Result<ShardedReport> + Send>| {
        std::thread::scope(|s| {
            let ha = s.spawn(a);
            let hb = s.spawn(b);
            (ha.join().unwrap(), hb.join().unwrap())
        })
    };
    // A gap: rows 3..4 written by nobody.
    let (r0, _) = run(
        Box::new(one(0, 0..3, vec![8, 3])),
        Box::new(one(1, 4..8, vec![8, 3])),
    );
    let e = r0.unwrap_err().to_string();
    assert!(e.contains("no rank wrote rows 3..4 of \"w\""), "{e}");
    assert_eq!(contents(&path), before);
    // An overlap: row 3 written twice.
    let (r0, _) = run(
        Box::new(one(0, 0..4, vec![8, 3])),
        Box::new(one(1, 3..8, vec![8, 3])),
    );
    let e = r0.unwrap_err().to_string();
    assert!(e.contains("both wrote row 3 of \"w\""), "{e}");
    assert_eq!(contents(&path), before);
    // Rank 1 given another shape: its own error names the disagreement; rank 0 times out.
    let (r0, r1) = run(
        Box::new(one(0, 0..4, vec![8, 3])),
        Box::new(one(1, 4..9, vec![9, 3])),
    );
    let e1 = r1.unwrap_err().to_string();
    assert!(e1.contains("differs from rank 0's"), "{e1}");
    let e0 = r0.unwrap_err().to_string();
    assert!(e0.contains("waiting for rank 1 of 2"), "{e0}");
    assert_eq!(contents(&path), before);
    // A shard that does not fit its global shape is refused by the rank writing it.
    let e = one(0, 6..10, vec![8, 3])().unwrap_err().to_string();
    assert!(e.contains("rank 0: a shard of \"w\""), "{e}");
    assert_eq!(contents(&path), before);
}

#[test]
fn an_unchanged_sharded_tensor_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    for r in group_save(&path, "step-1", 3, 10) {
        r.unwrap();
    }
    let reports = group_save(&path, "step-2", 3, 20);
    let r0 = reports[0].as_ref().unwrap();
    // The frozen embedding; the other tensors changed.
    assert_eq!(r0.deduplicated, 1);
    let a = Archive::open(&path).unwrap();
    let t = a.tag("step-2").unwrap();
    let params = String::from_utf8(a.entry_bytes("step-2/params.txt").unwrap().to_vec()).unwrap();
    assert!(params.contains("emb step-1/0"), "{params}");
    assert_eq!(
        t.param("emb").unwrap().view().to_vec::<f32>().unwrap(),
        rows_of(1, 10)
    );
    assert_eq!(
        t.param("w").unwrap().view().to_vec::<f32>().unwrap(),
        rows_of(21, 7)
    );
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    // Removing the first tag re-homes the shared tensor; the archive still verifies.
    drop(a);
    modelzip::remove_tags(
        &path,
        modelzip::Removal::tags(["step-1"]),
        &WriteOptions::default(),
    )
    .unwrap();
    let a = Archive::open(&path).unwrap();
    assert_eq!(
        a.tag("step-2")
            .unwrap()
            .param("emb")
            .unwrap()
            .view()
            .to_vec::<f32>()
            .unwrap(),
        rows_of(1, 10)
    );
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
}

#[test]
fn readers_see_the_old_archive_while_ranks_write_and_a_dead_group_is_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let before = contents(&path);
    let before_blocks = allocated(&path);
    // 3 MiB of rows: rank 0 writes its 1.5 MiB.
    let rows = 1u64 << 18;
    let specs = vec![TensorSpec::param("w", DType::Fp32, vec![rows, 3])];
    let mut w0 =
        ShardedWriter::open(&path, "s", &specs, &opts(0, 2, Duration::from_secs(5))).unwrap();
    let t = Tensor::from_slice(vec![rows / 2, 3], &rows_of(0, rows / 2)).unwrap();
    w0.write_param("w", 0, &t.view()).unwrap();
    // Staged: the archive reads as before (and verifies), with the extension as dead bytes.
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["init"]);
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    // Rank 0 gives up (dropped unfinished) while `a` holds the staged archive: the
    // archive reads as it did; nothing `a` maps was cut (its summary, past the old end,
    // still reads: a cut file would fault it), and the extension's blocks are freed.
    drop(w0);
    let summaries = a.tag_summaries().unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].name, "init");
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    drop(a);
    assert_eq!(contents(&path), before);
    assert!(Archive::open(&path).unwrap().verify().is_ok());
    #[cfg(target_os = "linux")]
    assert!(
        allocated(&path) < before_blocks + (256 << 10),
        "{} bytes allocated after the rollback, {before_blocks} before",
        allocated(&path)
    );
    let _ = before_blocks;
    assert!(!dir.path().join("run.zip.sharded-undo").exists());
}

/// A group file replaced after rank 0 staged the save, placing the extension at byte 0
/// (over the committed entries): the other ranks refuse it, checked against the
/// archive's undo record, and write nothing; the archive reads as before.
#[test]
fn a_group_file_placing_the_extension_over_committed_entries_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let before = contents(&path);
    let specs = vec![TensorSpec::param("w", DType::Fp32, vec![4, 3])];
    let w0 = ShardedWriter::open(&path, "s", &specs, &opts(0, 2, Duration::from_secs(5))).unwrap();
    let gp = dir.path().join("run.zip.sharded-s");
    let mut g: serde_json::Value = serde_json::from_slice(&std::fs::read(&gp).unwrap()).unwrap();
    assert!(g["ext_start"].as_u64().unwrap() > 0);
    g["ext_start"] = 0.into();
    std::fs::write(&gp, serde_json::to_vec(&g).unwrap()).unwrap();
    let e = ShardedWriter::open(&path, "s", &specs, &opts(1, 2, Duration::from_secs(5)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("places the extension at bytes 0..")
            && e.contains("the archive's staging starts its extension at byte")
            && e.contains("not this archive's"),
        "{e}"
    );
    drop(w0);
    assert_eq!(contents(&path), before);
    assert!(Archive::open(&path).unwrap().verify().is_ok());
}

/// Two groups saving the same tag with the same description at once, told apart by
/// their group ids: the second group's rank 0 cannot take the write lock, its rank 1
/// finds the first group's save and is refused (its plan digest differs), and the first
/// group commits its own rows.
#[test]
fn two_groups_saving_one_tag_are_told_apart_by_their_group_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let save = |rank: u32, group: &str, seed: u32, timeout: Duration| {
        let path = path.clone();
        let group = group.to_string();
        move || -> modelzip::Result<ShardedReport> {
            let specs = vec![TensorSpec::param("w", DType::Fp32, vec![4, 3])];
            let mut o = opts(rank, 2, timeout);
            o.group = Some(group);
            let mut w = ShardedWriter::open(&path, "step-1", &specs, &o)?;
            let t = Tensor::from_slice(vec![2, 3], &rows_of(seed, 2))?;
            w.write_param("w", 2 * u64::from(rank), &t.view())?;
            w.finish()
        }
    };
    let group_file = dir.path().join("run.zip.sharded-step-1");
    std::thread::scope(|s| {
        // Group A's rank 0 stages the save and waits for its rank 1.
        let a0 = s.spawn(save(0, "job-a", 1, Duration::from_secs(30)));
        while !group_file.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Group B: rank 0 finds the archive locked, rank 1 finds A's save and is refused.
        let b0 = save(0, "job-b", 2, Duration::from_secs(2))()
            .unwrap_err()
            .to_string();
        assert!(b0.contains("locked") || b0.contains("another"), "{b0}");
        let b1 = save(1, "job-b", 2, Duration::from_secs(2))()
            .unwrap_err()
            .to_string();
        assert!(b1.contains("the save plan differs from rank 0's"), "{b1}");
        assert!(b1.contains("group ids differ"), "{b1}");
        // A's rank 1 arrives: A commits its own rows.
        let a1 = s.spawn(save(1, "job-a", 1, Duration::from_secs(30)));
        a0.join().unwrap().unwrap();
        a1.join().unwrap().unwrap();
    });
    let a = Archive::open(&path).unwrap();
    let w = a.tag("step-1").unwrap().param("w").unwrap();
    let mut want = rows_of(1, 2);
    want.extend(rows_of(1, 2));
    assert_eq!(w.view().to_vec::<f32>().unwrap(), want);
    assert!(a.verify().is_ok());
}

/// A one-rank sharded save (rank 0 stages, writes its rows, commits) whose writes fail
/// after every possible number of bytes, as a full disk would: the archive then reads
/// with the old tags (or, when the save succeeded, the old and the new), verifies, and
/// holds the same data; the next writer of the archive (an in-place append) succeeds and
/// leaves no sidecar of the save behind.
#[test]
fn a_sharded_save_survives_a_full_disk_at_every_offset() {
    use modelzip::fault::{bytes_written, set_write_budget};
    let root = tempfile::tempdir().unwrap();
    let base = base_archive(root.path());
    let old = contents(&base);
    let save = |p: &Path| rank_save(p, "step-1", 0, 1, 10, Duration::from_secs(5));
    let total = {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(None);
        save(&p).unwrap();
        bytes_written()
    };
    let want = {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        std::fs::copy(&base, &p).unwrap();
        save(&p).unwrap();
        let a = Archive::open(&p).unwrap();
        let t = a.tag("step-1").unwrap();
        specs()
            .iter()
            .filter(|s| s.updater_slot.is_none())
            .map(|s| t.param(&s.name).unwrap().view().to_vec::<f32>().unwrap())
            .collect::<Vec<_>>()
    };
    // The bytes rank 0 writes up to its rank's claim (the last of `open`), the claim's
    // included: cuts inside the claim fail after the staging is complete.
    let opened = {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(None);
        let w = ShardedWriter::open(&p, "step-1", &specs(), &opts(0, 1, Duration::from_secs(5)))
            .unwrap();
        let n = bytes_written();
        drop(w);
        n
    };
    let mut budgets: Vec<u64> = (0..10).chain((0..200).map(|i| i * total / 200)).collect();
    budgets.extend([total.saturating_sub(1), total, total + 4096]);
    budgets.extend([opened - 1, opened - 20]);
    budgets.sort();
    budgets.dedup();
    let mut failures = 0;
    for &n in &budgets {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(Some(n));
        let res = save(&p);
        set_write_budget(None);
        failures += usize::from(res.is_err());
        let check = |a: &Archive, committed: bool| {
            let t = a.tag("step-1").unwrap();
            let got: Vec<Vec<f32>> = specs()
                .iter()
                .filter(|s| s.updater_slot.is_none())
                .map(|s| t.param(&s.name).unwrap().view().to_vec::<f32>().unwrap())
                .collect();
            assert!(committed, "budget {n}: a failed save left its tag");
            assert_eq!(got, want, "budget {n}");
        };
        // A failed save ended its group (no rank is left waiting on it; the rollback of
        // the archive's bytes may itself run out of space, and is then the next writer's).
        if let Err(e) = &res {
            let group: Vec<String> = std::fs::read_dir(d.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|f| f.starts_with("run.zip.sharded-step-1"))
                .collect();
            assert!(group.is_empty(), "budget {n}: {group:?} left ({e})");
        }
        // Right after: the old archive, or the old one and the new tag.
        let a = Archive::open(&p).unwrap_or_else(|e| panic!("budget {n}: {e}"));
        let has_new = a.tags().iter().any(|t| t == "step-1");
        assert_eq!(
            has_new,
            res.is_ok(),
            "budget {n}: {:?} {:?}",
            a.tags(),
            res.err()
        );
        if has_new {
            check(&a, true);
        }
        assert!(a.verify().is_ok(), "budget {n}: {:?}", a.verify().problems);
        for (name, bytes) in &old.1 {
            if !name.starts_with("init/") {
                continue;
            }
            assert_eq!(
                &a.entry_bytes(name).unwrap().to_vec(),
                bytes,
                "budget {n}: {name}"
            );
        }
        drop(a);
        // The next writer rolls back whatever the failed save left and appends.
        modelzip::append_tag(
            &p,
            TagBuilder::new("next").param("x", Tensor::from_slice(vec![1], &[5f32]).unwrap()),
            modelzip::AppendMode::InPlace,
            &WriteOptions {
                wait_for_lock: true,
                ..WriteOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("budget {n}: the next writer: {e}"));
        let a = Archive::open(&p).unwrap();
        assert_eq!(
            a.tags().len(),
            2 + usize::from(has_new),
            "budget {n}: {:?}",
            a.tags()
        );
        if has_new {
            check(&a, true);
        }
        assert!(a.verify().is_ok(), "budget {n}: {:?}", a.verify().problems);
        drop(a);
        let stray: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| !["run.zip", "run.zip.lock", "run.zip.sharded-lease"].contains(&f.as_str()))
            .collect();
        assert!(stray.is_empty(), "budget {n}: left {stray:?}");
    }
    assert!(
        failures > budgets.len() / 2 && failures < budgets.len(),
        "{failures} of {} runs failed",
        budgets.len()
    );
    eprintln!(
        "sharded save: {} cut points over {total} bytes, {failures} failed writes",
        budgets.len()
    );
}

/// Rows of 1 MiB and more go to the disk around the page cache (`O_DIRECT`, their whole
/// 4 KiB blocks; the partial blocks they share with their neighbours buffered): three
/// ranks whose rows start and end mid-block commit exactly the global tensor, and a full
/// disk at any of 20 points of a one-rank save of it (inside the direct writes too)
/// leaves the archive as it was, the next save whole.
#[test]
fn large_rows_written_around_the_page_cache_commit_exactly() {
    use modelzip::fault::{bytes_written, set_write_budget};
    const ROWS: u64 = 1001;
    const COLS: u64 = 1531; // 6,124 bytes a row: rows start and end mid-block
    let all: Vec<f32> = (0..ROWS * COLS).map(|i| (i % 100_003) as f32).collect();
    let specs = vec![TensorSpec::param("big", DType::Fp32, vec![ROWS, COLS])];
    let save = |path: &Path, rank: u32, world: u32| -> modelzip::Result<ShardedReport> {
        let mut w = ShardedWriter::open(
            path,
            "big",
            &specs,
            &opts(rank, world, Duration::from_secs(30)),
        )?;
        let (a, b) = split(ROWS, world, rank);
        let t = Tensor::from_slice(
            vec![b - a, COLS],
            &all[(a * COLS) as usize..(b * COLS) as usize],
        )?;
        w.write_param("big", a, &t.view())?;
        w.finish()
    };
    let root = tempfile::tempdir().unwrap();
    let path = base_archive(root.path());
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                s.spawn({
                    let path = &path;
                    let save = &save;
                    move || save(path, r, 3)
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
    });
    let a = Archive::open(&path).unwrap();
    let got = a
        .tag("big")
        .unwrap()
        .param("big")
        .unwrap()
        .view()
        .to_vec::<f32>()
        .unwrap();
    assert!(
        got == all,
        "the committed tensor differs from the global one"
    );
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    drop(a);

    let bdir = root.path().join("b");
    std::fs::create_dir_all(&bdir).unwrap();
    let base = base_archive(&bdir);
    let old = contents(&base);
    let total = {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(None);
        save(&p, 0, 1).unwrap();
        bytes_written()
    };
    for i in 1..=20u64 {
        let n = i * total / 21;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(Some(n));
        let res = save(&p, 0, 1);
        set_write_budget(None);
        assert!(res.is_err(), "budget {n} of {total}: the save did not fail");
        let a = Archive::open(&p).unwrap_or_else(|e| panic!("budget {n}: {e}"));
        assert_eq!(a.tags(), old.0.as_slice(), "budget {n}");
        assert!(a.verify().is_ok(), "budget {n}: {:?}", a.verify().problems);
        drop(a);
        save(&p, 0, 1).unwrap_or_else(|e| panic!("budget {n}: the next save: {e}"));
        let a = Archive::open(&p).unwrap();
        let got = a
            .tag("big")
            .unwrap()
            .param("big")
            .unwrap()
            .view()
            .to_vec::<f32>()
            .unwrap();
        assert!(got == all, "budget {n}: the next save's tensor differs");
    }
}
