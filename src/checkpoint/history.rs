//! What an archive tells of its checkpoints: each one's step and metrics, why the
//! retention policy keeps it, and which checkpoints the policy removed.

use super::retention::{CheckpointRecord, KeptBy, Record, decide};
use super::{Retention, checkpoint_info};
use crate::archive::Archive;
use crate::error::Result;

/// A checkpoint in the archive and the rules of the recorded policy that keep it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointStatus {
    /// Its tag, step and metrics.
    pub record: CheckpointRecord,
    /// Why the policy keeps it. Empty when no policy is recorded, or when the policy
    /// drops it (a save that was cut short, or whose retention pass found the archive
    /// locked, leaves it to the next save).
    pub kept_by: Vec<KeptBy>,
}

/// The checkpoints of an archive and what retention did to them (see [`history`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The retention policy of the newest checkpoint's save; `None` when that save
    /// recorded none (no policy, or a writer older than the record).
    pub policy: Option<Retention>,
    /// The checkpoints in the archive, oldest first.
    pub checkpoints: Vec<CheckpointStatus>,
    /// The checkpoints the policy removed, oldest first, as the newest checkpoint's
    /// save recorded them (those it removed itself included): the newest
    /// 1,000 of them.
    pub removed: Vec<CheckpointRecord>,
    /// How many removed checkpoints older than those in `removed` the record counts.
    pub removed_omitted: u64,
    /// The tags that are not checkpoints, each with the reason.
    pub others: Vec<(String, String)>,
    /// Why the newest checkpoint's `retention` record was not read, when it is malformed.
    pub problem: Option<String>,
}

/// The checkpoints of `archive`, the retention policy recorded by the newest one's
/// save, why that policy keeps each checkpoint, and the checkpoints it removed.
///
/// A [`Checkpointer`](super::Checkpointer) with a retention policy writes the policy
/// and the removed checkpoints (tag, step, metrics) into each checkpoint's
/// metadata.json, under `retention`; this reads that record back. Nothing else is
/// read than each tag's metadata.json. A tag whose metadata.json cannot be read is
/// listed in [`History::others`] with the reason, not an error.
///
/// ```
/// use modelzip::checkpoint::{self, Checkpoint, CheckpointOptions, Checkpointer, Retention};
/// use modelzip::{Archive, Tensor};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("run.zip");
/// let opts = CheckpointOptions {
///     retention: Retention { keep_last: Some(1), ..Retention::default() },
///     ..CheckpointOptions::default()
/// };
/// let mut ck = Checkpointer::open(&path, opts)?;
/// for step in [1, 2] {
///     let mut c = Checkpoint::new(step);
///     c.params.push(("w".into(), Tensor::from_slice(vec![1], &[step as f32])?));
///     ck.save(&c)?;
/// }
/// let h = checkpoint::history(&Archive::open(&path)?)?;
/// assert_eq!(h.removed[0].tag, "step-000000001");
/// assert_eq!(h.checkpoints[0].kept_by[0].to_string(), "newest");
/// # Ok::<(), modelzip::Error>(())
/// ```
pub fn history(archive: &Archive) -> Result<History> {
    let mut h = History::default();
    let mut newest_meta = None;
    for tag in archive.tags() {
        match checkpoint_info(archive, tag) {
            Ok(Ok((record, meta))) => {
                newest_meta = Some(meta);
                h.checkpoints.push(CheckpointStatus {
                    record,
                    kept_by: Vec::new(),
                });
            }
            Ok(Err(why)) => h.others.push((tag.clone(), why)),
            Err(e) => h
                .others
                .push((tag.clone(), format!("its metadata.json is not read ({e})"))),
        }
    }
    let Some(meta) = newest_meta else {
        return Ok(h);
    };
    let Some(v) = meta.get("retention") else {
        return Ok(h);
    };
    match Record::from_json(v) {
        Ok(r) => {
            let records: Vec<CheckpointRecord> =
                h.checkpoints.iter().map(|c| c.record.clone()).collect();
            for (c, why) in h.checkpoints.iter_mut().zip(decide(&records, &r.policy)) {
                c.kept_by = why;
            }
            h.policy = Some(r.policy);
            h.removed = r.removed;
            h.removed_omitted = r.omitted;
        }
        Err(e) => {
            let tag = h.checkpoints.last().map_or("", |c| c.record.tag.as_str());
            h.problem = Some(format!("{tag}/metadata.json: {e}"));
        }
    }
    Ok(h)
}
