//! The training-loop checkpoint API: retention, sharing, async saves, resume.

use modelzip::ErrorKind;
use modelzip::Tensor;
use modelzip::archive::{Archive, ArchiveWriter, TagBuilder};
use modelzip::checkpoint::{
    Checkpoint, CheckpointOptions, Checkpointer, Goal, KeepBest, Retention,
};

#[path = "../examples/checkpoint_loop.rs"]
mod checkpoint_loop;

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

#[test]
fn the_example_loop_ends_as_its_policy_says() {
    let dir = tempfile::tempdir().unwrap();
    let out = checkpoint_loop::run(&dir.path().join("c.zip")).unwrap();
    assert_eq!(out.tags, out.expected_tags);
    assert!(out.resumed_identical);
    assert_eq!(out.tensor_bytes, out.predicted_tensor_bytes);
    assert_eq!(out.problems, 0);
}

#[test]
fn the_example_loop_resumes_after_being_stopped_and_ends_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let zero = std::time::Duration::ZERO;
    // Stopped after step 9, then after step 15: each run resumes from the newest tag.
    let first = checkpoint_loop::run_steps(&path, 9, zero).unwrap();
    assert_eq!(
        first.tags,
        ["step-000000007", "step-000000008", "step-000000009"]
    );
    assert_eq!(first.tags, first.expected_tags);
    let second = checkpoint_loop::run_steps(&path, 15, zero).unwrap();
    assert_eq!(
        second.tags,
        [
            "step-000000012",
            "step-000000013",
            "step-000000014",
            "step-000000015"
        ]
    );
    let done = checkpoint_loop::run(&path).unwrap();
    assert_eq!(done.tags, done.expected_tags);
    assert!(done.resumed_identical);
    assert_eq!(done.tensor_bytes, done.predicted_tensor_bytes);
    assert_eq!(done.problems, 0);
    // A run on a finished archive has nothing left to do and changes nothing.
    let again = checkpoint_loop::run(&path).unwrap();
    assert_eq!(again.tags, done.tags);
}

/// Retention removes checkpoints in place: over 20 saves of a 64 KiB checkpoint with
/// keep-last 5, the bytes written stay near one checkpoint per save (plus the occasional
/// compaction), far below rewriting the 5 kept checkpoints at every save.
#[test]
fn retention_removes_in_place_not_by_rewriting_the_archive() {
    use modelzip::archive::fault::{bytes_written, set_write_budget};
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

#[test]
fn keep_last_zero_still_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Checkpointer::open(
        dir.path().join("c.zip"),
        with(Retention {
            keep_last: Some(0),
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
    assert_eq!(frozen.location.tag, "step-000000001");
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
    let err = handle.wait().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::AsyncSave(_)), "{err}");
    let next = c.save(&ckpt(3, 0.5)).unwrap_err();
    assert!(matches!(next.kind(), ErrorKind::AsyncSave(_)), "{next}");
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
