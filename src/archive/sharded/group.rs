//! The files beside the archive through which the ranks of a sharded save talk (no other
//! channel: any launcher works): the group file the committing rank writes when the
//! extension is staged, one marker per rank, the undo record and the lease.
//!
//! - `<archive>.sharded-<tag>`: the group (JSON): plan digest, world size, a random
//!   nonce naming this attempt, where the extension starts. It exists exactly while the
//!   archive is in the staged state of this attempt (deleted, under the exclusive lease,
//!   before the commit or the rollback touches the archive).
//! - `<archive>.sharded-<tag>.rank-<r>`: rank r's marker (JSON): created (exclusively)
//!   when it starts writing, replaced by the finished one (its shards' offsets, lengths,
//!   CRC-32 and SHA-256) once its bytes are durable.
//! - `<archive>.sharded-undo`: the rollback journal of the staging (the journal's format,
//!   journal.rs): replayed by the next writer if the group never commits.
//! - `<archive>.sharded-lease`: an advisory lock, shared by each rank while it checks the
//!   group and writes, exclusive while the extension is staged, committed or rolled back.
//!   So no rank writes into the archive after its group is gone.

use super::super::archive_path::{regular_file, sidecar};
use super::super::durable::fsync_dir;
use super::super::fault::Budgeted;
use crate::error::{Error, ErrorKind, Result};
use serde_json::{Value, json};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Largest group file or marker read (a marker lists one line per shard).
const MAX_SIDECAR: u64 = 64 << 20;

/// How often a waiting rank looks again.
pub(crate) const POLL: Duration = Duration::from_millis(20);

pub(crate) fn group_path(archive: &Path, tag: &str) -> PathBuf {
    sidecar(archive, &format!(".sharded-{}", tag.to_ascii_lowercase()))
}

pub(crate) fn marker_path(archive: &Path, tag: &str, rank: u32) -> PathBuf {
    sidecar(
        archive,
        &format!(".sharded-{}.rank-{rank}", tag.to_ascii_lowercase()),
    )
}

pub(crate) fn undo_path(archive: &Path) -> PathBuf {
    sidecar(archive, ".sharded-undo")
}

fn lease_path(archive: &Path) -> PathBuf {
    sidecar(archive, ".sharded-lease")
}

/// The staged attempt, as the group file records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub tag: String,
    pub plan: String,
    pub world_size: u32,
    pub nonce: String,
    /// Absolute offset of the extension's first byte.
    pub ext_start: u64,
    pub ext_len: u64,
}

impl Group {
    fn to_json(&self) -> Value {
        json!({
            "format": "modelzip-sharded-group 1",
            "tag": self.tag,
            "plan": self.plan,
            "world_size": self.world_size,
            "nonce": self.nonce,
            "ext_start": self.ext_start,
            "ext_len": self.ext_len,
        })
    }

    fn from_json(v: &Value, at: &Path) -> Result<Group> {
        let bad = || corrupt(at, "not a modelzip group file");
        if v.get("format").and_then(Value::as_str) != Some("modelzip-sharded-group 1") {
            return Err(bad());
        }
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        Ok(Group {
            tag: s("tag").ok_or_else(bad)?,
            plan: s("plan").ok_or_else(bad)?,
            world_size: n("world_size")
                .and_then(|w| u32::try_from(w).ok())
                .ok_or_else(bad)?,
            nonce: s("nonce").ok_or_else(bad)?,
            ext_start: n("ext_start").ok_or_else(bad)?,
            ext_len: n("ext_len").ok_or_else(bad)?,
        })
    }
}

/// One shard as a rank's marker reports it: rows of a planned tensor, or a box of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardDone {
    /// Position of the tensor in the plan.
    pub tensor: usize,
    /// The rows (of a box: the rows it spans).
    pub first_row: u64,
    pub rows: u64,
    /// A shard that splits a dimension past the first: its range on every dimension.
    /// `crc32` is then the CRC-32 of the tensor's data with the box's bytes in place and
    /// zeros elsewhere (boxes.rs), not of the box's own bytes.
    pub boxed: Option<Vec<std::ops::Range<u64>>>,
    pub crc32: u32,
    /// Of the shard's bytes (a box's in its row-major order).
    pub sha256: String,
    /// Of a save into an object store: where the shard's bytes start in the rank's
    /// staging object (a box's in its row-major order).
    pub staged_at: Option<u64>,
}

/// Of a save into an object store: the object holding a rank's shards, back to back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedObject {
    /// The object's key in the archive's bucket.
    pub key: String,
    /// Its version (ETag), as the store reported it: copied only as that version.
    pub e_tag: String,
    /// Its length.
    pub len: u64,
}

/// A rank's finished marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    pub rank: u32,
    pub plan: String,
    pub nonce: String,
    pub shards: Vec<ShardDone>,
    /// Of a save into an object store: the rank's staging object (none when it holds
    /// no bytes).
    pub staged: Option<StagedObject>,
}

impl Marker {
    fn to_json(&self) -> Value {
        let shards: Vec<Value> = self
            .shards
            .iter()
            .map(|s| match &s.boxed {
                None => json!([s.tensor, s.first_row, s.rows, s.crc32, s.sha256]),
                Some(b) => {
                    let b: Vec<[u64; 2]> = b.iter().map(|r| [r.start, r.end]).collect();
                    json!([s.tensor, s.first_row, s.rows, s.crc32, s.sha256, b])
                }
            })
            .collect();
        let mut v = json!({
            "format": "modelzip-sharded-rank 1",
            "state": "written",
            "rank": self.rank,
            "plan": self.plan,
            "nonce": self.nonce,
            "shards": shards,
        });
        if let Some(o) = &self.staged {
            let at: Vec<u64> = self
                .shards
                .iter()
                .map(|s| s.staged_at.unwrap_or(0))
                .collect();
            v["staged"] = json!({"key": o.key, "e_tag": o.e_tag, "len": o.len, "at": at});
        }
        v
    }

    /// The marker `bytes` hold (a JSON object), `what` naming it in errors; `None` while
    /// it is only a claim.
    #[cfg(feature = "remote")]
    pub(crate) fn parse(bytes: &[u8], what: &Path) -> Result<Option<Marker>> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|_| corrupt(what, "not a modelzip rank marker"))?;
        Marker::from_json(&v, what)
    }

    #[cfg(feature = "remote")]
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        self.to_json().to_string().into_bytes()
    }

    /// The marker in `v`; `None` while it is only a claim (the rank is still writing).
    fn from_json(v: &Value, at: &Path) -> Result<Option<Marker>> {
        let bad = || corrupt(at, "not a modelzip rank marker");
        if v.get("format").and_then(Value::as_str) != Some("modelzip-sharded-rank 1") {
            return Err(bad());
        }
        if v.get("state").and_then(Value::as_str) != Some("written") {
            return Ok(None);
        }
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let mut shards = Vec::new();
        for row in v.get("shards").and_then(Value::as_array).ok_or_else(bad)? {
            let f = row
                .as_array()
                .filter(|f| f.len() == 5 || f.len() == 6)
                .ok_or_else(bad)?;
            let n = |i: usize| f[i].as_u64().ok_or_else(bad);
            let boxed = match f.get(5) {
                None => None,
                Some(b) => {
                    let mut out = Vec::new();
                    for r in b.as_array().ok_or_else(bad)? {
                        let r = r.as_array().filter(|r| r.len() == 2).ok_or_else(bad)?;
                        let (a, z) = (r[0].as_u64(), r[1].as_u64());
                        match (a, z) {
                            (Some(a), Some(z)) if a <= z => out.push(a..z),
                            _ => return Err(bad()),
                        }
                    }
                    Some(out)
                }
            };
            // Rows that end within u64, and a SHA-256 as 64 hex digits (it is copied into
            // the tag's shards.txt).
            let (first_row, rows) = (n(1)?, n(2)?);
            first_row.checked_add(rows).ok_or_else(bad)?;
            let sha256 = f[4]
                .as_str()
                .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .ok_or_else(bad)?;
            shards.push(ShardDone {
                tensor: usize::try_from(n(0)?).map_err(|_| bad())?,
                first_row,
                rows,
                boxed,
                crc32: u32::try_from(n(3)?).map_err(|_| bad())?,
                sha256: sha256.to_ascii_lowercase(),
                staged_at: None,
            });
        }
        let staged = match v.get("staged") {
            None => None,
            Some(o) => {
                let at = o.get("at").and_then(Value::as_array).ok_or_else(bad)?;
                if at.len() != shards.len() {
                    return Err(bad());
                }
                for (s, a) in shards.iter_mut().zip(at) {
                    s.staged_at = Some(a.as_u64().ok_or_else(bad)?);
                }
                let t = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
                Some(StagedObject {
                    key: t("key").ok_or_else(bad)?,
                    e_tag: t("e_tag").ok_or_else(bad)?,
                    len: o.get("len").and_then(Value::as_u64).ok_or_else(bad)?,
                })
            }
        };
        Ok(Some(Marker {
            rank: v
                .get("rank")
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(bad)?,
            plan: s("plan").ok_or_else(bad)?,
            nonce: s("nonce").ok_or_else(bad)?,
            shards,
            staged,
        }))
    }
}

fn corrupt(at: &Path, why: &str) -> Error {
    Error::new(ErrorKind::InvalidInput(format!(
        "{why} (delete it if no sharded save is running)"
    )))
    .in_file(at)
}

/// Reads the JSON sidecar at `p`; `None` when it does not exist, or is empty (a rank's
/// marker between its exclusive creation and the write of its claim).
fn read_json(p: &Path) -> Result<Option<Value>> {
    // Opened without blocking: a FIFO put there would hold `open` (and a waiting rank,
    // its timeout never reached) until a writer came; it is refused just below.
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    let mut f = match opts.open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::from(e).in_file(p)),
    };
    regular_file(p, "sharded save file")?;
    let len = f.metadata().map_err(|e| Error::from(e).in_file(p))?.len();
    if len > MAX_SIDECAR {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "sharded save file",
            size: len,
            limit: MAX_SIDECAR,
        })
        .in_file(p));
    }
    let mut b = Vec::with_capacity(len as usize);
    f.read_to_end(&mut b)
        .map_err(|e| Error::from(e).in_file(p))?;
    if b.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(&b)
        .map(Some)
        .map_err(|e| corrupt(p, &format!("not JSON ({e})")))
}

/// Writes `v` to `p` atomically and durably (a temp file renamed over it).
fn write_json(p: &Path, v: &Value) -> Result<()> {
    let dir = super::super::durable::parent_dir(p);
    let mut t = tempfile::Builder::new()
        .prefix(&temp_prefix(p))
        .tempfile_in(&dir)
        .map_err(|e| Error::from(e).in_file(&dir))?;
    let bytes = serde_json::to_vec(v).map_err(|e| ErrorKind::InvalidInput(e.to_string()))?;
    Budgeted(&mut t)
        .write_all(&bytes)
        .and_then(|()| t.as_file().sync_all())
        .map_err(|e| Error::from(e).in_file(p))?;
    t.persist(p).map_err(|e| Error::from(e.error).in_file(p))?;
    fsync_dir(p)
}

/// Prefix of the temp files of [`write_json`] for the sidecar `p`: `.<archive name>.sharded-tmp`
/// (`p` is `<archive>.sharded-...`), so that the group's clean-up finds those a killed
/// rank left.
fn temp_prefix(p: &Path) -> String {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let archive = name.split(".sharded-").next().unwrap_or_default();
    format!(".{archive}.sharded-tmp")
}

pub(crate) fn write_group(archive: &Path, g: &Group) -> Result<()> {
    write_json(&group_path(archive, &g.tag), &g.to_json())
}

pub(crate) fn read_group(archive: &Path, tag: &str) -> Result<Option<Group>> {
    let p = group_path(archive, tag);
    read_json(&p)?.map(|v| Group::from_json(&v, &p)).transpose()
}

/// Claims rank `rank`'s marker for attempt `nonce` (fails if the rank is already
/// claimed: two processes given one rank, or two groups saving one tag at once).
pub(crate) fn claim(archive: &Path, tag: &str, rank: u32, nonce: &str) -> Result<()> {
    let p = marker_path(archive, tag, rank);
    let mut f = match OpenOptions::new().write(true).create_new(true).open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::new(ErrorKind::InvalidInput(format!(
                "rank {rank} of the sharded save of tag {tag:?} is already being written by another process (two processes given rank {rank}, or two groups saving {tag:?} at once)"
            )))
            .in_file(&p));
        }
        Err(e) => return Err(Error::from(e).in_file(&p)),
    };
    let v = json!({"format": "modelzip-sharded-rank 1", "state": "claimed", "rank": rank, "nonce": nonce});
    Budgeted(&mut f)
        .write_all(v.to_string().as_bytes())
        .map_err(|e| Error::from(e).in_file(&p))
}

pub(crate) fn write_marker(archive: &Path, tag: &str, m: &Marker) -> Result<()> {
    write_json(&marker_path(archive, tag, m.rank), &m.to_json())
}

/// Rank `rank`'s finished marker, if it is there.
pub(crate) fn read_marker(archive: &Path, tag: &str, rank: u32) -> Result<Option<Marker>> {
    let p = marker_path(archive, tag, rank);
    match read_json(&p)? {
        None => Ok(None),
        Some(v) => Marker::from_json(&v, &p),
    }
}

/// Deletes every rank marker of `tag` (any world size: the directory is listed), the
/// temp files of markers being written (the caller holds the exclusive lease: no rank is
/// writing one) and, last, the group file, fsyncing the directory between: a crash
/// part way leaves the group file, by which the next writer finds the rest (markers
/// without their group file would be found by no one).
pub(crate) fn remove_group_files(archive: &Path, tag: &str) -> Result<()> {
    let group = group_path(archive, tag);
    let prefix = format!(
        "{}.rank-",
        group
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let dir = super::super::durable::parent_dir(archive);
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    remove_sidecar_temps(archive);
    fsync_dir(&group)?;
    match std::fs::remove_file(&group) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::from(e).in_file(&group));
        }
        _ => {}
    }
    fsync_dir(&group)
}

/// Deletes the temp files of every sidecar of `archive` (group files and markers being
/// written: `.<archive name>.sharded-tmp...`): those of a rank 0 killed while writing
/// its group file are found by no group file. The caller holds the exclusive lease (no
/// rank is writing one).
pub(crate) fn remove_sidecar_temps(archive: &Path) {
    let temps = temp_prefix(&group_path(archive, ""));
    let dir = super::super::durable::parent_dir(archive);
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&temps) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Tags with a group file beside `archive` (staged attempts, live or dead).
pub(crate) fn staged_tags(archive: &Path) -> Vec<String> {
    let Some(name) = archive
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
    else {
        return Vec::new();
    };
    let prefix = format!("{name}.sharded-");
    let dir = super::super::durable::parent_dir(archive);
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = f.strip_prefix(&prefix)
                && rest != "undo"
                && rest != "lease"
                && !rest.contains(".rank-")
            {
                out.push(rest.to_string());
            }
        }
    }
    out
}

/// A held lease (shared or exclusive); released when dropped.
pub(crate) struct Lease(File);

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Takes the lease of `archive`, shared or exclusive, waiting at most `timeout`.
pub(crate) fn lease(archive: &Path, exclusive: bool, timeout: Duration) -> Result<Lease> {
    let p = lease_path(archive);
    regular_file(&p, "lease file")?;
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| Error::from(e).in_file(&p))?;
    let start = Instant::now();
    loop {
        let got = if exclusive {
            f.try_lock()
        } else {
            f.try_lock_shared()
        };
        match got {
            Ok(()) => return Ok(Lease(f)),
            Err(TryLockError::WouldBlock) if start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(Error::new(ErrorKind::InvalidInput(format!(
                    "a rank of a sharded save is still writing into the archive after {:.0} s",
                    timeout.as_secs_f64()
                )))
                .in_file(archive));
            }
            Err(TryLockError::Error(e)) => return Err(Error::from(e).in_file(&p)),
        }
    }
}

/// A random nonce (128 bits, hex) naming one attempt.
pub(crate) fn new_nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = sha2::Sha256::default();
    sha2::Digest::update(
        &mut h,
        format!(
            "{:?} {} {:?}",
            std::time::SystemTime::now(),
            std::process::id(),
            std::thread::current().id()
        ),
    );
    let mut r = std::collections::hash_map::RandomState::new().build_hasher();
    r.write_u64(0);
    sha2::Digest::update(&mut h, r.finish().to_le_bytes());
    let d: [u8; 32] = sha2::Digest::finalize(h).into();
    super::super::hashing::hex_digest(&d)[..32].to_string()
}

#[cfg(test)]
mod tests {
    use super::Marker;
    use serde_json::json;
    use std::path::Path;

    fn marker(shard: serde_json::Value) -> serde_json::Value {
        json!({
            "format": "modelzip-sharded-rank 1",
            "state": "written",
            "rank": 1,
            "plan": "a€€€€€€€",
            "nonce": "n",
            "shards": [shard],
        })
    }

    /// A marker's rows must end within u64 (they wrapped past the tiling check) and its
    /// SHA-256 be 64 hex digits (it is copied into shards.txt); a plan that is no digest
    /// is shown cut by characters, never inside one (a byte cut panicked).
    #[test]
    fn hostile_marker_fields_are_refused_and_a_hostile_plan_is_shown_whole_characters() {
        let at = Path::new("m");
        let sha = "ab".repeat(32);
        let ok = Marker::from_json(&marker(json!([0, 0, 4, 7, sha])), at).unwrap();
        let m = ok.unwrap();
        assert_eq!((m.shards[0].rows, m.shards[0].sha256.len()), (4, 64));
        for shard in [
            json!([0, u64::MAX, 1, 7, sha]),
            json!([0, 0, 4, 7, "x y\nz"]),
            json!([0, 0, 4, 7, "g".repeat(64)]),
        ] {
            let e = Marker::from_json(&marker(shard.clone()), at).unwrap_err();
            assert!(
                e.to_string().contains("not a modelzip rank marker"),
                "{shard}: {e}"
            );
        }
        assert_eq!(super::super::commit::short_plan(&m.plan), "a€€€€€€€");
        assert_eq!(
            super::super::commit::short_plan(&"€".repeat(20)),
            "€".repeat(12)
        );
    }

    /// A FIFO where a sidecar goes is refused at once: opening it no longer waits for a
    /// writer (a waiting rank's timeout was never reached).
    #[cfg(unix)]
    #[test]
    fn a_fifo_in_a_sidecars_place_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.zip.sharded-t.rank-1");
        let made = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap();
        assert!(made.success());
        let e = super::read_json(&p).unwrap_err();
        assert!(e.to_string().contains("m.zip.sharded-t.rank-1"), "{e}");
    }
}
