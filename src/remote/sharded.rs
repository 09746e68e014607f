//! Sharded saves into an archive in an S3 bucket (docs/SHARDED.md, "Object stores").
//!
//! The ranks talk through small objects beside the archive object, as they do through
//! files beside a local archive:
//!
//! - `<key>.sharded-<tag>`: the group (JSON), created only if absent by rank 0 once it
//!   has read the archive's tail: plan digest, world size, the attempt's nonce, the
//!   archive's version, and until when the attempt may run.
//! - `<key>.sharded-<tag>.rank-<r>.<nonce>`: rank r's shards, back to back (a multipart
//!   upload in 16 MiB parts, sent while the rank hashes and copies its next shards).
//! - `<key>.sharded-<tag>.rank-<r>.<nonce>.done`: rank r's marker (JSON): its shards'
//!   places in that object, CRC-32 and SHA-256, and the object's version.
//!
//! Rank 0, once every marker of the attempt is there, composes the new version of the
//! archive object in one multipart upload: the old bytes up to the central directory
//! copied by the store, then each tensor's entry (its headers uploaded from here, its
//! data copied from the ranks' staging objects: `UploadPartCopy` of every range of
//! 5 MiB and more, shorter ones read back and uploaded merged into parts), then the
//! tag's tables and the central directory; committed only if the archive is still the
//! version read (`If-Match`; `If-None-Match: *` for a new archive). Then the group's
//! objects are deleted. The other ranks wait for the group object to go and then look
//! for the tag in the archive.

use super::append::{
    MAX_PART, MAX_PARTS, Part, Piece, RemoteAppender, RemoteWrite, S3_MIN_PART, Source,
    UPLOAD_PART, copy_plan, version_of, writable,
};
use super::{Client, RemoteOptions, remote_err};
use crate::archive::Archive;
use crate::archive::sharded::Extras;
use crate::archive::sharded::boxes;
use crate::archive::sharded::commit::{committed_by, plan_differs, short_plan, timed_out};
use crate::archive::sharded::compose::{Seg, lay_out, staged_len};
use crate::archive::sharded::group::{Marker, ShardDone, StagedObject, new_nonce};
use crate::archive::sharded::plan::Plan;
use crate::archive::sharded::{ShardedOptions, invalid};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::slice::SliceLayout;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use serde_json::{Value, json};
use std::io::{Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a waiting rank asks the store again.
const POLL: Duration = Duration::from_millis(100);

/// Parts of a rank's staging object in flight at once.
const STAGING_PARALLEL: usize = 4;

/// Largest marker or group object read.
const MAX_SIDECAR: u64 = 64 << 20;

/// One rank's part of a sharded save into an `s3://` archive.
pub(crate) struct RemoteRank {
    client: Client,
    rank: u32,
    world_size: u32,
    tag: String,
    nonce: String,
    /// The archive object's key.
    key: String,
    staging: Option<WriteMultipart>,
    staged_len: u64,
    /// Rank 0's: the archive as read (none: there was no object) and the group object
    /// it created.
    head: Option<Head>,
}

struct Head {
    base: Option<Archive>,
    e_tag: Option<String>,
}

impl RemoteRank {
    pub(crate) fn url(&self) -> &str {
        &self.client.url
    }

    /// Joins the save: rank 0 reads the archive's tail and creates the group object;
    /// the others wait for it (at most `opts.timeout`) and check its plan.
    pub(crate) fn open(url: &str, plan: &Plan, opts: &ShardedOptions) -> Result<RemoteRank> {
        let remote = RemoteOptions::default();
        let (client, _s3) = writable(url, &remote)?;
        let key = client.path.as_ref().to_string();
        let tag = plan.tag.to_ascii_lowercase();
        let mut rank = RemoteRank {
            client,
            rank: opts.rank,
            world_size: opts.world_size,
            tag,
            nonce: String::new(),
            key,
            staging: None,
            staged_len: 0,
            head: None,
        };
        if opts.rank == 0 {
            rank.start(url, plan, opts, &remote)?;
        } else {
            rank.nonce = rank.wait_for_group(plan, opts)?;
        }
        Ok(rank)
    }

    fn group_key(&self) -> String {
        format!("{}.sharded-{}", self.key, self.tag)
    }

    /// Rank `rank`'s marker of attempt `nonce` (the nonce in the key: a rank of a dead
    /// attempt that writes its marker late cannot replace this attempt's).
    fn marker_key(&self, rank: u32, nonce: &str) -> String {
        format!("{}.sharded-{}.rank-{rank}.{nonce}.done", self.key, self.tag)
    }

    fn staging_key(&self, rank: u32, nonce: &str) -> String {
        format!("{}.sharded-{}.rank-{rank}.{nonce}", self.key, self.tag)
    }

    /// The object at `key`: `None` when there is none.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = ObjectPath::from(key);
        let client = &self.client;
        client.block_on(async {
            let got = match client.store.get(&path).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(remote_err(&client.url, e)),
            };
            if got.meta.size > MAX_SIDECAR {
                return Err(invalid(format!(
                    "the object {key} is {} bytes, more than a sharded save writes there",
                    got.meta.size
                )));
            }
            super::exact_body(got)
                .await
                .map(Some)
                .map_err(|e| remote_err(&client.url, e))
        })
    }

    fn put(&self, key: &str, bytes: Vec<u8>, mode: PutMode) -> Result<()> {
        let path = ObjectPath::from(key);
        let client = &self.client;
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        client
            .block_on(client.store.put_opts(&path, PutPayload::from(bytes), opts))
            .map(|_| ())
            .map_err(|e| match e {
                object_store::Error::AlreadyExists { .. } => Error::new(ErrorKind::Locked),
                e => remote_err(&client.url, e),
            })
    }

    /// Deletes the objects at `keys` (best effort: one left over is named in SHARDED.md
    /// as found and deleted by the next save of the tag).
    fn delete(&self, keys: &[String]) {
        let client = &self.client;
        client.block_on(async {
            let deletes = keys.iter().map(|k| {
                let path = ObjectPath::from(k.as_str());
                async move {
                    let _ = client.store.delete(&path).await;
                }
            });
            futures_util::future::join_all(deletes).await;
        });
    }

    /// The objects of attempt `nonce`: every rank's marker and staging object, then the
    /// group object (last: while it exists, the attempt can be found).
    fn attempt_keys(&self, nonce: &str, world_size: u32) -> Vec<String> {
        let mut keys = Vec::with_capacity(2 * world_size as usize + 1);
        for r in 0..world_size {
            keys.push(self.marker_key(r, nonce));
            keys.push(self.staging_key(r, nonce));
        }
        keys
    }

    /// Rank 0: reads the archive's tail, refuses a tag that exists, clears a dead
    /// attempt's objects and creates the group object.
    fn start(
        &mut self,
        url: &str,
        plan: &Plan,
        opts: &ShardedOptions,
        remote: &RemoteOptions,
    ) -> Result<()> {
        let exists = match self
            .client
            .block_on(self.client.store.head(&self.client.path))
        {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => return Err(remote_err(url, e)),
        };
        let (base, e_tag) = if exists {
            let base = remote.open(url)?;
            let e_tag = version_of(&base, url)?;
            if let Some(t) = base.canonical_tag(&plan.tag) {
                return Err(ErrorKind::TagExists(t.to_string()).into());
            }
            (Some(base), Some(e_tag))
        } else {
            (None, None)
        };
        let group_key = self.group_key();
        if let Some(bytes) = self.get(&group_key)? {
            let g = Group::parse(&bytes, &group_key)?;
            if g.until > unix_now() {
                return Err(invalid(format!(
                    "a sharded save of tag {:?} into {url} is under way (its group object {group_key} is there until {}, unix time): wait for it, or delete the object if no save is running",
                    plan.tag, g.until
                )));
            }
            // A dead attempt (rank 0 killed): its objects go, its group object last.
            let mut keys = self.attempt_keys(&g.nonce, g.world_size);
            keys.push(group_key.clone());
            self.delete(&keys);
        }
        self.nonce = new_nonce();
        // Long enough for the ranks to write (timeout) and for rank 0 to wait for them
        // and compose (timeout again), with room for the store.
        let until = unix_now()
            .saturating_add(opts.timeout.as_secs().saturating_mul(2))
            .saturating_add(600);
        let g = Group {
            plan: plan.digest.clone(),
            world_size: plan.world_size,
            nonce: self.nonce.clone(),
            until,
        };
        match self.put(&group_key, g.to_bytes(), PutMode::Create) {
            Err(e) if matches!(e.kind(), ErrorKind::Locked) => {
                return Err(invalid(format!(
                    "another sharded save of tag {:?} into {url} started at the same moment (its group object {group_key} appeared): nothing was written",
                    plan.tag
                )));
            }
            r => r?,
        }
        self.head = Some(Head { base, e_tag });
        Ok(())
    }

    /// A rank other than 0: waits for the group object of a live attempt with the same
    /// plan; returns its nonce.
    fn wait_for_group(&self, plan: &Plan, opts: &ShardedOptions) -> Result<String> {
        let deadline = crate::archive::sharded::deadline(opts.timeout);
        let key = self.group_key();
        loop {
            if let Some(bytes) = self.get(&key)? {
                let g = Group::parse(&bytes, &key)?;
                if g.until > unix_now() {
                    if g.plan != plan.digest || g.world_size != plan.world_size {
                        return Err(plan_differs(opts.rank, g.world_size, &g.plan, plan));
                    }
                    return Ok(g.nonce);
                }
            }
            if Instant::now() >= deadline {
                return Err(invalid(format!(
                    "rank {}: rank 0 did not start the sharded save of tag {:?} within {:.0} s (it failed, or was not run; see its error)",
                    opts.rank,
                    plan.tag,
                    opts.timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Sends one shard's bytes (`data`; a box's in its row-major order, `layout` its
    /// place in the tensor's `total` data bytes) to this rank's staging object; returns
    /// their CRC-32 (a box's positioned, as locally), SHA-256 and place in the object.
    pub(crate) fn stage(
        &mut self,
        layout: Option<&SliceLayout>,
        data: &[u8],
        total: u64,
    ) -> Result<(u32, String, u64)> {
        let at = self.staged_len;
        let digest = || {
            let crc = match layout {
                None => crc32fast::hash(data),
                Some(l) => boxes::positioned_crc(l, data, total),
            };
            (crc, crate::sha256_hex(data))
        };
        if data.is_empty() {
            let (crc, sha) = digest();
            return Ok((crc, sha, at));
        }
        if self.staging.is_none() {
            let path = ObjectPath::from(self.staging_key(self.rank, &self.nonce));
            let client = &self.client;
            let upload = client
                .block_on(client.store.put_multipart(&path))
                .map_err(|e| remote_err(&client.url, e))?;
            self.staging = Some(WriteMultipart::new_with_chunk_size(
                upload,
                UPLOAD_PART as usize,
            ));
        }
        let client = &self.client;
        let Some(w) = self.staging.as_mut() else {
            return Err(invalid("the staging upload is gone".into()));
        };
        let (crc, sha) = std::thread::scope(|s| {
            let h = s.spawn(digest);
            // A part at a time, at most STAGING_PARALLEL in flight: a large shard is
            // never copied whole into parts waiting to be sent.
            let sent = (|| -> Result<()> {
                for piece in data.chunks(UPLOAD_PART as usize) {
                    client
                        .block_on(w.wait_for_capacity(STAGING_PARALLEL))
                        .map_err(|e| remote_err(&client.url, e))?;
                    // The parts are sent by tasks of the client's runtime.
                    let _in_runtime = client.rt.enter();
                    w.write(piece);
                }
                Ok(())
            })();
            let d = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            sent.map(|()| d)
        })?;
        self.staged_len += data.len() as u64;
        Ok((crc, sha, at))
    }

    /// Completes this rank's staging object and leaves its marker; then rank 0 waits for
    /// every marker and commits (returning how many tensors were stored by reference and
    /// what the commit cost), the others wait for the commit to land.
    pub(crate) fn finish(
        &mut self,
        plan: &Plan,
        opts: &ShardedOptions,
        shards: Vec<ShardDone>,
        extras: Extras,
    ) -> Result<(usize, Option<RemoteWrite>)> {
        let staged = match self.staging.take() {
            None => None,
            Some(w) => {
                let client = &self.client;
                let done = client
                    .block_on(w.finish())
                    .map_err(|e| remote_err(&client.url, e))?;
                let e_tag = done.e_tag.ok_or_else(|| {
                    Error::new(ErrorKind::Remote(format!(
                        "the store sent no ETag for the staging object of rank {}",
                        self.rank
                    )))
                })?;
                Some(StagedObject {
                    key: self.staging_key(self.rank, &self.nonce),
                    e_tag,
                    len: self.staged_len,
                })
            }
        };
        let marker = Marker {
            rank: self.rank,
            plan: plan.digest.clone(),
            nonce: self.nonce.clone(),
            shards,
            staged,
        };
        self.put(
            &self.marker_key(self.rank, &self.nonce),
            marker.to_bytes(),
            PutMode::Overwrite,
        )?;
        match self.head.take() {
            Some(head) => {
                let mut keys = self.attempt_keys(&self.nonce, self.world_size);
                keys.push(self.group_key());
                let done = self.commit(plan, opts, head, extras);
                self.delete(&keys);
                let (n, w) = done?;
                Ok((n, Some(w)))
            }
            None => {
                let done = self.wait_for_commit(plan, opts);
                if done.is_err() {
                    let keys = [
                        self.marker_key(self.rank, &self.nonce),
                        self.staging_key(self.rank, &self.nonce),
                    ];
                    self.delete(&keys);
                }
                done.map(|()| (0, None))
            }
        }
    }

    /// Rank 0: waits for every marker, lays the tag out and composes the new version.
    fn commit(
        &self,
        plan: &Plan,
        opts: &ShardedOptions,
        head: Head,
        extras: Extras,
    ) -> Result<(usize, RemoteWrite)> {
        let markers = self.wait_for_markers(plan, opts)?;
        let keep = head.base.as_ref().map_or(0, |b| b.listing().cd_offset);
        let mut staged = tempfile::tempfile()?;
        let read = |m: usize, range: std::ops::Range<u64>| -> Result<Vec<u8>> {
            let Some(o) = markers.get(m).and_then(|m| m.staged.as_ref()) else {
                return Err(invalid(format!("marker {m} has no staging object")));
            };
            self.read_staged(o, range)
        };
        let (segs, deduplicated) = lay_out(
            head.base,
            plan,
            &self.nonce,
            &extras,
            &markers,
            &opts.write,
            &staged,
            &read,
        )?;
        let on_disk = staged.metadata()?.len();
        if on_disk != staged_len(&segs) {
            return Err(Error::from(std::io::Error::other(format!(
                "the staged bytes are {on_disk}, {} expected",
                staged_len(&segs)
            ))));
        }
        staged.seek(SeekFrom::Start(0))?;
        let sources: Vec<Option<Arc<Source>>> = markers
            .iter()
            .map(|m| {
                m.staged.as_ref().map(|o| {
                    Arc::new(Source {
                        key: o.key.clone(),
                        e_tag: o.e_tag.clone(),
                    })
                })
            })
            .collect();
        let parts = pack(keep, &segs, &sources).map_err(|why| {
            Error::new(ErrorKind::InvalidInput(format!(
                "{why}; nothing was written"
            )))
        })?;
        let (client, s3) = writable(&self.client.url, &RemoteOptions::default())?;
        let app = RemoteAppender::for_parts(client, s3, staged, head.e_tag);
        let write = app.compose(parts)?;
        Ok((deduplicated, write))
    }

    /// Bytes `range` of staging object `o`, of the version its rank wrote.
    fn read_staged(&self, o: &StagedObject, range: std::ops::Range<u64>) -> Result<Vec<u8>> {
        let client = &self.client;
        let path = ObjectPath::from(o.key.as_str());
        let opts = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(range)),
            if_match: Some(o.e_tag.clone()),
            ..Default::default()
        };
        client.block_on(async {
            let got = client
                .store
                .get_opts(&path, opts)
                .await
                .map_err(|e| remote_err(&client.url, e))?;
            super::exact_body(got)
                .await
                .map_err(|e| remote_err(&client.url, e))
        })
    }

    /// Every rank's marker of this attempt, waiting at most the timeout.
    fn wait_for_markers(&self, plan: &Plan, opts: &ShardedOptions) -> Result<Vec<Marker>> {
        let deadline = crate::archive::sharded::deadline(opts.timeout);
        let mut got: Vec<Option<Marker>> = vec![None; plan.world_size as usize];
        loop {
            for (r, slot) in got.iter_mut().enumerate() {
                if slot.is_some() {
                    continue;
                }
                let key = self.marker_key(r as u32, &self.nonce);
                let Some(bytes) = self.get(&key)? else {
                    continue;
                };
                let Some(m) = Marker::parse(&bytes, std::path::Path::new(&key))? else {
                    continue;
                };
                if m.nonce != self.nonce {
                    continue; // an earlier attempt's
                }
                if m.plan != plan.digest {
                    return Err(invalid(format!(
                        "rank {r} wrote with another save plan ({}) than rank 0 ({}): the ranks were given different tensor descriptions; nothing was committed",
                        short_plan(&m.plan),
                        &plan.digest[..12]
                    )));
                }
                if m.rank != r as u32 || m.shards.iter().any(|s| s.staged_at.is_none()) {
                    return Err(invalid(format!(
                        "the marker {key} is not rank {r}'s marker of a save into an object store; nothing was committed"
                    )));
                }
                *slot = Some(m);
            }
            let missing: Vec<String> = got
                .iter()
                .enumerate()
                .filter(|(_, m)| m.is_none())
                .map(|(r, _)| r.to_string())
                .collect();
            if missing.is_empty() {
                return Ok(got.into_iter().flatten().collect());
            }
            if Instant::now() >= deadline {
                return Err(timed_out(plan, opts, &missing));
            }
            std::thread::sleep(POLL);
        }
    }

    /// A rank other than 0: waits for the group object to go, then for the archive to
    /// hold the tag of this attempt.
    fn wait_for_commit(&self, plan: &Plan, opts: &ShardedOptions) -> Result<()> {
        let deadline = crate::archive::sharded::deadline(opts.timeout);
        let key = self.group_key();
        loop {
            let ours = match self.get(&key)? {
                Some(bytes) => Group::parse(&bytes, &key)?.nonce == self.nonce,
                None => false,
            };
            if !ours {
                break;
            }
            if Instant::now() >= deadline {
                return Err(invalid(format!(
                    "rank {}: the sharded save of tag {:?} was not committed within {:.0} s (rank 0 is late, failed or died; see its error)",
                    opts.rank,
                    plan.tag,
                    opts.timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(POLL);
        }
        let archive = RemoteOptions::default().open(&self.client.url);
        match archive.and_then(|a| committed_by(&a, &plan.tag, &self.nonce)) {
            Ok(true) => Ok(()),
            _ => Err(invalid(format!(
                "rank {}: the sharded save of tag {:?} was not committed (rank 0 gave it up; see its error)",
                opts.rank, plan.tag
            ))),
        }
    }

    /// Dropped unfinished: the staging upload is aborted; rank 0 ends the attempt (the
    /// other ranks then see it gone and fail).
    pub(crate) fn abandon(&mut self) {
        if let Some(w) = self.staging.take() {
            let _ = self.client.block_on(w.abort());
        }
        if self.head.take().is_some() {
            let mut keys = self.attempt_keys(&self.nonce, self.world_size);
            keys.push(self.group_key());
            self.delete(&keys);
        }
    }
}

/// The group object of an attempt.
struct Group {
    plan: String,
    world_size: u32,
    nonce: String,
    /// Unix time after which the attempt is taken for dead.
    until: u64,
}

impl Group {
    fn to_bytes(&self) -> Vec<u8> {
        json!({
            "format": "modelzip-sharded-group-object 1",
            "plan": self.plan,
            "world_size": self.world_size,
            "nonce": self.nonce,
            "until": self.until,
        })
        .to_string()
        .into_bytes()
    }

    fn parse(bytes: &[u8], key: &str) -> Result<Group> {
        let bad = || {
            invalid(format!(
                "the object {key} is not a modelzip group object (delete it if no sharded save is running)"
            ))
        };
        let v: Value = serde_json::from_slice(bytes).map_err(|_| bad())?;
        if v.get("format").and_then(Value::as_str) != Some("modelzip-sharded-group-object 1") {
            return Err(bad());
        }
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        Ok(Group {
            plan: s("plan").ok_or_else(bad)?,
            // As a plan bounds it: the attempt's keys are listed per rank.
            world_size: n("world_size")
                .and_then(|w| u32::try_from(w).ok())
                .filter(|w| (1..=crate::archive::sharded::plan::MAX_WORLD_SIZE).contains(w))
                .ok_or_else(bad)?,
            nonce: s("nonce").ok_or_else(bad)?,
            until: n("until").ok_or_else(bad)?,
        })
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The parts of the new version: the first `keep` bytes of the archive (copied from
/// S3's part minimum on, else read and uploaded), then `segs` in order, ranges of the
/// staging objects `sources` (one per marker) copied where they can be a part of their
/// own (5 MiB and more; a shorter run of uploaded bytes before one is topped up from its
/// start), the rest uploaded in parts of about 16 MiB.
fn pack(
    keep: u64,
    segs: &[Seg],
    sources: &[Option<Arc<Source>>],
) -> std::result::Result<Vec<Part>, String> {
    let mut total = keep;
    for s in segs {
        total = total.saturating_add(match s {
            Seg::Staged(n) => *n,
            Seg::Shard { len, .. } => *len,
        });
    }
    let prefix = copy_plan(keep, total - keep)?;
    let mut parts: Vec<Part> = prefix.copies.into_iter().map(Part::Copy).collect();
    let mut pending = Pending::default();
    if prefix.reread > 0 {
        pending.push(Piece::Old(0..prefix.reread));
    }
    for seg in segs {
        match seg {
            Seg::Staged(n) => pending.push(Piece::Staged(*n)),
            &Seg::Shard { marker, at, len } => {
                let Some(src) = sources.get(marker).cloned().flatten() else {
                    return Err(format!("marker {marker} has no staging object"));
                };
                let mut r = at..at + len;
                if len >= S3_MIN_PART && pending.len > 0 && pending.len < S3_MIN_PART {
                    let need = S3_MIN_PART - pending.len;
                    if len - need >= S3_MIN_PART {
                        pending.push(Piece::From(src.clone(), r.start..r.start + need));
                        r.start += need;
                    }
                }
                let len = r.end - r.start;
                if len >= S3_MIN_PART && (pending.len == 0 || pending.len >= S3_MIN_PART) {
                    pending.flush(&mut parts);
                    let n = len.div_ceil(MAX_PART);
                    let each = len.div_ceil(n);
                    for i in 0..n {
                        let a = r.start + i * each;
                        parts.push(Part::CopyFrom(src.clone(), a..(a + each).min(r.end)));
                    }
                } else {
                    pending.push(Piece::From(src, r));
                }
            }
        }
        pending.bound(&mut parts);
    }
    pending.flush(&mut parts);
    if parts.len() as u64 > MAX_PARTS {
        return Err(format!(
            "the new version would take {} parts, over S3's {MAX_PARTS}",
            parts.len()
        ));
    }
    Ok(parts)
}

/// Uploaded bytes not yet cut into parts.
#[derive(Default)]
struct Pending {
    // A deque: `bound` takes pieces off the front (a column-sharded tensor makes one
    // small piece per row, tens of thousands a part).
    pieces: std::collections::VecDeque<Piece>,
    len: u64,
}

impl Pending {
    fn push(&mut self, p: Piece) {
        if p.len() > 0 {
            self.len += p.len();
            self.pieces.push_back(p);
        }
    }

    /// Cuts parts of [`UPLOAD_PART`] bytes off the front while what stays is still at
    /// least a part's minimum: so no part but the last is too short.
    fn bound(&mut self, parts: &mut Vec<Part>) {
        while self.len >= UPLOAD_PART + S3_MIN_PART {
            let mut part = Vec::new();
            let mut room = UPLOAD_PART;
            while room > 0 {
                let Some(p) = self.pieces.pop_front() else {
                    break;
                };
                if p.len() <= room {
                    room -= p.len();
                    part.push(p);
                } else {
                    let (head, rest) = p.split(room);
                    part.push(head);
                    self.pieces.push_front(rest);
                    room = 0;
                }
            }
            self.len -= UPLOAD_PART;
            parts.push(Part::Upload(part));
        }
    }

    /// Everything pending as one part.
    fn flush(&mut self, parts: &mut Vec<Part>) {
        if self.len > 0 {
            parts.push(Part::Upload(std::mem::take(&mut self.pieces).into()));
            self.len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A group object's world size is bounded as a plan's is: a dead attempt's keys are
    /// listed per rank, so a group object of 2^32 - 1 ranks is refused, not listed.
    #[test]
    fn a_group_object_of_too_many_ranks_is_refused() {
        let object = |w: u64| {
            serde_json::to_vec(&serde_json::json!({
                "format": "modelzip-sharded-group-object 1",
                "plan": "p", "world_size": w, "nonce": "n", "until": 1,
            }))
            .unwrap()
        };
        assert_eq!(Group::parse(&object(4), "k").unwrap().world_size, 4);
        for w in [0, u64::from(u32::MAX), 1 << 40] {
            let e = Group::parse(&object(w), "k").err().unwrap();
            assert!(
                e.to_string().contains("not a modelzip group object"),
                "{w}: {e}"
            );
        }
    }

    fn len(p: &Part) -> u64 {
        match p {
            Part::Copy(r) | Part::CopyFrom(_, r) => r.end - r.start,
            Part::Upload(ps) => ps.iter().map(Piece::len).sum(),
        }
    }

    /// Every part but the last within S3's limits, and the parts add up.
    fn check(parts: &[Part], total: u64) {
        let mut sum = 0;
        for (i, p) in parts.iter().enumerate() {
            let n = len(p);
            sum += n;
            if i + 1 < parts.len() {
                assert!(
                    (S3_MIN_PART..=MAX_PART).contains(&n),
                    "part {i}: {n}: {parts:?}"
                );
            }
        }
        assert_eq!(sum, total);
    }

    #[test]
    fn large_runs_are_copied_and_small_ones_uploaded_with_every_part_within_s3_limits() {
        let src = Some(Arc::new(Source {
            key: "k".into(),
            e_tag: "e".into(),
        }));
        let sources = vec![src.clone(), src];
        let cases: Vec<(u64, Vec<Seg>)> = vec![
            (0, vec![Seg::Staged(100)]),
            (
                20 * MIB,
                vec![
                    Seg::Staged(200),
                    Seg::Shard {
                        marker: 0,
                        at: 0,
                        len: 12 * MIB,
                    },
                    Seg::Shard {
                        marker: 1,
                        at: 0,
                        len: 100,
                    },
                    Seg::Staged(200),
                    Seg::Shard {
                        marker: 1,
                        at: 100,
                        len: 7 * MIB,
                    },
                    Seg::Staged(3 * MIB),
                ],
            ),
            (
                3 * MIB,
                (0..200)
                    .flat_map(|i| {
                        [
                            Seg::Staged(64),
                            Seg::Shard {
                                marker: i % 2,
                                at: i as u64 * MIB,
                                len: MIB / 2,
                            },
                        ]
                    })
                    .collect(),
            ),
        ];
        for (keep, segs) in cases {
            let total = keep
                + segs
                    .iter()
                    .map(|s| match s {
                        Seg::Staged(n) => *n,
                        Seg::Shard { len, .. } => *len,
                    })
                    .sum::<u64>();
            let parts = pack(keep, &segs, &sources).unwrap();
            check(&parts, total);
        }
        // The 12 MiB run after 200 staged bytes: topped up to a part, the rest copied.
        let segs = vec![
            Seg::Staged(200),
            Seg::Shard {
                marker: 0,
                at: 0,
                len: 12 * MIB,
            },
        ];
        let parts = pack(0, &segs, &sources).unwrap();
        assert!(
            matches!(parts.last(), Some(Part::CopyFrom(_, r)) if r.end == 12 * MIB),
            "{parts:?}"
        );
        assert_eq!(len(&parts[0]), S3_MIN_PART);
    }
}
