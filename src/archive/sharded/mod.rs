//! Sharded saves: one tag written by many processes ("ranks") at once, each writing only
//! the rows it holds, committed once (docs/SHARDED.md).
//!
//! Every rank opens a [`ShardedWriter`] with the same description of the global tensors
//! ([`TensorSpec`]: name, element type, global shape) and its own rank; each computes the
//! same plan (where each tensor's entry and each row goes) without talking to the
//! others. Rank 0 takes the archive's write lock for the group and stages an extension
//! of the archive (the archive stays readable as it was); every rank then writes its
//! rows into it with positioned writes and leaves a marker (fsynced) beside the archive;
//! rank 0 commits when every marker is there, or rolls the archive back to exactly what
//! it was after [`ShardedOptions::timeout`]. The committed tag is an
//! ordinary tag: each tensor is one LoDTensor entry that every reader reads.
//!
//! # Examples
//!
//! Two ranks (here two threads; usually two processes) each write half the rows:
//!
//! ```
//! use modelzip::sharded::{ShardedOptions, ShardedWriter, TensorSpec};
//! use modelzip::{DType, Tensor};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("run.zip");
//! let specs = vec![TensorSpec::param("w", DType::Fp32, vec![4, 2])];
//! let rows: Vec<f32> = (0..8).map(|i| i as f32).collect();
//! std::thread::scope(|s| {
//!     for rank in 0..2u32 {
//!         let (path, specs, rows) = (&path, &specs, &rows);
//!         s.spawn(move || -> modelzip::Result<()> {
//!             let opts = ShardedOptions::new(rank, 2);
//!             let mut w = ShardedWriter::open(path, "step-1", specs, &opts)?;
//!             let mine = &rows[rank as usize * 4..rank as usize * 4 + 4];
//!             let t = Tensor::from_slice(vec![2, 2], mine)?;
//!             w.write_param("w", 2 * u64::from(rank), &t.view())?;
//!             w.finish()?;
//!             Ok(())
//!         });
//!     }
//! });
//! let a = modelzip::Archive::open(&path)?;
//! let w = a.latest()?.param("w")?;
//! assert_eq!(w.view().to_vec::<f32>()?, rows);
//! assert!(a.verify().is_ok());
//! # Ok::<(), modelzip::Error>(())
//! ```

pub(crate) mod boxes;
pub(crate) mod commit;
#[cfg(feature = "remote")]
pub(crate) mod compose;
pub(crate) mod group;
pub(crate) mod plan;

pub use plan::TensorSpec;

use super::archive_path::ArchivePath;
use super::lock::WriteLock;
use super::reader::GraphFormat;
use super::session::WriteOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::TensorView;
use group::{Group, Lease, ShardDone};
use plan::Plan;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

/// When a wait of `timeout` from now ends: a timeout past what the clock can count (a
/// caller's "forever") ends in a century.
pub(crate) fn deadline(timeout: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now)
}

pub(crate) use commit::{discard_staged, recover_staged};
pub(crate) use group::undo_path;

/// Options of a [`ShardedWriter`]: which rank this is, of how many, and how long to wait.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShardedOptions {
    /// This process's rank, `0..world_size`; rank 0 stages and commits.
    pub rank: u32,
    /// How many ranks write the tag.
    pub world_size: u32,
    /// How long each wait lasts: rank 0 for every marker, the others for rank 0 to stage
    /// the save and then to commit it (default 600 s).
    pub timeout: Duration,
    /// The write options (rank 0's `wait_for_lock` and `fsync`: rank 0 makes the staged
    /// extension and the commit durable, every rank's marker is fsynced whatever it
    /// says).
    pub write: WriteOptions,
    /// The group's id, the same on every rank of one group and different between groups
    /// (a job's id: torchrun's `TORCHELASTIC_RUN_ID` with the restart count, Slurm's
    /// job id): part of the plan digest. Ranks talk only through files named after the
    /// tag, so two groups saving the same tag with the same description at once cannot
    /// otherwise be told apart (a lingering rank of a restarted job would join the new
    /// job's save); with ids, a rank of the other group is refused ("the save plan
    /// differs from rank 0's") and the save it stumbled on goes on without it.
    pub group: Option<String>,
}

impl ShardedOptions {
    /// Rank `rank` of `world_size`, with the default timeout and write options.
    pub fn new(rank: u32, world_size: u32) -> ShardedOptions {
        ShardedOptions {
            rank,
            world_size,
            timeout: Duration::from_secs(600),
            write: WriteOptions::default(),
            group: None,
        }
    }
}

/// What a sharded save did, as seen by one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardedReport {
    /// The tag written.
    pub tag: String,
    /// This rank.
    pub rank: u32,
    /// How many ranks wrote the tag.
    pub world_size: u32,
    /// Shards (row ranges) this rank wrote.
    pub shards: usize,
    /// Bytes this rank wrote into the archive.
    pub bytes_written: u64,
    /// Tensors stored by reference to an identical earlier sharded tensor (rank 0 only;
    /// 0 on the others).
    pub deduplicated: usize,
    /// SHA-256 of the save plan, lowercase hex (the same on every rank).
    pub plan: String,
    /// Of a save into an `s3://` archive, on rank 0: what its commit cost (the bytes
    /// uploaded and copied, requests, the versions before and after).
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

/// The tag-wide files only the committing rank gives.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    graph: Option<(GraphFormat, Vec<u8>)>,
    training_config: Option<Vec<u8>>,
    metadata: Option<Vec<u8>>,
}

/// One rank's part of a sharded save (see [`crate::sharded`]). Dropped
/// without [`ShardedWriter::finish`], the rank leaves no marker: rank 0's commit then
/// times out and the archive is rolled back.
pub struct ShardedWriter {
    plan: Plan,
    opts: ShardedOptions,
    shards: Vec<ShardDone>,
    bytes_written: u64,
    extras: Extras,
    store: Store,
}

/// Where the ranks write: a file on a local or shared filesystem, or an object store.
enum Store {
    Local(LocalStore),
    #[cfg(feature = "remote")]
    Remote(Box<crate::remote::sharded::RemoteRank>),
}

/// A rank's state of a save into a file.
struct LocalStore {
    path: ArchivePath,
    group: Group,
    file: File,
    /// The file opened for direct writes (large rows), where the filesystem takes them.
    direct: Option<File>,
    /// Held from the claim to the marker: no commit or rollback while this rank writes.
    lease: Option<Lease>,
    /// Rank 0's write lock, held for the group.
    lock: Option<WriteLock>,
}

impl std::fmt::Debug for ShardedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = match &self.store {
            Store::Local(l) => l.path.shown.display().to_string(),
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.url().to_string(),
        };
        f.debug_struct("ShardedWriter")
            .field("path", &path)
            .field("tag", &self.plan.tag)
            .field("rank", &self.opts.rank)
            .field("world_size", &self.opts.world_size)
            .finish()
    }
}

/// Joins the save `group` staged in the archive as `rank`: takes the shared lease (the
/// group cannot end while this rank writes), checks that the group is still there and
/// that its extension is the one the archive's undo record stages, and claims the rank.
/// Returns the lease and the archive opened for writing.
fn join(
    ap: &ArchivePath,
    tag: &str,
    rank: u32,
    group: &Group,
    timeout: Duration,
) -> Result<(Lease, File)> {
    let lease = group::lease(&ap.real, false, timeout)?;
    match group::read_group(&ap.real, tag)? {
        Some(g) if g == *group => {}
        _ => {
            return Err(invalid(format!(
                "the sharded save of tag {tag:?} ended before rank {rank} joined it"
            )));
        }
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ap.real)
        .map_err(|e| Error::from(e).in_file(&ap.real))?;
    // The staged file holds the whole extension, where the undo record (written by rank
    // 0 before the group file) puts it: a group file that says otherwise is not this
    // staging's, and rows written by it could land on committed entries.
    let len = file
        .metadata()
        .map_err(|e| Error::from(e).in_file(&ap.real))?
        .len();
    let staged = commit::staged_ext_start(&ap.real)?;
    if staged != Some(group.ext_start)
        || group
            .ext_start
            .checked_add(group.ext_len)
            .is_none_or(|end| end > len)
    {
        let why = match staged {
            None => "no save is staged in the archive (no undo record)".to_string(),
            Some(s) if s != group.ext_start => {
                format!("the archive's staging starts its extension at byte {s}")
            }
            Some(_) => format!("past the archive's {len} bytes"),
        };
        return Err(invalid(format!(
            "the group file of the sharded save of tag {tag:?} places the extension at bytes {}..+{}, but {why}: it is not this archive's (delete it if no save is running)",
            group.ext_start, group.ext_len
        )));
    }
    group::claim(&ap.real, tag, rank, &group.nonce)?;
    Ok((lease, file))
}

impl ShardedWriter {
    /// Joins the sharded save of tag `tag` into the archive at `path` as rank
    /// `opts.rank` of `opts.world_size`. `specs` describes every global tensor of the
    /// tag and must be the same on every rank (in any order). Rank 0 creates the archive
    /// if there is none, takes its write lock and stages the save; the other ranks wait
    /// for that (at most `opts.timeout`).
    pub fn open(
        path: impl AsRef<Path>,
        tag: &str,
        specs: &[TensorSpec],
        opts: &ShardedOptions,
    ) -> Result<ShardedWriter> {
        #[cfg(feature = "remote")]
        if let Some(url) = path.as_ref().to_str().filter(|p| crate::remote::is_url(p)) {
            let plan = plan_of(tag, specs, opts)?;
            let rank = crate::remote::sharded::RemoteRank::open(url, &plan, opts)
                .map_err(|e| e.in_file(url))?;
            return Ok(ShardedWriter::new(
                plan,
                opts,
                Store::Remote(Box::new(rank)),
            ));
        }
        let ap = ArchivePath::resolve(path.as_ref())?;
        Self::open_resolved(ap.clone(), tag, specs, opts).map_err(|e| ap.located(e))
    }

    fn new(plan: Plan, opts: &ShardedOptions, store: Store) -> ShardedWriter {
        ShardedWriter {
            plan,
            opts: opts.clone(),
            shards: Vec::new(),
            bytes_written: 0,
            extras: Extras::default(),
            store,
        }
    }

    fn open_resolved(
        ap: ArchivePath,
        tag: &str,
        specs: &[TensorSpec],
        opts: &ShardedOptions,
    ) -> Result<ShardedWriter> {
        let plan = plan_of(tag, specs, opts)?;
        let (lock, group) = if opts.rank == 0 {
            let (lock, group) = commit::stage(&ap, &plan, opts)?;
            (Some(lock), group)
        } else {
            (None, commit::wait_for_group(&ap, &plan, opts)?)
        };
        let joined = join(&ap, tag, opts.rank, &group, opts.timeout);
        let (lease, file) = match joined {
            Ok(j) => j,
            Err(e) => {
                if lock.is_some() {
                    // Rank 0 staged the save: roll it back now (the other ranks see its
                    // group end at once, not at their timeout).
                    let _ = commit::abort(&ap.real, tag, opts.timeout);
                }
                return Err(e);
            }
        };
        let direct = commit::open_direct(&ap.real);
        let store = Store::Local(LocalStore {
            path: ap,
            group,
            file,
            direct,
            lease: Some(lease),
            lock,
        });
        Ok(ShardedWriter::new(plan, opts, store))
    }

    /// Writes rows `first_row..first_row + t.dims()[0]` of parameter `name` (the whole
    /// tensor of a scalar). `t` has the parameter's element type and its global shape
    /// but for the first dimension.
    pub fn write_param(&mut self, name: &str, first_row: u64, t: &TensorView<'_>) -> Result<()> {
        self.write_shard(name, None, At::Row(first_row), t)
    }

    /// Writes rows of updater array `slot` of parameter `name` (see
    /// [`ShardedWriter::write_param`]).
    pub fn write_updater(
        &mut self,
        name: &str,
        slot: u32,
        first_row: u64,
        t: &TensorView<'_>,
    ) -> Result<()> {
        self.write_shard(name, Some(slot), At::Row(first_row), t)
    }

    /// Writes the box of parameter `name` that starts at `offsets` (one per dimension)
    /// and has `t`'s shape: a shard that may split any dimension (the column shards of
    /// tensor parallelism, the blocks of a 2-D mesh). Its bytes land in place in the
    /// tensor's one entry, a run per row of the box.
    pub fn write_param_at(
        &mut self,
        name: &str,
        offsets: &[u64],
        t: &TensorView<'_>,
    ) -> Result<()> {
        self.write_shard(name, None, At::Offsets(offsets), t)
    }

    /// Writes a box of updater array `slot` of parameter `name` (see
    /// [`ShardedWriter::write_param_at`]).
    pub fn write_updater_at(
        &mut self,
        name: &str,
        slot: u32,
        offsets: &[u64],
        t: &TensorView<'_>,
    ) -> Result<()> {
        self.write_shard(name, Some(slot), At::Offsets(offsets), t)
    }

    fn write_shard(
        &mut self,
        name: &str,
        slot: Option<u32>,
        at: At<'_>,
        t: &TensorView<'_>,
    ) -> Result<()> {
        let rank = self.opts.rank;
        let Some(pos) = self.plan.position(name, slot) else {
            let what = TensorSpec {
                name: name.to_string(),
                updater_slot: slot,
                dtype: t.dtype(),
                dims: Vec::new(),
            }
            .label();
            return Err(invalid(format!(
                "rank {rank}: tensor {what} is not in the save's description"
            )));
        };
        let p = &self.plan.tensors[pos];
        let label = p.spec.label();
        if t.dtype() != p.spec.dtype {
            return Err(invalid(format!(
                "rank {rank}: the shard of {label} is {}, the description says {}",
                t.dtype().name(),
                p.spec.dtype.name()
            )));
        }
        let global = p.spec.dims.as_slice();
        // The shard's range on every dimension.
        let ranges: Vec<Range<u64>> = match at {
            At::Row(first_row) => {
                let fits = match (t.dims(), global) {
                    ([], []) => first_row == 0,
                    ([_, a @ ..], [_, b @ ..]) => a == b,
                    _ => false,
                };
                if !fits {
                    return Err(invalid(format!(
                        "rank {rank}: a shard of {label} of shape {:?} at row {first_row} does not fit the global shape {:?} (rows keep every dimension but the first whole; a shard that splits another dimension is written with write_param_at / write_updater_at)",
                        t.dims(),
                        p.spec.dims
                    )));
                }
                let mut r: Vec<Range<u64>> = global.iter().map(|&d| 0..d).collect();
                if let Some(first) = r.first_mut() {
                    *first = first_row..first_row.saturating_add(t.dims()[0]);
                }
                r
            }
            At::Offsets(offsets) => {
                if offsets.len() != global.len() || t.dims().len() != global.len() {
                    return Err(invalid(format!(
                        "rank {rank}: a shard of {label} of shape {:?} at offsets {offsets:?} does not match the {} dimensions of the global shape {:?}",
                        t.dims(),
                        global.len(),
                        p.spec.dims
                    )));
                }
                offsets
                    .iter()
                    .zip(t.dims())
                    .map(|(&o, &n)| o..o.saturating_add(n))
                    .collect()
            }
        };
        if let Some(d) =
            (0..global.len()).find(|&d| ranges[d].end > global[d] || ranges[d].end == u64::MAX)
        {
            return Err(invalid(format!(
                "rank {rank}: a shard of {label} of shape {:?} spans {}..{} of dimension {d}, past the global shape {:?}",
                t.dims(),
                ranges[d].start,
                ranges[d].end,
                p.spec.dims
            )));
        }
        let is_rows = (1..global.len()).all(|d| ranges[d] == (0..global[d]));
        if let Some(s) = self.shards.iter().find(|s| {
            s.tensor == pos && boxes::first_common(&shard_box(s, global), &ranges).is_some()
        }) {
            let theirs = shard_box(s, global);
            return Err(invalid(
                if is_rows && s.boxed.is_none() && !global.is_empty() {
                    format!(
                        "rank {rank}: rows {}..{} of {label} overlap rows {}..{} it already wrote",
                        ranges[0].start,
                        ranges[0].end,
                        s.first_row,
                        s.first_row + s.rows
                    )
                } else {
                    format!(
                        "rank {rank}: the box {} of {label} overlaps the box {} it already wrote",
                        boxes::render(&ranges),
                        boxes::render(&theirs)
                    )
                },
            ));
        }
        let data = t.data();
        let header_len = p.record_header.len() as u64;
        let (first_row, rows) = match ranges.first() {
            Some(r) => (r.start, r.end - r.start),
            None => (0, 1),
        };
        let layout = if is_rows {
            None
        } else {
            Some(boxes::layout(p.spec.dtype, global, &ranges, &label)?)
        };
        let (crc32, sha, staged_at) = match &mut self.store {
            Store::Local(l) => {
                let (crc, sha) = match &layout {
                    None => {
                        let at = l.group.ext_start + p.record_offset + p.row_offset(first_row);
                        commit::write_hashed(&l.file, l.direct.as_ref(), at, data)
                    }
                    Some(layout) => commit::write_box_hashed(
                        &l.file,
                        l.group.ext_start + p.record_offset + header_len,
                        layout,
                        data,
                        p.record_len - header_len,
                    ),
                }
                .map_err(|e| Error::from(e).in_file(&l.path.real))?;
                (crc, sha, None)
            }
            #[cfg(feature = "remote")]
            Store::Remote(r) => {
                let (crc, sha, at) = r.stage(layout.as_ref(), data, p.record_len - header_len)?;
                (crc, sha, Some(at))
            }
        };
        let boxed = layout.map(|_| ranges);
        self.bytes_written += data.len() as u64;
        self.shards.push(ShardDone {
            tensor: pos,
            first_row,
            rows,
            boxed,
            crc32,
            sha256: sha,
            staged_at,
        });
        Ok(())
    }

    /// The tag's graph (rank 0 only: the committing rank writes the tag's own files).
    pub fn graph(&mut self, enc: GraphFormat, bytes: &[u8]) -> Result<()> {
        self.rank0_only("the graph")?;
        super::writer::check_graph(&self.plan.tag, enc, bytes)?;
        self.extras.graph = Some((enc, bytes.to_vec()));
        Ok(())
    }

    /// The tag's trainingConfig.fb (rank 0 only).
    pub fn training_config(&mut self, bytes: &[u8]) -> Result<()> {
        self.rank0_only("the training config")?;
        self.extras.training_config = Some(bytes.to_vec());
        Ok(())
    }

    /// The tag's metadata.json, a JSON object (rank 0 only); modelzip adds `"sharded"`
    /// (world size, plan digest) and `"created"`.
    pub fn metadata(&mut self, json: &[u8]) -> Result<()> {
        self.rank0_only("metadata")?;
        let v: serde_json::Value = serde_json::from_slice(json)
            .map_err(|e| invalid(format!("metadata is not JSON: {e}")))?;
        if !v.is_object() {
            return Err(invalid("metadata must be a JSON object".to_string()));
        }
        self.extras.metadata = Some(json.to_vec());
        Ok(())
    }

    fn rank0_only(&self, what: &str) -> Result<()> {
        if self.opts.rank != 0 {
            return Err(invalid(format!(
                "rank {}: {what} of a sharded save is given by rank 0, which commits the tag",
                self.opts.rank
            )));
        }
        Ok(())
    }

    /// Leaves this rank's marker (its rows are made durable by rank 0's fsync before the
    /// commit); then rank 0 waits for every
    /// rank's marker and commits (or, after the timeout, rolls the archive back and
    /// names the missing ranks), and the other ranks wait for the commit to land.
    pub fn finish(mut self) -> Result<ShardedReport> {
        let done = self.finish_inner();
        match &self.store {
            Store::Local(l) => done.map_err(|e| l.path.located(e)),
            #[cfg(feature = "remote")]
            Store::Remote(r) => done.map_err(|e| e.in_file(r.url())),
        }
    }

    fn finish_inner(&mut self) -> Result<ShardedReport> {
        let shards = std::mem::take(&mut self.shards);
        let count = shards.len();
        let mut report = ShardedReport {
            tag: self.plan.tag.clone(),
            rank: self.opts.rank,
            world_size: self.opts.world_size,
            shards: count,
            bytes_written: self.bytes_written,
            deduplicated: 0,
            plan: self.plan.digest.clone(),
            #[cfg(feature = "remote")]
            remote: None,
        };
        // Without the `remote` feature the store is always local.
        #[allow(clippy::infallible_destructuring_match)]
        let l = match &mut self.store {
            Store::Local(l) => l,
            #[cfg(feature = "remote")]
            Store::Remote(r) => {
                let extras = std::mem::take(&mut self.extras);
                let (deduplicated, write) = r.finish(&self.plan, &self.opts, shards, extras)?;
                report.deduplicated = deduplicated;
                report.remote = write;
                return Ok(report);
            }
        };
        // No fsync here: the rows need to be durable only once the tag is committed, and
        // rank 0 fsyncs the file before it writes the commit (one fsync, not one per
        // rank, each of which would wait for every other rank's dirty pages of the file).
        let marker = group::Marker {
            rank: self.opts.rank,
            plan: self.plan.digest.clone(),
            nonce: l.group.nonce.clone(),
            shards,
            staged: None,
        };
        group::write_marker(&l.path.real, &self.plan.tag, &marker)?;
        drop(l.lease.take());
        report.deduplicated = match l.lock.take() {
            Some(lock) => {
                let extras = std::mem::take(&mut self.extras);
                commit::commit(&l.path, &self.plan, &l.group, &self.opts, extras, lock)?
            }
            None => {
                commit::wait_for_commit(&l.path, &self.plan, &l.group, &self.opts)?;
                0
            }
        };
        Ok(report)
    }
}

impl Drop for ShardedWriter {
    fn drop(&mut self) {
        match &mut self.store {
            // Rank 0 dropped unfinished: roll back now rather than leave the next writer to.
            Store::Local(l) => {
                if let Some(lock) = l.lock.take() {
                    drop(l.lease.take());
                    let _ = commit::abort(&l.path.real, &self.plan.tag, self.opts.timeout);
                    drop(lock);
                }
            }
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.abandon(),
        }
    }
}

/// The plan of the save `opts` joins, after checking the rank.
fn plan_of(tag: &str, specs: &[TensorSpec], opts: &ShardedOptions) -> Result<Plan> {
    if opts.rank >= opts.world_size {
        return Err(invalid(format!(
            "rank {} is not below the world size {}",
            opts.rank, opts.world_size
        )));
    }
    let mut plan = Plan::new(tag, opts.world_size, specs)?;
    if let Some(id) = &opts.group {
        plan.join_group(id);
    }
    Ok(plan)
}

/// Where a shard goes: rows from a first row, or a box from an offset per dimension.
#[derive(Clone, Copy)]
enum At<'a> {
    Row(u64),
    Offsets(&'a [u64]),
}

/// The range on every dimension of shard `s` of a tensor of `dims`.
fn shard_box(s: &ShardDone, dims: &[u64]) -> Vec<Range<u64>> {
    match &s.boxed {
        Some(b) => b.clone(),
        None => {
            let mut r: Vec<Range<u64>> = dims.iter().map(|&d| 0..d).collect();
            if let Some(first) = r.first_mut() {
                *first = s.first_row..s.first_row.saturating_add(s.rows);
            }
            r
        }
    }
}

pub(crate) fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput(msg))
}

/// When `deadline` has passed.
fn past(deadline: Instant) -> bool {
    Instant::now() >= deadline
}
