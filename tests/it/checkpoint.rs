//! The training-loop checkpoint API: retention, sharing, async saves, resume.

use modelzip::ErrorKind;
use modelzip::Tensor;
use modelzip::checkpoint::{
    Checkpoint, CheckpointOptions, Checkpointer, Goal, KeepBest, OpenReport, Retention,
};
use modelzip::fault::set_write_budget;
use modelzip::{
    AppendMode, Archive, ArchiveWriter, TagBuilder, WriteLock, WriteOptions, append_tag,
};

fn ckpt(step: u64, loss: f64) -> Checkpoint {
    let mut c = Checkpoint::new(step);
    c.params.push((
        "frozen".into(),
        Tensor::from_slice(vec![256], &[0.5f32; 256]).unwrap(),
    ));
    c.params.push((
        "w".into(),
        Tensor::from_slice(vec![4], &[step as f32, 1.0, 2.0, 3.0]).unwrap(),
    ));
    c.metrics.insert("loss".into(), loss);
    c.metrics.insert("acc".into(), 1.0 - loss);
    c
}

fn with(retention: Retention) -> CheckpointOptions {
    CheckpointOptions {
        retention,
        ..CheckpointOptions::default()
    }
}

/// Retention removes checkpoints in place: over 20 saves of a 64 KiB checkpoint with
/// keep-last 5, the bytes written stay near one checkpoint per save (plus the occasional
/// compaction), far below rewriting the 5 kept checkpoints at every save.
#[test]
fn retention_removes_in_place_not_by_rewriting_the_archive() {
    use modelzip::fault::bytes_written;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(
        &path,
        with(Retention {
            keep_last: Some(5),
            ..Retention::default()
        }),
    )
    .unwrap();
    let ckpt_bytes = 16384 * 4;
    let mut total = 0u64;
    let mut compactions = 0;
    for step in 1..=20u64 {
        let mut k = Checkpoint::new(step);
        let w: Vec<f32> = (0..16384).map(|i| (i as u64 * 31 + step) as f32).collect();
        k.params
            .push(("w".into(), Tensor::from_slice(vec![16384], &w).unwrap()));
        set_write_budget(None);
        let r = c.save(&k).unwrap();
        total += bytes_written();
        compactions += usize::from(r.compacted);
        if step > 5 {
            assert_eq!(r.removed.len(), 1, "step {step}");
        }
    }
    assert_eq!(c.tags().unwrap().len(), 5);
    let a = Archive::open(&path).unwrap();
    assert!(a.verify().is_ok());
    // Rewriting the kept checkpoints at every removal would write >= 15 x 5 checkpoints.
    let rewrite_floor = 15 * 5 * ckpt_bytes;
    assert!(
        total < rewrite_floor / 2,
        "{total} bytes written for 20 saves; rewriting would be >= {rewrite_floor}"
    );
    assert!(compactions >= 1, "dead bytes were never compacted");
}

#[test]
fn keep_every_and_keep_best_combine_and_the_newest_is_always_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(
        &path,
        with(Retention {
            keep_every: Some(5),
            keep_best: Some(KeepBest {
                metric: "acc".into(),
                count: 2,
                goal: Goal::Max,
            }),
            ..Retention::default()
        }),
    )
    .unwrap();
    let losses = [0.9, 0.1, 0.8, 0.2, 0.7, 0.6, 0.5, 0.95, 0.99, 0.97, 0.98];
    for (i, loss) in losses.iter().enumerate() {
        c.save(&ckpt(i as u64 + 1, *loss)).unwrap();
    }
    // Every 5th (5, 10), best 2 by acc (steps 2 and 4), and the newest (11).
    assert_eq!(
        c.tags().unwrap(),
        [
            "step-000000002",
            "step-000000004",
            "step-000000005",
            "step-000000010",
            "step-000000011"
        ]
    );
    assert!(Archive::open(&path).unwrap().verify().is_ok());
}

/// Each save records its policy and the checkpoints removed so far (its own removals
/// included) in metadata.json; `history` reads that back and says which rule keeps each
/// checkpoint. A tag added by hand is listed among the others with its reason.
#[test]
fn history_tells_what_retention_kept_and_removed_and_why() {
    use modelzip::checkpoint::{KeptBy, history};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let best = KeepBest {
        metric: "loss".into(),
        count: 1,
        goal: Goal::Min,
    };
    let mut c = Checkpointer::open(
        &path,
        with(Retention {
            keep_last: Some(2),
            keep_best: Some(best.clone()),
            ..Retention::default()
        }),
    )
    .unwrap();
    for (step, loss) in [(100, 0.9), (200, 0.2), (300, 0.7), (400, 0.5), (500, 0.6)] {
        c.save(&ckpt(step, loss)).unwrap();
    }
    let t = Tensor::from_slice(vec![1], &[1.0f32]).unwrap();
    let opts = WriteOptions::default();
    append_tag(
        &path,
        TagBuilder::new("release").param("x", t),
        AppendMode::InPlace,
        &opts,
    )
    .unwrap();

    let h = history(&Archive::open(&path).unwrap()).unwrap();
    let policy = h.policy.as_ref().expect("the policy is recorded");
    assert_eq!(policy.keep_last, Some(2));
    assert_eq!(policy.keep_best.as_ref(), Some(&best));
    let kept: Vec<(&str, &[KeptBy])> = h
        .checkpoints
        .iter()
        .map(|c| (c.record.tag.as_str(), c.kept_by.as_slice()))
        .collect();
    assert_eq!(
        kept,
        [
            ("step-000000200", &[KeptBy::Best(best)][..]),
            ("step-000000400", &[KeptBy::Last(2)][..]),
            ("step-000000500", &[KeptBy::Newest, KeptBy::Last(2)][..]),
        ]
    );
    let removed: Vec<(&str, u64, f64)> = h
        .removed
        .iter()
        .map(|r| (r.tag.as_str(), r.step, r.metrics["loss"]))
        .collect();
    assert_eq!(
        removed,
        [("step-000000100", 100, 0.9), ("step-000000300", 300, 0.7)]
    );
    assert_eq!(h.removed_omitted, 0);
    assert_eq!(h.others.len(), 1);
    assert_eq!(h.others[0].0, "release");
    assert!(
        h.others[0].1.contains("not written by a checkpointer"),
        "{:?}",
        h.others
    );
    assert_eq!(h.problem, None);

    // Without a policy nothing is recorded, and nothing is claimed.
    let plain = dir.path().join("plain.zip");
    let mut c = Checkpointer::open(&plain, CheckpointOptions::default()).unwrap();
    c.save(&ckpt(1, 0.5)).unwrap();
    let h = history(&Archive::open(&plain).unwrap()).unwrap();
    assert_eq!(h.policy, None);
    assert!(h.checkpoints[0].kept_by.is_empty() && h.removed.is_empty());
}

#[test]
fn keep_last_one_keeps_only_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Checkpointer::open(
        dir.path().join("c.zip"),
        with(Retention {
            keep_last: Some(1),
            ..Retention::default()
        }),
    )
    .unwrap();
    for s in 1..=3 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    assert_eq!(c.tags().unwrap(), ["step-000000003"]);
    assert_eq!(c.latest().unwrap().unwrap(), ckpt(3, 0.5));
}

/// Counts of 0 and a compaction threshold outside 0..=1 mean nothing: `open` refuses
/// them, naming the option and the value, before it touches the archive (here one that
/// the policy, were it applied, would shrink).
#[test]
fn options_that_mean_nothing_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(&path, CheckpointOptions::default()).unwrap();
    for s in 1..=3 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    drop(c);
    let before = std::fs::read(&path).unwrap();
    let best = |count| KeepBest {
        metric: "loss".into(),
        count,
        goal: Goal::Min,
    };
    let fraction = |f| CheckpointOptions {
        compact_dead_fraction: f,
        ..CheckpointOptions::default()
    };
    let cases = [
        (
            with(Retention {
                keep_last: Some(0),
                ..Retention::default()
            }),
            "keep_last=0",
        ),
        (
            with(Retention {
                keep_every: Some(0),
                ..Retention::default()
            }),
            "keep_every=0",
        ),
        (
            with(Retention {
                keep_best: Some(best(0)),
                ..Retention::default()
            }),
            "keep_best count=0",
        ),
        (fraction(2.0), "compact_dead_fraction=2"),
        (fraction(-0.1), "compact_dead_fraction=-0.1"),
        (fraction(f64::NAN), "compact_dead_fraction=NaN"),
        (fraction(f64::INFINITY), "compact_dead_fraction=inf"),
    ];
    for (opts, named) in cases {
        let err = Checkpointer::open(&path, opts.clone()).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err}");
        assert!(err.to_string().contains(named), "{named}: {err}");
        // Refused for a new archive as well: no checkpointer, so no save creates one.
        let fresh = dir.path().join("fresh.zip");
        assert!(Checkpointer::open(&fresh, opts).is_err());
        assert!(!fresh.exists());
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // The bounds themselves are meaningful: 0 compacts at any dead byte, 1 never.
    for f in [0.0, 1.0] {
        Checkpointer::open(&path, fraction(f)).unwrap();
    }
}

#[test]
fn tags_not_written_by_the_checkpointer_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let t = Tensor::from_slice(vec![1], &[1.0f32]).unwrap();
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(TagBuilder::new("release").param("x", t)).unwrap();
    w.finish().unwrap();
    let mut c = Checkpointer::open(
        &path,
        with(Retention {
            keep_last: Some(1),
            ..Retention::default()
        }),
    )
    .unwrap();
    for s in 1..=3 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    assert_eq!(c.tags().unwrap(), ["release", "step-000000003"]);
}

#[test]
fn unchanged_tensors_are_shared_between_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(&path, CheckpointOptions::default()).unwrap();
    for s in 1..=3 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    let a = Archive::open(&path).unwrap();
    let t = a.tag("step-000000003").unwrap();
    let frozen = t.params().iter().find(|p| p.name == "frozen").unwrap();
    assert!(frozen.location.shared);
    assert_eq!(frozen.location.tag(), "step-000000001");
    let w = t.params().iter().find(|p| p.name == "w").unwrap();
    assert!(!w.location.shared);
}

#[test]
fn an_async_error_surfaces_on_the_handle_and_on_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Checkpointer::open(dir.path().join("c.zip"), CheckpointOptions::default()).unwrap();
    let ok = c.save_async(ckpt(1, 0.5)).unwrap();
    let mut bad = ckpt(2, 0.5);
    bad.params
        .push(("w".into(), Tensor::from_slice(vec![1], &[0f32]).unwrap()));
    let handle = c.save_async(bad).unwrap();
    assert_eq!(ok.wait().unwrap().tag, "step-000000001");
    // The first report is the save's own error; the second says it failed, with its message.
    let err = handle.wait().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("is added twice"), "{err}");
    let next = c.save(&ckpt(3, 0.5)).unwrap_err();
    assert!(matches!(next.kind(), ErrorKind::AsyncSave(_)), "{next}");
    assert!(next.to_string().contains(&err.to_string()), "{next}");
    // The failed save left nothing behind; the next one goes through.
    c.save(&ckpt(3, 0.5)).unwrap();
    assert_eq!(c.tags().unwrap(), ["step-000000001", "step-000000003"]);
}

#[test]
fn dead_bytes_past_the_threshold_trigger_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(
        &path,
        CheckpointOptions {
            compact_dead_fraction: 0.0,
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    assert!(!c.save(&ckpt(1, 0.5)).unwrap().compacted);
    assert!(c.save(&ckpt(2, 0.5)).unwrap().compacted);
    assert_eq!(Archive::open(&path).unwrap().dead_bytes(), 0);
    assert_eq!(c.restore("STEP-000000001").unwrap(), ckpt(1, 0.5));
}

#[test]
fn nothing_saved_yet_means_no_latest() {
    let dir = tempfile::tempdir().unwrap();
    let c = Checkpointer::open(dir.path().join("c.zip"), CheckpointOptions::default()).unwrap();
    assert!(c.latest().unwrap().is_none());
    assert!(c.tags().unwrap().is_empty());
    assert!(
        Checkpointer::open(
            dir.path().join("d.zip"),
            CheckpointOptions {
                pattern: "no-step".into(),
                ..CheckpointOptions::default()
            }
        )
        .is_err()
    );
}

fn keep_last(n: usize) -> CheckpointOptions {
    with(Retention {
        keep_last: Some(n),
        ..Retention::default()
    })
}

fn names(steps: &[u64]) -> Vec<String> {
    steps.iter().map(|s| format!("step-{s:09}")).collect()
}

/// A kill between a save's append and its retention pass leaves the new checkpoint and
/// the ones the policy was about to drop. Simulated without a kill: the append is made by
/// a checkpointer with no policy. Opening the archive with the policy converges.
#[test]
fn a_crash_between_append_and_retention_converges_when_the_archive_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(&path, keep_last(3)).unwrap();
    for s in 1..=9 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    drop(c);
    // The append of step 10 commits; its retention pass never runs.
    Checkpointer::open(&path, CheckpointOptions::default())
        .unwrap()
        .save(&ckpt(10, 0.5))
        .unwrap();
    let raw = Checkpointer::open(&path, CheckpointOptions::default()).unwrap();
    assert_eq!(raw.open_report(), &OpenReport::default());
    assert_eq!(raw.tags().unwrap(), names(&[7, 8, 9, 10]));

    // Another writer holds the lock: opening defers to it and changes nothing.
    let lock = WriteLock::acquire(&path, false).unwrap();
    let deferred = Checkpointer::open(&path, keep_last(3)).unwrap();
    assert!(deferred.open_report().deferred);
    assert!(deferred.open_report().removed.is_empty());
    assert_eq!(deferred.tags().unwrap(), names(&[7, 8, 9, 10]));
    drop(lock);

    // The next run, with nothing left to save, ends as the policy says.
    let c = Checkpointer::open(&path, keep_last(3)).unwrap();
    assert_eq!(
        c.open_report(),
        &OpenReport {
            removed: names(&[7]),
            deferred: false
        }
    );
    assert_eq!(c.tags().unwrap(), names(&[8, 9, 10]));
    assert_eq!(c.latest().unwrap().unwrap(), ckpt(10, 0.5));
    assert!(Archive::open(&path).unwrap().verify().is_ok());
    // Opening again has nothing to do.
    let again = Checkpointer::open(&path, keep_last(3)).unwrap();
    assert_eq!(again.open_report(), &OpenReport::default());
}

/// A save cut short at every 1/50th of the bytes it writes (as a full disk would cut
/// it: the append or the in-place removal fails and rolls back): opening the archive
/// again with the policy always ends as the policy says of what was committed.
#[test]
fn a_save_cut_short_anywhere_converges_when_the_archive_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let base = dir.path().join("base.zip");
    let opts = CheckpointOptions {
        write: WriteOptions {
            fsync: false,
            ..WriteOptions::default()
        },
        compact_dead_fraction: 1.0,
        ..keep_last(2)
    };
    let mut c = Checkpointer::open(&path, opts.clone()).unwrap();
    for s in 1..=3 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    drop(c);
    std::fs::copy(&path, &base).unwrap();
    let mut c = Checkpointer::open(&path, opts.clone()).unwrap();
    set_write_budget(None);
    let r = c.save(&ckpt(4, 0.5)).unwrap();
    assert_eq!(r.removed, names(&[2]));
    let total = modelzip::fault::bytes_written();
    drop(c);
    // Cut before the append committed, after it, and after it but before the removal.
    let mut outcomes = [0usize; 3];
    for budget in (0..total).step_by((total / 50).max(1) as usize) {
        std::fs::copy(&base, &path).unwrap();
        let mut c = Checkpointer::open(&path, opts.clone()).unwrap();
        set_write_budget(Some(budget));
        let saved = c.save(&ckpt(4, 0.5));
        set_write_budget(None);
        drop(c);
        assert!(saved.is_err(), "budget {budget} of {total}");
        // The append committed, the removal did not: the state a kill there leaves.
        let left = Archive::open(&path).unwrap().tags().len();
        if left == 3 {
            outcomes[2] += 1;
        }
        let c = Checkpointer::open(&path, opts.clone()).unwrap();
        let tags = c.tags().unwrap();
        let appended = tags.contains(&"step-000000004".to_string());
        let expected = if appended {
            names(&[3, 4])
        } else {
            names(&[2, 3])
        };
        assert_eq!(tags, expected, "budget {budget} of {total}");
        outcomes[usize::from(appended)] += 1;
        assert!(Archive::open(&path).unwrap().verify().is_ok());
    }
    assert!(outcomes.iter().all(|n| *n > 0), "{outcomes:?}");
}

#[test]
fn latest_and_retention_skip_tags_that_are_not_checkpoints_and_restore_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(&path, CheckpointOptions::default()).unwrap();
    for s in 1..=2 {
        c.save(&ckpt(s, 0.5)).unwrap();
    }
    let w = || Tensor::from_slice(vec![4], &[9.0f32, 1.0, 2.0, 3.0]).unwrap();
    let opts = WriteOptions::default();
    // A tag added by hand, and one with a step but a variant record (as variants made by
    // earlier versions were).
    append_tag(
        &path,
        TagBuilder::new("release").param("w", w()),
        AppendMode::InPlace,
        &opts,
    )
    .unwrap();
    append_tag(
        &path,
        TagBuilder::new("old-int8").param("w", w()).metadata(
            br#"{"step": 2, "metrics": {"loss": 0.1}, "quantization": {"params": {}}}"#.to_vec(),
        ),
        AppendMode::InPlace,
        &opts,
    )
    .unwrap();
    assert_eq!(c.latest().unwrap().unwrap(), ckpt(2, 0.5));
    assert_eq!(c.checkpoints().unwrap(), names(&[1, 2]));
    for (tag, why) in [
        ("RELEASE", "no \"step\""),
        ("old-int8", "\"quantization\" record"),
    ] {
        let e = c.restore(tag).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::NotACheckpoint(_)), "{e}");
        // The tag as tags.txt spells it, and why it is not one.
        let m = e.to_string();
        let lower = m.to_lowercase();
        assert!(
            lower.contains(&format!(
                "tag {:?} is not a checkpoint: ",
                tag.to_lowercase()
            )),
            "{e}"
        );
        assert!(m.contains(why), "{e}");
        assert_eq!(e.location().file.as_deref(), Some(path.as_path()));
    }
    // Keep-last 1 keeps the newest checkpoint, not the newest tag; the others stay.
    let c = Checkpointer::open(&path, keep_last(1)).unwrap();
    assert_eq!(c.open_report().removed, names(&[1]));
    assert_eq!(c.tags().unwrap(), ["step-000000002", "release", "old-int8"]);
    assert_eq!(c.latest().unwrap().unwrap(), ckpt(2, 0.5));
}

#[test]
fn an_archive_without_checkpoints_has_no_latest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(
        TagBuilder::new("release").param("x", Tensor::from_slice(vec![1], &[1.0f32]).unwrap()),
    )
    .unwrap();
    w.finish().unwrap();
    let c = Checkpointer::open(&path, keep_last(1)).unwrap();
    assert!(c.latest().unwrap().is_none());
    assert!(c.checkpoints().unwrap().is_empty());
    assert_eq!(c.tags().unwrap(), ["release"]);
}

/// The first report of a failed asynchronous save keeps the error's kind, whichever of
/// the handle and the checkpointer gives it; the other is `AsyncSave` with its message.
#[test]
fn an_async_lock_conflict_is_reported_as_locked_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let mut c = Checkpointer::open(&path, CheckpointOptions::default()).unwrap();
    c.save(&ckpt(1, 0.5)).unwrap();

    let lock = WriteLock::acquire(&path, false).unwrap();
    let handle = c.save_async(ckpt(2, 0.5)).unwrap();
    let first = c.wait().unwrap_err();
    assert!(matches!(first.kind(), ErrorKind::Locked), "{first}");
    let second = handle.wait().unwrap_err();
    match second.kind() {
        ErrorKind::AsyncSave(m) => assert!(m.contains("locked"), "{second}"),
        _ => panic!("{second}"),
    }
    // Asked again, the handle says the same.
    assert!(matches!(
        handle.wait().unwrap_err().kind(),
        ErrorKind::AsyncSave(_)
    ));

    // The other order: the handle first.
    let handle = c.save_async(ckpt(2, 0.5)).unwrap();
    let first = handle.wait().unwrap_err();
    assert!(matches!(first.kind(), ErrorKind::Locked), "{first}");
    let second = c.save_async(ckpt(2, 0.5)).unwrap_err();
    assert!(matches!(second.kind(), ErrorKind::AsyncSave(_)), "{second}");
    drop(lock);
    c.save(&ckpt(2, 0.5)).unwrap();
    assert_eq!(c.tags().unwrap(), names(&[1, 2]));
}

/// A first save checks again under the lock whether the archive exists: one that waited
/// for the lock while another writer created the archive appends its checkpoint to it,
/// and the other writer's tag survives (it was replaced by a new archive).
#[cfg(target_os = "linux")]
#[test]
fn a_first_save_that_waited_appends_to_an_archive_created_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let held = WriteLock::acquire(&path, false).unwrap();
    let opts = CheckpointOptions {
        write: WriteOptions {
            wait_for_lock: true,
            ..WriteOptions::default()
        },
        ..CheckpointOptions::default()
    };
    let mut c = Checkpointer::open(&path, opts).unwrap();
    let saver = std::thread::spawn(move || c.save(&ckpt(2, 0.5)).map(|_| ()));
    // The saver found no archive and waits for the lock (a `->` line of /proc/locks).
    let pid = std::process::id().to_string();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("->") && l.split_whitespace().any(|w| w == pid))
    {
        assert!(!saver.is_finished(), "the save did not wait");
        assert!(start.elapsed().as_secs() < 30, "the save never waited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let side = dir.path().join("side.zip");
    let mut w = ArchiveWriter::create(&side).unwrap();
    w.add_tag(TagBuilder::new("other").param("x", Tensor::from_slice(vec![1], &[1.0f32]).unwrap()))
        .unwrap();
    w.finish().unwrap();
    std::fs::rename(&side, &path).unwrap();
    drop(held);
    saver.join().unwrap().unwrap();
    let tags = Archive::open(&path).unwrap().tags().to_vec();
    assert_eq!(tags.len(), 2, "{tags:?}");
    assert_eq!(tags[0], "other");
}
