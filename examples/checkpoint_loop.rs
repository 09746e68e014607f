//! A simulated training loop: 20 steps of a small model with Adam state, saved every
//! step into one archive with "keep the last 3 + the best 1 by loss", then resumed
//! from the latest checkpoint.
//!
//! `cargo run --example checkpoint_loop [ARCHIVE] [--step-ms MS]`
//!
//! Run it again on the same ARCHIVE after killing it (Ctrl-C, `kill -9`) at any moment:
//! it resumes from the newest checkpoint the archive holds (a save cut short by the kill
//! is either complete or absent; checkpoints a kill kept from being removed are removed
//! when the archive is opened again), checks that the restored state is bit-identical to
//! the state the loop had at that step, and finishes the remaining steps. `--step-ms`
//! makes each simulated step take that long, to leave time to kill it. Tags added to the
//! archive by other means (a variant, a `release` tag) are left alone.
//!
//! The embedding table is frozen, so every checkpoint shares one copy of it; the other
//! parameters and their Adam moments change every step.

use modelzip::checkpoint::{
    Checkpoint, CheckpointOptions, Checkpointer, Goal, KeepBest, Retention,
};
use modelzip::{Tensor, TrainingConfig};
use std::collections::HashSet;
use std::path::Path;

/// What the loop left behind, for the caller (and the test that runs it) to check.
pub struct Outcome {
    /// Checkpoint tags in the archive after the loop.
    pub tags: Vec<String>,
    /// Other tags in the archive (not written by the loop, left alone).
    pub other_tags: Vec<String>,
    /// Tags the policy should have kept.
    pub expected_tags: Vec<String>,
    /// Whether the resumed state equals the last in-memory state bit for bit.
    pub resumed_identical: bool,
    /// Bytes of tensor entries in the archive.
    pub tensor_bytes: u64,
    /// Bytes the distinct tensors of the archive's tags take (what sharing predicts).
    pub predicted_tensor_bytes: u64,
    /// Problems `verify` found.
    pub problems: usize,
}

fn loss_at(step: u64) -> f64 {
    // Falls, then rises after step 12: the best checkpoint is not among the last 3.
    let s = step as f64;
    (s - 12.0).powi(2) / 100.0 + 0.5
}

/// Deterministic pseudo-random values.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// The loop's state (parameters, Adam moments, config, loss) at `step`.
pub fn state_at(step: u64) -> Result<Checkpoint, modelzip::Error> {
    let mut c = Checkpoint::new(step);
    let shapes: [(&str, Vec<u64>); 3] = [
        ("embedding.w", vec![64, 16]),
        ("fc.w", vec![16, 8]),
        ("fc.b", vec![8]),
    ];
    for (i, (name, dims)) in shapes.iter().enumerate() {
        let n = dims.iter().product::<u64>() as usize;
        // The embedding is frozen: the same values at every step.
        let seed = if *name == "embedding.w" {
            1
        } else {
            step * 10 + i as u64
        };
        c.params.push((
            name.to_string(),
            Tensor::from_slice(dims.clone(), &values(seed, n))?,
        ));
        if *name != "embedding.w" {
            let m = Tensor::from_slice(dims.clone(), &values(seed + 1000, n))?;
            let v = Tensor::from_slice(dims.clone(), &values(seed + 2000, n))?;
            c.updater.push((name.to_string(), vec![m, v]));
        }
    }
    let mut tc = TrainingConfig::adam(1e-3, 0.9, 0.999, 1e-8);
    tc.iteration = step as i64;
    c.training_config = Some(tc);
    c.metrics.insert("loss".into(), loss_at(step));
    Ok(c)
}

/// Runs the loop into `archive` and reports what it left.
pub fn run(archive: &Path) -> Result<Outcome, Box<dyn std::error::Error>> {
    run_steps(archive, LAST_STEP, std::time::Duration::ZERO)
}

/// The loop's last step.
pub const LAST_STEP: u64 = 20;

/// Runs (or resumes) the loop into `archive` up to step `until` (at most [`LAST_STEP`]),
/// each step taking at least `step_time`, and reports what it left.
pub fn run_steps(
    archive: &Path,
    until: u64,
    step_time: std::time::Duration,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let opts = CheckpointOptions {
        retention: Retention {
            keep_last: Some(3),
            keep_best: Some(KeepBest {
                metric: "loss".into(),
                count: 1,
                goal: Goal::Min,
            }),
            ..Retention::default()
        },
        ..CheckpointOptions::default()
    };
    let mut ckpt = Checkpointer::open(archive, opts)?;
    // Resume where an earlier run stopped: the newest checkpoint must be exactly the
    // state the loop had at that step.
    let mut last = Checkpoint::default();
    let mut first = 1;
    if let Some(resumed) = ckpt.latest()? {
        if resumed != state_at(resumed.step)? {
            return Err(
                format!("checkpoint of step {} differs from its state", resumed.step).into(),
            );
        }
        first = resumed.step + 1;
        last = resumed;
    }
    let until = until.min(LAST_STEP);
    for step in first..=until {
        std::thread::sleep(step_time);
        let state = state_at(step)?;
        last = state.clone();
        // The save runs on a background thread while the next step "trains".
        ckpt.save_async(state)?;
    }
    ckpt.wait()?;
    let tags = ckpt.checkpoints()?;
    let other_tags: Vec<String> = ckpt
        .tags()?
        .into_iter()
        .filter(|t| !tags.contains(t))
        .collect();
    // Keep the last 3 + the best 1 by loss (step 12, where the loss is lowest), of the
    // steps run so far.
    let mut kept: Vec<u64> = (until.saturating_sub(2).max(1)..=until).collect();
    if until >= 1 {
        let best = (1..=until)
            .min_by(|a, b| loss_at(*a).total_cmp(&loss_at(*b)))
            .unwrap_or(until);
        if !kept.contains(&best) {
            kept.insert(0, best);
        }
    }
    let expected_tags: Vec<String> = kept.iter().map(|s| format!("step-{s:09}")).collect();

    // Resume.
    let resumed = ckpt.latest()?.ok_or("no checkpoint to resume from")?;
    let resumed_identical = resumed == last;

    // What sharing predicts: each distinct tensor of the archive's tags (the kept
    // checkpoints, and any other tag) once.
    let a = modelzip::Archive::open(archive)?;
    let mut distinct = HashSet::new();
    let mut predicted_tensor_bytes = 0u64;
    for tag in a.tags() {
        let t = a.tag(tag)?;
        let locations = t.locations();
        for loc in locations {
            let mut bytes = Vec::new();
            modelzip::tensor::encode_tensor(&t.tensor(loc)?.view(), &mut bytes)?;
            if distinct.insert(bytes.clone()) {
                predicted_tensor_bytes += bytes.len() as u64;
            }
        }
    }
    let tensor_bytes = a
        .entry_names()
        .filter(|n| n.ends_with(".lodtensor"))
        .filter_map(|n| a.entry_stored_size(n))
        .sum();
    let problems = a.verify().problems.len();
    Ok(Outcome {
        tags,
        other_tags,
        expected_tags,
        resumed_identical,
        tensor_bytes,
        predicted_tensor_bytes,
        problems,
    })
}

#[cfg(not(test))]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut path = None;
    let mut step_ms = 0u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--step-ms" {
            step_ms = args
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or("--step-ms needs a number of milliseconds")?;
        } else {
            path = Some(std::path::PathBuf::from(a));
        }
    }
    let tmp;
    let archive = match path {
        Some(p) => p,
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().join("checkpoints.zip")
        }
    };
    let out = run_steps(
        &archive,
        LAST_STEP,
        std::time::Duration::from_millis(step_ms),
    )?;
    println!("archive: {}", archive.display());
    println!("kept tags: {}", out.tags.join(", "));
    if !out.other_tags.is_empty() {
        println!("other tags (left alone): {}", out.other_tags.join(", "));
    }
    println!("policy expects: {}", out.expected_tags.join(", "));
    println!("resumed bit-identical: {}", out.resumed_identical);
    println!(
        "tensor bytes: {} stored, {} predicted by sharing",
        out.tensor_bytes, out.predicted_tensor_bytes
    );
    println!("verify problems: {}", out.problems);
    let ok = out.tags == out.expected_tags
        && out.resumed_identical
        && out.tensor_bytes == out.predicted_tensor_bytes
        && out.problems == 0;
    if !ok {
        return Err("the checkpoint loop did not end as its policy says".into());
    }
    Ok(())
}

/// Run by `cargo test` (the example is a test target: `test = true` in Cargo.toml).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_loop_ends_as_its_policy_says() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(&dir.path().join("c.zip")).unwrap();
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
        let first = run_steps(&path, 9, zero).unwrap();
        assert_eq!(
            first.tags,
            ["step-000000007", "step-000000008", "step-000000009"]
        );
        assert_eq!(first.tags, first.expected_tags);
        let second = run_steps(&path, 15, zero).unwrap();
        assert_eq!(
            second.tags,
            [
                "step-000000012",
                "step-000000013",
                "step-000000014",
                "step-000000015"
            ]
        );
        let done = run(&path).unwrap();
        assert_eq!(done.tags, done.expected_tags);
        assert!(done.resumed_identical);
        assert_eq!(done.tensor_bytes, done.predicted_tensor_bytes);
        assert_eq!(done.problems, 0);
        // A run on a finished archive has nothing left to do and changes nothing.
        let again = run(&path).unwrap();
        assert_eq!(again.tags, done.tags);
    }

    fn steps(steps: &[u64]) -> Vec<String> {
        steps.iter().map(|s| format!("step-{s:09}")).collect()
    }

    /// The audit's repro (`KILL_AT=42` on the example loop: killed after the append of step
    /// 20, before its retention pass), made deterministic: the loop's run to step 19, then
    /// step 20 appended without retention, then the loop run again.
    #[test]
    fn the_example_loop_ends_as_its_policy_says_after_a_kill_before_the_last_retention_pass() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.zip");
        let zero = std::time::Duration::ZERO;
        run_steps(&path, 19, zero).unwrap();
        let state = state_at(LAST_STEP).unwrap();
        Checkpointer::open(&path, CheckpointOptions::default())
            .unwrap()
            .save(&state)
            .unwrap();
        assert_eq!(
            Checkpointer::open(&path, CheckpointOptions::default())
                .unwrap()
                .tags()
                .unwrap(),
            steps(&[12, 17, 18, 19, 20])
        );
        let done = run(&path).unwrap();
        assert_eq!(done.tags, steps(&[12, 18, 19, 20]));
        assert_eq!(done.tags, done.expected_tags);
        assert!(done.resumed_identical);
        assert_eq!(done.tensor_bytes, done.predicted_tensor_bytes);
        assert_eq!(done.problems, 0);
    }
}
