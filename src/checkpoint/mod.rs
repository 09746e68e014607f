//! The training-loop API: versioned checkpoints in one archive, with retention
//! policies, automatic sharing of unchanged tensors, and asynchronous saves.
//!
//! ```
//! use modelzip::checkpoint::{Checkpoint, CheckpointOptions, Checkpointer, Retention};
//! use modelzip::Tensor;
//!
//! let dir = tempfile::tempdir()?;
//! let opts = CheckpointOptions {
//!     retention: Retention { keep_last: Some(2), ..Retention::default() },
//!     ..CheckpointOptions::default()
//! };
//! let mut ckpt = Checkpointer::open(dir.path().join("run.zip"), opts)?;
//! for step in [100, 200, 300] {
//!     let w = Tensor::from_slice(vec![2], &[step as f32, 1.0])?;
//!     let mut c = Checkpoint::new(step);
//!     c.params.push(("w".into(), w));
//!     c.metrics.insert("loss".into(), 1.0 / step as f64);
//!     ckpt.save(&c)?;
//! }
//! assert_eq!(ckpt.tags()?, ["step-000000200", "step-000000300"]);
//! let resumed = ckpt.latest()?.expect("a checkpoint");
//! assert_eq!(resumed.step, 300);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **How long a save blocks.** [`Checkpointer::save`] returns when the new tag is
//! durable on disk (written, fsynced, and the retention policy applied). Its cost is
//! proportional to the new checkpoint (an in-place append), plus, when the policy
//! removes tags, the in-place removal ([`archive::Removal::in_place`]: the files of
//! removed checkpoints that kept ones still use are copied, the kept tables rewritten,
//! the removed bytes left dead), plus one rewrite of the archive (a compaction) when
//! dead bytes pass [`CheckpointOptions::compact_dead_fraction`].
//! [`Checkpointer::save_async`] takes ownership of the tensors (a move, no copy) and
//! blocks only while the previous asynchronous save is still running; the write itself
//! happens on a background thread.
//!
//! **Crashes.** The append and the retention pass are two commits, each crash-safe. A
//! process killed between them leaves the new checkpoint and the ones the policy was
//! about to drop; [`Checkpointer::open`] applies the policy to an existing archive, so
//! the next run (even one with nothing left to save) ends as the policy says.
//!
//! **Which tags are checkpoints.** Those whose metadata.json has a `step` (what a
//! checkpointer writes, with `metrics`) and no variant record (`quantization`, `cast`).
//! Every other tag (a `release` tag added by hand, an INT8 variant) is never resumed
//! from, restored or removed.

use crate::archive::{self, AppendMode, Appender, Archive, ArchiveWriter, TagWriter, WriteOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::TrainingConfig;
use crate::tensor::{Tensor, TensorView};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

mod history;
#[cfg(feature = "remote")]
mod remote;
mod retention;

pub use history::{CheckpointStatus, History, history};
pub use retention::{CheckpointRecord, KeptBy};
use retention::{Record, decide};

/// Everything needed to resume training at one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checkpoint {
    /// The training step; names the tag through [`CheckpointOptions::pattern`].
    pub step: u64,
    /// Parameters in order.
    pub params: Vec<(String, Tensor)>,
    /// Updater (optimizer) state: for each parameter, its state arrays in the order
    /// the training config names them (adam: m, v).
    pub updater: Vec<(String, Vec<Tensor>)>,
    /// The training configuration (updater, hyper-parameters, counters).
    pub training_config: Option<TrainingConfig>,
    /// Metrics at this step (loss, accuracy ...), used by [`KeepBest`].
    pub metrics: BTreeMap<String, f64>,
}

impl Checkpoint {
    /// An empty checkpoint for `step`.
    pub fn new(step: u64) -> Checkpoint {
        Checkpoint {
            step,
            ..Checkpoint::default()
        }
    }
}

/// Whether smaller or larger values of a metric are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// Smaller is better (loss).
    Min,
    /// Larger is better (accuracy).
    Max,
}

/// Keep the best `count` checkpoints by `metric`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeepBest {
    /// The metric name in [`Checkpoint::metrics`].
    pub metric: String,
    /// How many to keep: at least 1 ([`Checkpointer::open`] refuses 0).
    pub count: usize,
    /// Which direction is better.
    pub goal: Goal,
}

/// Which checkpoints to keep. The policies combine: a checkpoint is kept when any
/// policy keeps it, and the newest tag is always kept so training can resume.
/// With no policy set, every checkpoint is kept. The counts must be at least 1:
/// [`Checkpointer::open`] refuses 0 with [`ErrorKind::InvalidInput`] (a policy that keeps
/// none would keep only the newest, which `keep_last: Some(1)` says plainly).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retention {
    /// Keep the last N checkpoints (N >= 1).
    pub keep_last: Option<usize>,
    /// Keep every checkpoint whose step is a multiple of K (K >= 1).
    pub keep_every: Option<u64>,
    /// Keep the best M by a metric.
    pub keep_best: Option<KeepBest>,
}

impl Retention {
    fn is_unset(&self) -> bool {
        self.keep_last.is_none() && self.keep_every.is_none() && self.keep_best.is_none()
    }
}

/// How a [`Checkpointer`] names, keeps and writes checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointOptions {
    /// Tag name pattern: `{step}` or `{step:0N}` (zero-padded to N digits) is replaced
    /// by the step. Default `step-{step:09}`, so names sort like steps.
    pub pattern: String,
    /// Which checkpoints to keep.
    pub retention: Retention,
    /// Compact when dead bytes (left by in-place appends) exceed this fraction of the
    /// file: from 0.0 (compact whenever there are dead bytes) to 1.0 (never compact).
    /// Default 0.5. [`Checkpointer::open`] refuses a value outside 0.0..=1.0 or NaN with
    /// [`ErrorKind::InvalidInput`].
    pub compact_dead_fraction: f64,
    /// Locking and durability of the writes.
    pub write: WriteOptions,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            pattern: "step-{step:09}".to_string(),
            retention: Retention::default(),
            compact_dead_fraction: 0.5,
            write: WriteOptions::default(),
        }
    }
}

/// What a save did.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveReport {
    /// The tag written.
    pub tag: String,
    /// Tags the retention policy removed.
    pub removed: Vec<String>,
    /// Whether the archive was compacted.
    pub compacted: bool,
    /// For an `s3://` or `az://` archive: the bytes this save sent to the store (the append's and
    /// the retention pass's, see [`RemoteWrite`](crate::remote::RemoteWrite)); `None`
    /// for a local archive.
    pub bytes_uploaded: Option<u64>,
    /// For an `s3://` or `az://` archive: the bytes of the old object the store copied; `None` for a
    /// local archive.
    pub bytes_copied: Option<u64>,
    /// True when the checkpoint was committed but the retention pass (or compaction)
    /// after it was not run: another writer held the archive's write lock (and
    /// [`WriteOptions::wait_for_lock`] was not set), or kept changing a remote archive.
    /// The next save (or open) applies the policy; nothing is lost.
    pub deferred: bool,
}

/// What [`Checkpointer::open`] did to an existing archive to bring it in line with the
/// retention policy (normally nothing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenReport {
    /// Checkpoints the retention policy removed: left over by a save whose retention
    /// pass a crash cut short, or dropped by a stricter policy than the one that wrote
    /// them.
    pub removed: Vec<String>,
    /// True when another writer held the archive's write lock (and
    /// [`WriteOptions::wait_for_lock`] was not set), so the policy was not applied:
    /// that writer's own retention pass, or this checkpointer's next save, applies it.
    pub deferred: bool,
}

/// How an asynchronous save stands.
#[derive(Debug)]
enum SaveState {
    Running,
    Saved(SaveReport),
    /// `error` is the save's own error until the first report takes it; later reports
    /// get [`ErrorKind::AsyncSave`] with `message`.
    Failed {
        error: Option<Error>,
        message: String,
    },
}

type Slot = Arc<(Mutex<SaveState>, Condvar)>;

fn set_slot(slot: &Slot, state: SaveState) {
    let (lock, cv) = &**slot;
    let mut g = lock.lock().unwrap_or_else(PoisonError::into_inner);
    *g = state;
    cv.notify_all();
}

/// Records a failure if the save thread ends (unwinds) without recording a result, so
/// that nobody waits for it forever.
struct Unfinished(Slot);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let running = {
            let g = self.0.0.lock().unwrap_or_else(PoisonError::into_inner);
            matches!(*g, SaveState::Running)
        };
        if running {
            let message = "the save thread panicked before recording a result".to_string();
            set_slot(
                &self.0,
                SaveState::Failed {
                    error: None,
                    message,
                },
            );
        }
    }
}

/// A handle on an asynchronous save.
#[derive(Debug, Clone)]
pub struct SaveHandle {
    slot: Slot,
}

impl SaveHandle {
    /// Waits for the save to finish and returns its report or its error.
    ///
    /// A failed save's error is reported twice, here and by the checkpointer's next
    /// [`save`](Checkpointer::save), [`save_async`](Checkpointer::save_async) or
    /// [`wait`](Checkpointer::wait). The first of those reports is the save's own error
    /// (its [`ErrorKind`]: `Locked`, `TagExists`, `Io` ..., and its location); every later
    /// one is [`ErrorKind::AsyncSave`] carrying that error's message.
    pub fn wait(&self) -> Result<SaveReport> {
        let (lock, cv) = &*self.slot;
        let mut g = lock.lock().unwrap_or_else(PoisonError::into_inner);
        while matches!(*g, SaveState::Running) {
            g = cv.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        match &mut *g {
            SaveState::Saved(r) => Ok(r.clone()),
            SaveState::Failed { error, message } => Err(error
                .take()
                .unwrap_or_else(|| ErrorKind::AsyncSave(message.clone()).into())),
            SaveState::Running => Err(ErrorKind::AsyncSave("no result".into()).into()),
        }
    }

    /// Whether the save has finished (successfully or not).
    pub fn is_done(&self) -> bool {
        let g = self.slot.0.lock().unwrap_or_else(PoisonError::into_inner);
        !matches!(*g, SaveState::Running)
    }
}

/// Saves and restores checkpoints of one training run in one archive.
#[derive(Debug)]
pub struct Checkpointer {
    path: PathBuf,
    opts: CheckpointOptions,
    pending: Option<(JoinHandle<()>, SaveHandle)>,
    opened: OpenReport,
}

impl Checkpointer {
    /// A checkpointer for the archive at `path`; the file is created by the first save.
    ///
    /// `path` may be an `s3://` or `az://` URL (with the `remote` feature): each save is then a
    /// remote append ([`RemoteAppender`](crate::remote::RemoteAppender): only the new
    /// checkpoint's bytes are uploaded, the old ones copied by the store) and each
    /// retention pass a remote removal ([`remote::remove_tags`](crate::remote::remove_tags));
    /// one that loses a race with another writer re-opens the archive and tries again, up
    /// to 4 more times (then fails with [`ErrorKind::RemoteConflict`], nothing written). A
    /// remote archive is never compacted (its dead bytes stay; docs/REMOTE.md).
    ///
    /// When the archive exists, the retention policy is applied to it at once (in place,
    /// under the write lock, only when it drops something), as a save would after its
    /// append: a run killed between a save's append and its retention pass thus ends as
    /// the policy says when it is opened again, even with nothing left to save.
    /// [`open_report`](Checkpointer::open_report) tells what was removed. A process that
    /// only reads (`latest`, `restore`) should open with the run's policy or with
    /// [`Retention::default()`], which removes nothing. If another writer holds the lock,
    /// the policy is left to that writer or to the next save
    /// ([`OpenReport::deferred`]). The compaction threshold is checked by saves only.
    ///
    /// The options are checked first, before the archive is touched: a pattern without
    /// `{step}`, a count of 0 (`keep_last`, `keep_every`, `keep_best`'s `count`) or a
    /// `compact_dead_fraction` outside 0.0..=1.0 is refused with
    /// [`ErrorKind::InvalidInput`] naming the option and its value.
    pub fn open(path: impl AsRef<Path>, opts: CheckpointOptions) -> Result<Checkpointer> {
        check_options(&opts)?;
        let path = path.as_ref().to_path_buf();
        let mut opened = OpenReport::default();
        #[cfg(feature = "remote")]
        if let Some(url) = url_of(&path) {
            opened.removed = remote::apply_retention(url, &opts)
                .map_err(|e| e.in_file(url))?
                .0;
            return Ok(Checkpointer {
                opts,
                pending: None,
                opened,
                path,
            });
        }
        if path.exists() {
            match apply_retention(&path, &opts) {
                Ok(removed) => opened.removed = removed,
                Err(e) if matches!(e.kind(), ErrorKind::Locked) => opened.deferred = true,
                Err(e) => return Err(e.in_file(&path)),
            }
        }
        Ok(Checkpointer {
            path,
            opts,
            pending: None,
            opened,
        })
    }

    /// What [`open`](Checkpointer::open) did to the existing archive.
    pub fn open_report(&self) -> &OpenReport {
        &self.opened
    }

    /// The archive path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Saves a checkpoint, applies the retention policy, and returns when it is durable.
    /// Waits for a pending asynchronous save first, and fails with its error if it failed
    /// (see [`SaveHandle::wait`] for which error).
    ///
    /// # Examples
    ///
    /// ```
    /// use modelzip::checkpoint::{Checkpoint, CheckpointOptions, Checkpointer};
    /// use modelzip::Tensor;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mut ck = Checkpointer::open(dir.path().join("run.zip"), CheckpointOptions::default())?;
    /// let mut c = Checkpoint::new(100);
    /// c.params.push(("w".into(), Tensor::from_slice(vec![2], &[0.5f32, 1.5])?));
    /// c.metrics.insert("loss".into(), 0.25);
    /// let report = ck.save(&c)?;
    /// assert_eq!(report.tag, "step-000000100");
    /// assert_eq!(ck.latest()?.map(|c| c.step), Some(100));
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn save(&mut self, ckpt: &Checkpoint) -> Result<SaveReport> {
        self.wait()?;
        save_now(&self.path, &self.opts, ckpt)
    }

    /// Saves this rank's part of checkpoint `step`, written by several processes at once
    /// (a sharded save, docs/SHARDED.md): every rank calls this with the same `specs`
    /// (the global tensors) and its own `sharding.rank`; `write` writes the rank's rows
    /// ([`ShardedWriter::write_param`](crate::sharded::ShardedWriter::write_param),
    /// [`write_updater`](crate::sharded::ShardedWriter::write_updater)). Rank 0 writes
    /// the checkpoint's metadata (`step`, its `metrics`, the retention record), commits,
    /// then applies the retention policy and the compaction threshold as
    /// [`Checkpointer::save`] does; the other ranks' reports remove nothing. An `s3://`
    /// archive takes sharded saves too (docs/SHARDED.md, "Object stores"); a commit that
    /// loses a race with another writer is not tried again (the ranks' bytes would have
    /// to be composed anew): the error says so and the next save goes on.
    pub fn save_sharded(
        &mut self,
        step: u64,
        metrics: BTreeMap<String, f64>,
        specs: &[crate::sharded::TensorSpec],
        sharding: &crate::sharded::ShardedOptions,
        write: impl FnOnce(&mut crate::sharded::ShardedWriter) -> Result<()>,
    ) -> Result<SaveReport> {
        self.wait()?;
        let tag = tag_for(&self.opts.pattern, step)?;
        let rank0 = sharding.rank == 0;
        let mut ckpt = Checkpoint::new(step);
        ckpt.metrics = metrics;
        let record = if rank0 && !self.opts.retention.is_unset() {
            let snapshot = open_archive(&self.path)?;
            retention_record(snapshot.as_ref(), &self.opts, &tag, &ckpt)?
        } else if rank0 {
            retention_record(None, &self.opts, &tag, &ckpt)?
        } else {
            None
        };
        let mut sopts = sharding.clone();
        sopts.write = self.opts.write.clone();
        let mut w = crate::sharded::ShardedWriter::open(&self.path, &tag, specs, &sopts)?;
        write(&mut w)?;
        if rank0 {
            let mut meta = json!({"step": step, "metrics": ckpt.metrics});
            if let Some(r) = &record {
                meta["retention"] = r.to_json();
            }
            w.metadata(meta.to_string().as_bytes())?;
        }
        let done = w.finish()?;
        if !rank0 {
            return Ok(SaveReport {
                tag,
                removed: Vec::new(),
                compacted: false,
                bytes_uploaded: None,
                bytes_copied: None,
                deferred: false,
            });
        }
        #[cfg(feature = "remote")]
        if let Some(url) = url_of(&self.path) {
            let (removed, removal, deferred) =
                match deferrable(remote::apply_retention(url, &self.opts))? {
                    Some((removed, removal)) => (removed, removal, false),
                    None => (Vec::new(), None, true),
                };
            let cost = |w: Option<&crate::remote::RemoteWrite>| {
                w.map_or((0, 0), |w| (w.bytes_uploaded, w.bytes_copied))
            };
            let (up, copied) = cost(done.remote.as_ref());
            let (up2, copied2) = cost(removal.as_ref());
            return Ok(SaveReport {
                tag,
                removed,
                compacted: false,
                bytes_uploaded: Some(up + up2),
                bytes_copied: Some(copied + copied2),
                deferred,
            });
        }
        let _ = done;
        retain_and_compact(&self.path, &self.opts, tag)
    }

    /// Saves on a background thread. Waits for the previous asynchronous save (and
    /// fails with its error if it failed, see [`SaveHandle::wait`]), then returns at once.
    pub fn save_async(&mut self, ckpt: Checkpoint) -> Result<SaveHandle> {
        self.wait()?;
        let slot: Slot = Arc::new((Mutex::new(SaveState::Running), Condvar::new()));
        let handle = SaveHandle { slot: slot.clone() };
        let (path, opts) = (self.path.clone(), self.opts.clone());
        let thread = std::thread::Builder::new()
            .name("modelzip-save".into())
            .spawn(move || {
                let _unfinished = Unfinished(slot.clone());
                let state = match save_now(&path, &opts, &ckpt) {
                    Ok(r) => SaveState::Saved(r),
                    Err(e) => SaveState::Failed {
                        message: e.to_string(),
                        error: Some(e),
                    },
                };
                set_slot(&slot, state);
            })
            .map_err(Error::from)?;
        self.pending = Some((thread, handle.clone()));
        Ok(handle)
    }

    /// Waits for the pending asynchronous save, if any; returns its report, or its error
    /// (see [`SaveHandle::wait`] for which error).
    pub fn wait(&mut self) -> Result<Option<SaveReport>> {
        match self.pending.take() {
            None => Ok(None),
            Some((thread, handle)) => {
                let joined = thread.join();
                let report = handle.wait()?;
                if joined.is_err() {
                    return Err(ErrorKind::AsyncSave("the save thread panicked".into()).into());
                }
                Ok(Some(report))
            }
        }
    }

    /// Every tag in the archive, oldest first, checkpoints or not (none before the
    /// first save).
    pub fn tags(&self) -> Result<Vec<String>> {
        Ok(open_archive(&self.path)?.map_or_else(Vec::new, |a| a.tags().to_vec()))
    }

    /// The checkpoint tags in the archive, oldest first: the tags a checkpointer wrote
    /// (see the module documentation), without any other tag.
    pub fn checkpoints(&self) -> Result<Vec<String>> {
        let Some(archive) = open_archive(&self.path)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for tag in archive.tags() {
            if checkpoint_info(&archive, tag)?.is_ok() {
                out.push(tag.clone());
            }
        }
        Ok(out)
    }

    /// The newest checkpoint: the last tag in the archive's order that a checkpointer
    /// wrote (tags added otherwise, such as a `release` tag or an INT8 variant, are
    /// skipped). `None` when the archive holds no checkpoint or does not exist yet.
    pub fn latest(&self) -> Result<Option<Checkpoint>> {
        let Some(archive) = open_archive(&self.path)? else {
            return Ok(None);
        };
        for tag in archive.tags().iter().rev() {
            if checkpoint_info(&archive, tag)?.is_ok() {
                return restore_from(&archive, tag)
                    .map(Some)
                    .map_err(|e| e.in_file(&self.path));
            }
        }
        Ok(None)
    }

    /// The checkpoint stored under `tag` (ignoring ASCII case). A tag that is not a
    /// checkpoint (no `step` in its metadata.json, or a variant) is refused with
    /// [`ErrorKind::NotACheckpoint`].
    pub fn restore(&self, tag: &str) -> Result<Checkpoint> {
        #[cfg(feature = "remote")]
        if let Some(url) = url_of(&self.path) {
            let archive = crate::remote::RemoteOptions::default().open(url)?;
            return restore_from(&archive, tag).map_err(|e| e.in_file(url));
        }
        let archive = Archive::open(&self.path)?;
        restore_from(&archive, tag).map_err(|e| e.in_file(&self.path))
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Never lose a save in flight: wait for it (its error stays on its handle).
        if let Some((thread, _)) = self.pending.take() {
            let _ = thread.join();
        }
    }
}

/// The URL `path` spells, when the checkpointer's archive is remote (`s3://...`).
#[cfg(feature = "remote")]
fn url_of(path: &Path) -> Option<&str> {
    path.to_str().filter(|p| crate::remote::is_url(p))
}

/// The archive at `path` (a file, or an `s3://` or `az://` URL), or `None` before the first save.
fn open_archive(path: &Path) -> Result<Option<Archive>> {
    #[cfg(feature = "remote")]
    if let Some(url) = url_of(path) {
        return remote::open(url);
    }
    if !path.exists() {
        return Ok(None);
    }
    Archive::open(path).map(Some)
}

/// Refuses options that mean nothing (see [`Checkpointer::open`]); the one place they
/// are checked, since every save uses the options its checkpointer was opened with.
fn check_options(opts: &CheckpointOptions) -> Result<()> {
    tag_for(&opts.pattern, 0)?;
    let refuse = |option: String, why: &str| {
        Err(Error::new(ErrorKind::InvalidInput(format!(
            "checkpoint option {option} is invalid: {why}"
        ))))
    };
    let keeps_none = "it must be at least 1 (the newest checkpoint is always kept; \
                      keep_last=1 keeps only it)";
    let r = &opts.retention;
    if r.keep_last == Some(0) {
        return refuse("keep_last=0".into(), keeps_none);
    }
    if r.keep_every == Some(0) {
        return refuse(
            "keep_every=0".into(),
            "it must be at least 1 (checkpoints whose step is a multiple of it are kept)",
        );
    }
    if let Some(best) = &r.keep_best
        && best.count == 0
    {
        return refuse(
            format!("keep_best count=0 (metric {:?})", best.metric),
            keeps_none,
        );
    }
    let f = opts.compact_dead_fraction;
    if !(0.0..=1.0).contains(&f) {
        return refuse(
            format!("compact_dead_fraction={f}"),
            "it is a fraction of the file, from 0 (compact whenever there are dead bytes) \
             to 1 (never compact)",
        );
    }
    Ok(())
}

/// The tag name for `step` under `pattern`.
pub fn tag_for(pattern: &str, step: u64) -> Result<String> {
    let bad = || {
        Error::new(ErrorKind::InvalidInput(format!(
            "tag pattern {pattern:?} must contain {{step}} or {{step:0N}}"
        )))
    };
    let start = pattern.find("{step").ok_or_else(bad)?;
    let end = start + pattern[start..].find('}').ok_or_else(bad)?;
    let spec = &pattern[start + 5..end];
    let digits = match spec {
        "" => format!("{step}"),
        s => {
            let width: usize = s
                .strip_prefix(":0")
                .and_then(|w| w.parse().ok())
                .filter(|w| *w <= 20)
                .ok_or_else(bad)?;
            format!("{step:0width$}")
        }
    };
    let name = format!("{}{digits}{}", &pattern[..start], &pattern[end + 1..]);
    archive::validate_tag_name(&name)?;
    Ok(name)
}

/// The metadata.json keys a checkpointer writes (`write_tag`), `step` being the one
/// that marks its tags. A tag derived from a checkpoint (a variant) must not carry them, or it would be
/// resumed from and removed by retention like a checkpoint.
pub(crate) const CHECKPOINT_KEYS: [&str; 3] = ["step", "metrics", "retention"];

/// The metadata.json records of variants ([`crate::variants`]): a tag that has one is
/// not a checkpoint, even with a `step` (variants made by earlier versions copied it).
const VARIANT_KEYS: [&str; 2] = ["quantization", "cast"];

fn write_tag(w: &mut TagWriter<'_>, ckpt: &Checkpoint, retention: Option<&Record>) -> Result<()> {
    for (name, t) in &ckpt.params {
        w.param(name, &t.view())?;
    }
    for (name, arrays) in &ckpt.updater {
        let views: Vec<TensorView<'_>> = arrays.iter().map(Tensor::view).collect();
        w.updater(name, &views)?;
    }
    if let Some(tc) = &ckpt.training_config {
        w.training_config(&tc.encode()?)?;
    }
    let mut meta = json!({"step": ckpt.step, "metrics": ckpt.metrics});
    if let Some(r) = retention {
        meta["retention"] = r.to_json();
    }
    w.metadata(meta.to_string().as_bytes())
}

fn save_now(path: &Path, opts: &CheckpointOptions, ckpt: &Checkpoint) -> Result<SaveReport> {
    #[cfg(feature = "remote")]
    if let Some(url) = url_of(path) {
        return remote::save(url, opts, ckpt);
    }
    let tag = tag_for(&opts.pattern, ckpt.step)?;
    let snapshot = match path.exists() && !opts.retention.is_unset() {
        true => Some(Archive::open(path)?),
        false => None,
    };
    let record = retention_record(snapshot.as_ref(), opts, &tag, ckpt)?;
    drop(snapshot);
    // A new archive: checked again under the writer's lock, since another writer may have
    // created it meanwhile (finishing would replace it): then this appends to it.
    let mut new = None;
    if !path.exists() {
        let writer = ArchiveWriter::create_with(path, &opts.write)?;
        if !path.exists() {
            new = Some(writer);
        }
    }
    if let Some(mut writer) = new {
        let mut w = writer.begin_tag(&tag)?;
        write_tag(&mut w, ckpt, record.as_ref())?;
        w.finish()?;
        writer.finish()?;
    } else {
        let mut app = Appender::open_with(path, AppendMode::InPlace, &opts.write)?;
        let mut w = app.begin_tag(&tag)?;
        write_tag(&mut w, ckpt, record.as_ref())?;
        w.finish()?;
        app.finish()?;
    }
    retain_and_compact(path, opts, tag)
}

/// After the save of `tag` (local): removes the checkpoints the policy drops, then
/// compacts the archive if its dead bytes pass `compact_dead_fraction`; the save's
/// report. A second commit: a crash before it leaves the checkpoints it would remove,
/// which the next open (or save) removes, since the policy depends only on the archive.
fn retain_and_compact(path: &Path, opts: &CheckpointOptions, tag: String) -> Result<SaveReport> {
    let mut report = SaveReport {
        tag,
        removed: Vec::new(),
        compacted: false,
        bytes_uploaded: None,
        bytes_copied: None,
        deferred: false,
    };
    let Some(removed) = deferrable(apply_retention(path, opts))? else {
        report.deferred = true;
        return Ok(report);
    };
    report.removed = removed;
    let a = Archive::open(path)?;
    let dead = a.dead_bytes() as f64;
    let len = a.len_bytes().max(1) as f64;
    drop(a);
    if dead / len > opts.compact_dead_fraction {
        match deferrable(archive::compact(path, &opts.write))? {
            Some(_) => report.compacted = true,
            None => report.deferred = true,
        }
    }
    Ok(report)
}

/// The result of a retention pass or compaction that follows a committed save, `None`
/// when another writer held the archive (or kept changing a remote one): that work is
/// left to the next save, and the save, committed, does not fail for it.
fn deferrable<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if matches!(e.kind(), ErrorKind::Locked | ErrorKind::RemoteConflict(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The `retention` record of the checkpoint `tag` about to be saved: the policy, and
/// the checkpoints removed so far (from the newest checkpoint's record) plus those the
/// policy will drop once this one is in, as decided on the archive as it is now (the
/// retention pass after the append decides again, under the lock; another writer in
/// between can make the two differ). `None` without a policy.
fn retention_record(
    archive: Option<&Archive>,
    opts: &CheckpointOptions,
    tag: &str,
    ckpt: &Checkpoint,
) -> Result<Option<Record>> {
    if opts.retention.is_unset() {
        return Ok(None);
    }
    let (mut ckpts, previous) = match archive {
        Some(a) => checkpoint_records(a)?,
        None => (Vec::new(), None),
    };
    ckpts.push(CheckpointRecord {
        tag: tag.to_string(),
        step: ckpt.step,
        metrics: ckpt.metrics.clone(),
    });
    let why = decide(&ckpts, &opts.retention);
    let mut record = Record {
        policy: opts.retention.clone(),
        ..previous.unwrap_or_default()
    };
    // Checkpoints the previous record says were removed but that are still here (its
    // retention pass was deferred or cut short): listed again below if dropped now.
    let present: std::collections::HashSet<String> =
        ckpts.iter().map(|c| c.tag.to_ascii_lowercase()).collect();
    record
        .removed
        .retain(|r| !present.contains(&r.tag.to_ascii_lowercase()));
    record.extend(
        ckpts
            .into_iter()
            .zip(why)
            .filter(|(_, w)| w.is_empty())
            .map(|(c, _)| c),
    );
    Ok(Some(record))
}

/// Removes, in place, the checkpoints the retention policy drops from the archive at
/// `path`, and returns them. Idempotent: the policy depends only on the archive.
fn apply_retention(path: &Path, opts: &CheckpointOptions) -> Result<Vec<String>> {
    if opts.retention.is_unset() {
        return Ok(Vec::new());
    }
    // A look without the lock first, so that the usual case (nothing to remove) takes
    // no lock; the removal decides again on the archive it locked.
    let snapshot = Archive::open(path)?;
    let doomed = to_remove(&snapshot, &opts.retention)?;
    drop(snapshot);
    if doomed.is_empty() {
        return Ok(Vec::new());
    }
    // In place: the cost is the change, not the archive; the removed checkpoints' bytes
    // become dead bytes, which a save's compaction reclaims in bulk.
    let removal = archive::Removal::picked_by(|a| to_remove(a, &opts.retention)).in_place(true);
    Ok(archive::remove_tags(path, removal, &opts.write)?.removed)
}

/// Why tag `tag` is not a checkpoint (`Err`), or its record and parsed metadata.json (`Ok`).
type CheckpointInfo = std::result::Result<(CheckpointRecord, Value), String>;

/// Whether `tag` was written by a checkpointer: its metadata.json has a `step` (a
/// non-negative integer) and no variant record.
fn checkpoint_info(archive: &Archive, tag: &str) -> Result<CheckpointInfo> {
    let Some(canon) = archive.canonical_tag(tag) else {
        return Err(ErrorKind::tag_not_found(tag, archive.tags()).into());
    };
    // Only metadata.json: the tag's tables are not loaded (a save reads every tag's).
    let Some(meta) = archive.metadata_of(canon)? else {
        return Ok(Err("it has no metadata.json".into()));
    };
    if let Err(e) =
        crate::json_cost::check_json_cost(&meta, "estimated memory of parsing metadata.json")
    {
        return Ok(Err(format!("its metadata.json is not read ({e})")));
    }
    let v: Value = match serde_json::from_slice(&meta) {
        Ok(v) => v,
        Err(e) => return Ok(Err(format!("its metadata.json is not valid JSON ({e})"))),
    };
    if let Some(k) = VARIANT_KEYS.iter().find(|k| v.get(**k).is_some()) {
        return Ok(Err(format!(
            "it is a variant (its metadata.json has a {k:?} record), not written by a checkpointer"
        )));
    }
    let Some(step) = v.get("step") else {
        return Ok(Err(
            "its metadata.json has no \"step\": it was not written by a checkpointer".into(),
        ));
    };
    let Some(step) = step.as_u64() else {
        return Ok(Err(format!(
            "its metadata.json has \"step\": {step}, not a non-negative integer"
        )));
    };
    let record = CheckpointRecord {
        tag: canon.to_string(),
        step,
        metrics: retention::metrics_from(v.get("metrics")),
    };
    Ok(Ok((record, v)))
}

/// The checkpoints of `archive`, oldest first, and the retention record of the newest
/// one (`None` when it has none or a malformed one: a new record then starts afresh).
fn checkpoint_records(archive: &Archive) -> Result<(Vec<CheckpointRecord>, Option<Record>)> {
    let mut ckpts = Vec::new();
    let mut newest = None;
    for tag in archive.tags() {
        if let Ok((record, meta)) = checkpoint_info(archive, tag)? {
            ckpts.push(record);
            newest = Some(meta);
        }
    }
    let record = newest
        .as_ref()
        .and_then(|m| m.get("retention"))
        .and_then(|r| Record::from_json(r).ok());
    Ok((ckpts, record))
}

/// The checkpoint tags the policy drops, spelled as in tags.txt. Tags not written by a
/// checkpointer are never dropped, nor is the newest checkpoint.
fn to_remove(archive: &Archive, policy: &Retention) -> Result<Vec<String>> {
    let (ckpts, _) = checkpoint_records(archive)?;
    let why = decide(&ckpts, policy);
    Ok(ckpts
        .into_iter()
        .zip(why)
        .filter(|(_, w)| w.is_empty())
        .map(|(c, _)| c.tag)
        .collect())
}

fn restore_from(archive: &Archive, tag: &str) -> Result<Checkpoint> {
    let t = archive.tag(tag)?;
    let (record, _) = checkpoint_info(archive, tag)?.map_err(|why| {
        Error::new(ErrorKind::NotACheckpoint(format!(
            "tag {:?} is not a checkpoint: {why}",
            t.name()
        )))
        .in_entry(format!("{}/metadata.json", t.name()))
    })?;
    let params = t
        .params()
        .iter()
        .map(|p| Ok((p.name.clone(), t.tensor(&p.location)?.view().to_owned())))
        .collect::<Result<Vec<_>>>()?;
    let updater = t
        .updater()
        .iter()
        .map(|u| {
            let arrays = u
                .arrays
                .iter()
                .map(|loc| Ok(t.tensor(loc)?.view().to_owned()))
                .collect::<Result<Vec<_>>>()?;
            Ok((u.name.clone(), arrays))
        })
        .collect::<Result<Vec<_>>>()?;
    let training_config = match t.training_config()? {
        Some(bytes) => Some(TrainingConfig::decode(&bytes)?),
        None => None,
    };
    Ok(Checkpoint {
        step: record.step,
        params,
        updater,
        training_config,
        metrics: record.metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_names_follow_the_pattern() {
        assert_eq!(tag_for("step-{step:09}", 1000).unwrap(), "step-000001000");
        assert_eq!(tag_for("ckpt{step}", 7).unwrap(), "ckpt7");
        assert_eq!(tag_for("e{step:03}.final", 5).unwrap(), "e005.final");
        assert!(tag_for("no-step", 1).is_err());
        assert!(tag_for("{step:x}", 1).is_err());
        assert!(tag_for("bad/{step}", 1).is_err());
    }

    fn keep_last(n: usize) -> CheckpointOptions {
        CheckpointOptions {
            retention: Retention {
                keep_last: Some(n),
                ..Retention::default()
            },
            ..CheckpointOptions::default()
        }
    }

    fn with_step(step: u64) -> Checkpoint {
        let mut c = Checkpoint::new(step);
        c.params.push((
            "w".into(),
            Tensor::from_slice(vec![1], &[step as f32]).unwrap(),
        ));
        c
    }

    /// The retention pass after a committed save finds another writer holding the lock:
    /// the save reports the checkpoint saved with the pass deferred (it failed with
    /// `Locked`, and a retry with `TagExists`); the next pass removes what it would have.
    #[test]
    fn a_retention_pass_found_locked_after_the_commit_is_deferred() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        for step in [1, 2] {
            save_now(&p, &CheckpointOptions::default(), &with_step(step)).unwrap();
        }
        let opts = keep_last(1);
        let held = crate::WriteLock::acquire(&p, false).unwrap();
        let r = retain_and_compact(&p, &opts, "step-000000002".into()).unwrap();
        assert!(r.deferred && r.removed.is_empty() && !r.compacted, "{r:?}");
        assert_eq!(Archive::open(&p).unwrap().tags().len(), 2);
        drop(held);
        let r = retain_and_compact(&p, &opts, "step-000000002".into()).unwrap();
        assert!(!r.deferred, "{r:?}");
        assert_eq!(r.removed, ["step-000000001"]);
    }

    /// A checkpoint whose save said it removed an older one that is still there (its
    /// retention pass deferred or cut short): the next save's record lists that one
    /// once, with what this save drops.
    #[test]
    fn a_removal_recorded_but_not_done_is_recorded_once() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        let mut w = crate::ArchiveWriter::create(&p).unwrap();
        let meta = |step: u64, retention: Value| {
            let mut m = json!({"step": step, "metrics": {}});
            if !retention.is_null() {
                m["retention"] = retention;
            }
            m.to_string()
        };
        let x = || Tensor::from_slice(vec![1], &[1f32]).unwrap();
        w.add_tag(
            crate::TagBuilder::new("step-000000001")
                .param("w", x())
                .metadata(meta(1, Value::Null)),
        )
        .unwrap();
        let said = json!({
            "keep_last": 1, "keep_every": null, "keep_best": null,
            "removed": [{"tag": "step-000000001", "step": 1, "metrics": {}}],
            "removed_omitted": 0,
        });
        w.add_tag(
            crate::TagBuilder::new("step-000000002")
                .param("w", x())
                .metadata(meta(2, said)),
        )
        .unwrap();
        w.finish().unwrap();
        let a = Archive::open(&p).unwrap();
        let r = retention_record(Some(&a), &keep_last(1), "step-000000003", &with_step(3))
            .unwrap()
            .unwrap();
        let tags: Vec<&str> = r.removed.iter().map(|c| c.tag.as_str()).collect();
        assert_eq!(tags, ["step-000000001", "step-000000002"]);
    }

    /// An infinite metric is stored as null: the record made before the save decides as
    /// the pass after it does (no candidate), so a checkpoint the pass keeps is not
    /// recorded as removed.
    #[test]
    fn an_infinite_metric_is_no_candidate_for_keep_best() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        let opts = CheckpointOptions {
            retention: Retention {
                keep_last: Some(1),
                keep_best: Some(KeepBest {
                    metric: "acc".into(),
                    goal: Goal::Max,
                    count: 1,
                }),
                ..Retention::default()
            },
            ..CheckpointOptions::default()
        };
        let mut last = None;
        for (step, acc) in [(1, 0.9), (2, 0.5), (3, f64::INFINITY)] {
            let mut c = with_step(step);
            c.metrics.insert("acc".into(), acc);
            last = Some(save_now(&p, &opts, &c).unwrap());
        }
        assert_eq!(last.unwrap().removed, ["step-000000002"]);
        let a = Archive::open(&p).unwrap();
        assert_eq!(a.tags(), ["step-000000001", "step-000000003"]);
        let (_, record) = checkpoint_records(&a).unwrap();
        let tags: Vec<String> = record.unwrap().removed.into_iter().map(|c| c.tag).collect();
        assert_eq!(tags, ["step-000000002"]);
    }
}
