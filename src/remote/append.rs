//! Adding tags to an archive in an S3 bucket or an Azure container without downloading
//! or re-uploading it (the store's requests: `s3.rs`, `azure.rs`, behind `parts.rs`): the
//! new version of the object is composed by the store from the old one's bytes up to its
//! central directory (copied server-side) and the new tag's entries, tags.txt, summary
//! and central directory (uploaded from here), and committed only if the object is still
//! the version read. See docs/REMOTE.md, "Remote appends".

use super::parts::{PartsAccess, Settled};
use super::s3::{Failure, PartDone};
use super::{Client, RemoteOptions, remote_err};
use crate::archive::{TagBuilder, TagWriter, WriteOptions};
use crate::archive::{finish_detached, remote_session, removal_session};
use crate::error::{Error, ErrorKind, Result};
use object_store::{GetOptions, GetRange, ObjectStoreExt};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom};
use std::sync::Arc;

/// Smallest part of a multipart upload but the last (S3's limit).
pub const S3_MIN_PART: u64 = 5 << 20;

/// Largest part of a multipart upload, copied or uploaded (S3's limit).
pub(super) const MAX_PART: u64 = 5 << 30;

/// Most parts of one multipart upload (S3's limit).
pub(super) const MAX_PARTS: u64 = 10_000;

/// Size of an uploaded part (larger when the new bytes would need more parts than the
/// store allows).
pub(super) const UPLOAD_PART: u64 = 16 << 20;

/// Parts of a commit in flight at once (copies and uploads): a part's request need not
/// wait for the one before (at most this many uploaded parts' bytes, 16 MiB each, held).
const PARALLEL_PARTS: usize = 4;

/// Unfinished multipart uploads to the key older than this are aborted by the next
/// remote append to it (left by a writer that was killed).
pub const STALE_UPLOAD_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The most stale uploads one append aborts (one request each, before its commit): a
/// listing of millions is not a million requests; the next appends abort the rest.
const MAX_STALE_ABORTS: usize = 1000;

/// What a remote append did: the versions before and after, and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteWrite {
    /// The archive's URL.
    pub url: String,
    /// True when the object was created (there was none at the URL).
    pub created: bool,
    /// The version (ETag) the append started from; `None` when it created the object.
    pub previous_version: Option<String>,
    /// The version (ETag) committed, as the store reported it.
    pub version: Option<String>,
    /// Bytes sent to the store (the new entries, tables and central directory, and the
    /// old bytes re-uploaded when they were fewer than S3's 5 MiB part minimum).
    pub bytes_uploaded: u64,
    /// Bytes of the old object copied by the store (never sent or received here).
    pub bytes_copied: u64,
    /// Bytes of the old object read to be re-uploaded (its part before the central
    /// directory when that is shorter than S3's 5 MiB part minimum); the open's reads of the tail
    /// and manifests are not counted.
    pub bytes_reread: u64,
    /// Requests of the commit: create, copies, uploads, complete (the open's and the
    /// manifests' reads and the stale-upload listing are not counted).
    pub requests: u64,
    /// Unfinished multipart uploads left at the key by killed writers (older than
    /// 24 hours) that were aborted.
    pub stale_uploads_aborted: u64,
    /// A compaction's ([`compact`](super::compact)) local headers read (30 bytes and the
    /// entry's name each) to learn where an entry followed by a gap ends (the central
    /// directory does not say); 0 for every other write.
    pub headers_read: u64,
    /// A compaction's bytes left between moved runs of entries so that each run moves by
    /// a multiple of 64 bytes (stored tensors stay 64-byte aligned): under 64 per run (a
    /// local compaction re-pads each entry's local header instead and leaves none; here
    /// the headers are the store's copies, not rewritten); 0 for every other write.
    pub padding: u64,
}

/// How a new version is put together from the first `keep` bytes of the old object and
/// `staged` new bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// Ranges of the old object the store copies, one part each (none when `keep` is
    /// under [`S3_MIN_PART`]: a part but the last cannot be that small).
    pub(super) copies: Vec<std::ops::Range<u64>>,
    /// Old bytes read and uploaded ahead of the new ones instead (`keep`, or 0).
    pub(super) reread: u64,
    /// Size of every uploaded part but the last.
    upload_part: u64,
}

/// Largest object S3 stores.
pub(super) const MAX_OBJECT: u64 = 5 << 40;

pub(super) fn copy_plan(keep: u64, staged: u64) -> std::result::Result<Plan, String> {
    let total = keep.saturating_add(staged);
    if total > MAX_OBJECT {
        return Err(format!(
            "the new version would be {total} bytes, over S3's largest object ({MAX_OBJECT} bytes)"
        ));
    }
    let (copied, reread) = if keep >= S3_MIN_PART {
        (keep, 0)
    } else {
        (0, keep)
    };
    let n = copied.div_ceil(MAX_PART);
    let copies = match n {
        0 => Vec::new(),
        _ => {
            let each = copied.div_ceil(n);
            (0..n)
                .map(|i| i * each..((i + 1) * each).min(copied))
                .collect()
        }
    };
    // At most 1,024 copies (5 TiB in 5 GiB parts): the parts left are uploads.
    let uploaded = reread + staged;
    let upload_part = UPLOAD_PART.max(uploaded.div_ceil(MAX_PARTS - n));
    if upload_part > MAX_PART {
        return Err(format!(
            "{uploaded} new bytes need parts over S3's largest ({MAX_PART} bytes)"
        ));
    }
    Ok(Plan {
        copies,
        reread,
        upload_part,
    })
}

/// The client of `url` and its S3 access, or why the URL cannot be written.
pub(super) fn writable(url: &str, remote: &RemoteOptions) -> Result<(Client, PartsAccess)> {
    let client = Client::new(url, remote)?;
    let s3 = client.parts_access().map_err(|why| {
        Error::new(ErrorKind::InvalidInput(format!(
            "writing to {url} is not supported ({why}): remote writes need a store that copies ranges server-side and commits conditionally (s3:// and az:// URLs); for other stores write a local archive and upload it with `modelzip cp` (docs/REMOTE.md)"
        )))
    })?;
    Ok((client, s3))
}

/// Fails unless `url` can be written (an `s3://` or `az://` URL with the settings remote writes
/// carry): said before a command reads anything.
pub(crate) fn check_writable(url: &str, remote: &RemoteOptions) -> Result<()> {
    writable(url, remote).map(drop)
}

/// The version (ETag) of the remote archive `base` read, which a commit is conditional on.
pub(super) fn version_of(base: &crate::Archive, url: &str) -> Result<String> {
    base.remote_version().map(str::to_string).ok_or_else(|| {
        Error::new(ErrorKind::Remote(format!(
            "the store sent no ETag for {url}: a write is committed only if the object is still the version read, which needs one"
        )))
    })
}

/// The staged new bytes: an unnamed temporary file, and a buffered writer into it.
pub(super) fn staging() -> Result<(File, Box<dyn std::io::Write>)> {
    let staged = tempfile::tempfile().map_err(Error::from)?;
    let sink = staged.try_clone().map_err(Error::from)?;
    Ok((staged, Box::new(BufWriter::with_capacity(1 << 20, sink))))
}

/// Removes tags from the archive at an `s3://` or `az://` URL without downloading or re-uploading
/// it: the new version is the old object up to its central directory (copied by the
/// store), then the kept tags' rewritten tables, the files of removed tags that kept
/// tags use (re-homed: read and uploaded), and a new tags.txt, summary and central
/// directory. Committed only if the object is still the version read
/// ([`ErrorKind::RemoteConflict`] otherwise; nothing written). As a local
/// [`Removal::in_place`](crate::Removal::in_place) removal, the removed tags' bytes stay
/// in the object as dead bytes until a compaction; `removal`'s own `in_place` setting
/// does not apply. The report is a local removal's (`before` and `after` are the
/// object's sizes) with [`RemoveReport::remote`](crate::RemoveReport::remote), the
/// commit (`None` when the removal picked nothing: nothing was written).
pub fn remove_tags(
    url: &str,
    removal: crate::Removal<'_>,
    remote: &RemoteOptions,
    write: &WriteOptions,
) -> Result<crate::RemoveReport> {
    let (facts, done) = continue_remote(url, remote, |sink, base| {
        let before = base.len_bytes();
        let tags = base.tags().to_vec();
        Ok(
            match removal_session(sink, base, removal, write).map_err(|e| e.in_file(url))? {
                Some(r) => ((before, r.removed, r.kept, r.rehomed), Some(r.session)),
                None => ((before, Vec::new(), tags, 0), None),
            },
        )
    })?;
    let (before, removed, kept, rehomed) = facts;
    let after = done.as_ref().map_or(before, |(_, end)| *end);
    Ok(crate::RemoveReport {
        removed,
        kept,
        rehomed,
        before,
        after,
        remote: done.map(|(w, _)| w),
    })
}

/// Composes a new version of the archive at `url` (`s3://` or `az://`) that continues the version
/// read from its central directory, as a local in-place write does: `compose` is given
/// a sink whose first byte lands at that offset and the archive, and returns what it
/// found and the session it wrote (started with `Session::in_place`), or none when there
/// is nothing to write. The session is finished (tags.txt, summary, central directory)
/// and the new version committed only if the object is still the version read. Returns
/// what `compose` found, and the commit with the new object's length.
pub(crate) fn continue_remote<T>(
    url: &str,
    remote: &RemoteOptions,
    compose: impl FnOnce(
        Box<dyn std::io::Write>,
        &crate::Archive,
    ) -> Result<(T, Option<crate::archive::Session>)>,
) -> Result<(T, Option<(RemoteWrite, u64)>)> {
    let (client, s3) = writable(url, remote)?;
    let base = remote.open(url)?;
    let e_tag = version_of(&base, url)?;
    let keep = base.listing().cd_offset;
    let (staged, sink) = staging()?;
    let (found, session) = compose(sink, &base)?;
    let Some(session) = session else {
        return Ok((found, None));
    };
    let end = finish_detached(session, Some(base)).map_err(|e| e.in_file(url))?;
    let app = RemoteAppender {
        session: None,
        staged,
        client,
        s3,
        start: Start::Existing { e_tag, keep },
    };
    let done = app.commit_staged(end - keep)?;
    Ok((found, Some((done, end))))
}

/// What the append continues: an existing object (its version and where its central
/// directory starts, the bytes before which are kept), or none.
enum Start {
    Existing { e_tag: String, keep: u64 },
    New,
}

/// Adds tags to the archive at an `s3://` or `az://` URL (or creates it); [`RemoteAppender::finish`]
/// composes and commits the new version, dropping it unfinished writes nothing.
///
/// The new tags' entries are staged in an unnamed temporary file (space for the new tags,
/// not for the archive), then sent. Tensors equal to ones of the archive (by the SHA-256
/// its tags' sha256sums.txt record) are stored once, as locally.
///
/// ```no_run
/// use modelzip::remote::{RemoteAppender, RemoteOptions};
/// use modelzip::{TagBuilder, Tensor, WriteOptions};
///
/// let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0])?;
/// let mut app = RemoteAppender::open(
///     "s3://runs/model.zip",
///     &RemoteOptions::default(),
///     &WriteOptions::default(),
/// )?;
/// app.add_tag(TagBuilder::new("step-2").param("w", w))?;
/// let done = app.finish()?; // conditional on the version opened
/// println!("{} bytes uploaded, {} copied", done.bytes_uploaded, done.bytes_copied);
/// # Ok::<(), modelzip::Error>(())
/// ```
pub struct RemoteAppender {
    session: Option<crate::archive::Session>,
    staged: File,
    client: Client,
    s3: PartsAccess,
    start: Start,
}

impl std::fmt::Debug for RemoteAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAppender")
            .field("url", &self.client.url)
            .finish()
    }
}

impl RemoteAppender {
    /// Opens the archive at `url` (`s3://` or `az://`) for adding tags: reads its tail (end
    /// records, central directory, tags.txt, summary) and its tags' manifests, not its
    /// tensors. With no object at `url`, the tags go into a new archive, created only if
    /// none appears meanwhile.
    pub fn open(url: &str, remote: &RemoteOptions, write: &WriteOptions) -> Result<Self> {
        let (client, s3) = writable(url, remote)?;
        let exists = match client.block_on(client.store.head(&client.path)) {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => return Err(remote_err(url, e)),
        };
        let (base, start) = if exists {
            let base = remote.open(url)?;
            let e_tag = version_of(&base, url)?;
            let keep = base.listing().cd_offset;
            (Some(base), Start::Existing { e_tag, keep })
        } else {
            (None, Start::New)
        };
        let (staged, sink) = staging()?;
        let session = remote_session(sink, base, write).map_err(|e| e.in_file(url))?;
        Ok(RemoteAppender {
            session: Some(session),
            staged,
            client,
            s3,
            start,
        })
    }

    fn session(&mut self) -> Result<&mut crate::archive::Session> {
        self.session.as_mut().ok_or_else(|| {
            ErrorKind::InvalidInput("remote appender already finished".into()).into()
        })
    }

    /// Starts writing a new tag (its name must not exist yet, ignoring case).
    pub fn begin_tag(&mut self, name: &str) -> Result<TagWriter<'_>> {
        self.session()?.begin_tag(name)
    }

    /// Writes a whole tag held in memory.
    pub fn add_tag(&mut self, tag: TagBuilder) -> Result<()> {
        let w = self.session()?.begin_tag(tag.name())?;
        tag.write_to(w)
    }

    /// Writes the new tags.txt, summary and central directory, then composes the new
    /// version of the object and commits it only if the object is still the version
    /// opened (or, for a new archive, still absent). A lost race is
    /// [`ErrorKind::RemoteConflict`] ("the archive at URL changed since it was opened
    /// (version X, now Y); nothing was written"); on every failure the multipart upload is
    /// aborted and the object is as it was, but for a commit whose every attempt went
    /// unanswered, which the error reports as of unknown outcome (naming the object's
    /// version when opened and now).
    pub fn finish(mut self) -> Result<RemoteWrite> {
        let url = self.client.url.clone();
        let session = self.session.take().ok_or_else(|| {
            Error::new(ErrorKind::InvalidInput(
                "remote appender already finished".into(),
            ))
        })?;
        let keep = match &self.start {
            Start::Existing { keep, .. } => *keep,
            Start::New => 0,
        };
        let end = finish_detached(session, None).map_err(|e| e.in_file(&url))?;
        self.commit_staged(end - keep)
    }

    /// True when there was no object at the URL: finishing creates it.
    pub(crate) fn creates(&self) -> bool {
        matches!(self.start, Start::New)
    }

    /// Fails with the lost-race error ([`ErrorKind::RemoteConflict`]) unless the object
    /// was version `was` when this appender opened it (`None`: absent): a tag derived
    /// from what another open read goes onto that version or nowhere.
    pub(crate) fn check_opened(&self, was: Option<&str>) -> Result<()> {
        let opened = match &self.start {
            Start::Existing { e_tag, .. } => Some(e_tag.as_str()),
            Start::New => None,
        };
        if opened == was {
            return Ok(());
        }
        Err(changed(&self.client, was))
    }

    /// An appender that only commits: the new version of the object `client` names,
    /// conditional on version `e_tag`, composed from parts whose uploaded bytes come
    /// from `staged` (a compaction's).
    pub(super) fn for_version(
        client: Client,
        s3: PartsAccess,
        staged: File,
        e_tag: String,
    ) -> RemoteAppender {
        RemoteAppender {
            session: None,
            staged,
            client,
            s3,
            start: Start::Existing { e_tag, keep: 0 },
        }
    }

    /// An appender that only commits: the new version of the object `client` names,
    /// conditional on version `e_tag` (`None`: created, only if there is none), composed
    /// from parts whose uploaded bytes come from `staged` (a sharded save's).
    pub(super) fn for_parts(
        client: Client,
        s3: PartsAccess,
        staged: File,
        e_tag: Option<String>,
    ) -> RemoteAppender {
        let start = match e_tag {
            Some(e_tag) => Start::Existing { e_tag, keep: 0 },
            None => Start::New,
        };
        RemoteAppender {
            session: None,
            staged,
            client,
            s3,
            start,
        }
    }

    /// Checks that the staged file holds the `staged_len` new bytes, rewinds it, and
    /// commits.
    fn commit_staged(mut self, staged_len: u64) -> Result<RemoteWrite> {
        self.rewind_staged(staged_len)?;
        self.commit(staged_len)
    }

    /// Checks that the staged file holds the `staged_len` new bytes, rewinds it, and
    /// commits the version `parts` compose.
    pub(super) fn commit_parts(mut self, staged_len: u64, parts: Vec<Part>) -> Result<RemoteWrite> {
        self.rewind_staged(staged_len)?;
        self.compose(parts)
    }

    /// Checks that the staged file holds `staged_len` bytes and rewinds it.
    fn rewind_staged(&mut self, staged_len: u64) -> Result<()> {
        let url = &self.client.url;
        let on_disk = self
            .staged
            .metadata()
            .map_err(|e| Error::from(e).in_file(url))?
            .len();
        if on_disk != staged_len {
            return Err(Error::from(std::io::Error::other(format!(
                "the staged new bytes are {on_disk} bytes, {staged_len} expected"
            )))
            .in_file(url));
        }
        self.staged
            .seek(SeekFrom::Start(0))
            .map_err(|e| Error::from(e).in_file(url))?;
        Ok(())
    }

    /// Composes and commits the new version: the kept bytes (copied, or re-uploaded when
    /// too short for a part), then the staged bytes.
    fn commit(self, staged_len: u64) -> Result<RemoteWrite> {
        let url = self.client.url.clone();
        let keep = match &self.start {
            Start::Existing { keep, .. } => *keep,
            Start::New => 0,
        };
        let plan = copy_plan(keep, staged_len).map_err(|why| {
            Error::new(ErrorKind::InvalidInput(format!(
                "{why}; nothing was written"
            )))
            .in_file(&url)
        })?;
        let mut parts: Vec<Part> = plan.copies.into_iter().map(Part::Copy).collect();
        // Kept bytes too few to be a part of their own lead the uploaded bytes.
        let mut uploaded = Vec::new();
        if plan.reread > 0 {
            uploaded.push(Piece::Old(0..plan.reread));
        }
        uploaded.push(Piece::Staged(staged_len));
        parts.extend(uploads(uploaded, plan.upload_part));
        self.compose(parts)
    }

    /// Composes the new version from `parts` in order (each copied by the store or
    /// uploaded from here) and commits it only if the object is still the version opened
    /// (or, for a new archive, still absent); the staged file is read from its start. On
    /// every failure the upload is aborted.
    pub(super) fn compose(mut self, parts: Vec<Part>) -> Result<RemoteWrite> {
        let url = self.client.url.clone();
        let if_match = match &self.start {
            Start::Existing { e_tag, .. } => Some(e_tag.clone()),
            Start::New => None,
        };
        let mut report = RemoteWrite {
            url: url.clone(),
            created: if_match.is_none(),
            previous_version: if_match.clone(),
            version: None,
            bytes_uploaded: 0,
            bytes_copied: 0,
            bytes_reread: 0,
            requests: 0,
            stale_uploads_aborted: 0,
            headers_read: 0,
            padding: 0,
        };
        report.stale_uploads_aborted = self.abort_stale_uploads();
        let e_tag = if_match.clone().unwrap_or_default();
        let s3 = &self.s3;
        let staged = &mut self.staged;
        let client = &self.client;
        let mut cost = Cost::default();
        let outcome = client.block_on(async {
            let id = s3.create_upload().await.map_err(Failed::Store)?;
            if s3.create_is_request() {
                cost.requests += 1;
            }
            let sent = async {
                use futures_util::stream::{FuturesUnordered, StreamExt};
                type PartFuture<'f> = std::pin::Pin<
                    Box<dyn std::future::Future<Output = Result<PartDone, Failure>> + Send + 'f>,
                >;
                // Up to PARALLEL_PARTS parts in flight: each uploaded part's bytes are
                // read here in order (the staged file is read front to back) while the
                // earlier parts are still being sent or copied.
                let mut done: Vec<PartDone> = Vec::with_capacity(parts.len());
                let mut in_flight: FuturesUnordered<PartFuture<'_>> = FuturesUnordered::new();
                for (k, part) in parts.iter().enumerate() {
                    let n = k as u32 + 1;
                    while in_flight.len() >= PARALLEL_PARTS {
                        if let Some(d) = in_flight.next().await {
                            let d = d?;
                            cost.requests += d.extra_requests;
                            done.push(d);
                        }
                    }
                    match part {
                        Part::Copy(range) => {
                            in_flight.push(Box::pin(s3.copy_part(&id, n, range.clone(), &e_tag)));
                            cost.requests += 1;
                            cost.copied += range.end - range.start;
                        }
                        Part::CopyFrom(src, range) => {
                            in_flight.push(Box::pin(s3.copy_part_from(
                                &id,
                                n,
                                &src.key,
                                range.clone(),
                                &src.e_tag,
                            )));
                            cost.requests += 1;
                            cost.copied += range.end - range.start;
                        }
                        Part::Upload(pieces) => {
                            let buf = fill(client, &e_tag, staged, pieces, &mut cost).await?;
                            let len = buf.len() as u64;
                            in_flight.push(Box::pin(s3.upload_part(
                                &id,
                                n,
                                bytes::Bytes::from(buf),
                            )));
                            cost.requests += 1;
                            cost.uploaded += len;
                        }
                    }
                }
                while let Some(d) = in_flight.next().await {
                    let d = d?;
                    cost.requests += d.extra_requests;
                    done.push(d);
                }
                done.sort_by_key(|d| d.number);
                cost.requests += 1;
                let version = match s3.complete(&id, &done, if_match.as_deref()).await {
                    Ok(version) => version,
                    // Every answer an error: an attempt whose answer was lost may have
                    // committed. Ask the store what became of the upload.
                    Err(Failure::Other(m)) => {
                        match s3.settle(&id, &done, if_match.as_deref()).await {
                            Settled::Committed(version) => version,
                            Settled::NotCommitted => {
                                return Err(Failed::Store(Failure::Other(m)));
                            }
                            Settled::Unknown => return Err(Failed::Commit(m)),
                        }
                    }
                    Err(e) => return Err(Failed::Store(e)),
                };
                Ok::<_, Failed>(version)
            }
            .await;
            if sent.is_err() {
                // Best effort: a failed abort leaves an upload the next writer aborts.
                let _ = s3.abort(&id).await;
            }
            sent
        });
        match outcome {
            Ok(version) => {
                report.version = version;
                report.requests += cost.requests;
                report.bytes_copied = cost.copied;
                report.bytes_uploaded = cost.uploaded;
                report.bytes_reread = cost.reread;
                Ok(report)
            }
            Err(Failed::Local(e)) => Err(e),
            Err(Failed::Store(Failure::Precondition)) => Err(self.changed(&if_match)),
            Err(Failed::Store(Failure::Other(m))) => Err(Error::new(ErrorKind::Remote(format!(
                "{m}; nothing was written"
            )))
            .in_file(&url)),
            Err(Failed::Commit(m)) => {
                let now = self.current_version();
                let was = if_match.as_deref().unwrap_or("none");
                Err(Error::new(ErrorKind::Remote(format!(
                    "{m}; whether the new version was committed is not known (the object was version {was} when opened and is {now} now; `modelzip tags {url}` shows its tags)"
                )))
                .in_file(&url))
            }
        }
    }

    /// The object's version now (one HEAD): its ETag, "none" or "unknown".
    fn current_version(&self) -> String {
        current_version(&self.client)
    }

    /// The error of a lost race: the object is no longer the version opened.
    fn changed(&self, was: &Option<String>) -> Error {
        changed(&self.client, was.as_deref())
    }

    /// Aborts the key's unfinished uploads older than [`STALE_UPLOAD_AGE`], at most
    /// [`MAX_STALE_ABORTS`] of them; returns how many. Best effort: a store that refuses
    /// the listing is not an error here.
    fn abort_stale_uploads(&self) -> u64 {
        let s3 = &self.s3;
        let cutoff = std::time::SystemTime::now()
            .checked_sub(STALE_UPLOAD_AGE)
            .map(crate::archive::rfc3339)
            .unwrap_or_default();
        self.client.block_on(async {
            let Ok(uploads) = s3.list_uploads().await else {
                return 0;
            };
            // Both ISO 8601 UTC: compared as text to the second.
            let stale = |initiated: &str| {
                let when = initiated.get(..19).unwrap_or("");
                !when.is_empty() && when < cutoff.get(..19).unwrap_or("")
            };
            let mut n = 0;
            for (id, _) in uploads
                .into_iter()
                .filter(|(_, initiated)| stale(initiated))
                .take(MAX_STALE_ABORTS)
            {
                if s3.abort(&id).await.is_ok() {
                    n += 1;
                }
            }
            n
        })
    }
}

/// The object's version now (one HEAD): its ETag, "none" or "unknown".
fn current_version(client: &Client) -> String {
    match client.block_on(client.store.head(&client.path)) {
        Ok(m) => m.e_tag.unwrap_or_else(|| "unknown".into()),
        Err(object_store::Error::NotFound { .. }) => "none".into(),
        Err(_) => "unknown".into(),
    }
}

/// The error of a lost race: the object at `client`'s URL is no longer version `was`
/// (`None`: absent).
pub(super) fn changed(client: &Client, was: Option<&str>) -> Error {
    let url = &client.url;
    let now = current_version(client);
    let was = was.unwrap_or("none");
    Error::new(ErrorKind::RemoteConflict(format!(
        "the archive at {url} changed since it was opened (version {was}, now {now}); nothing was written"
    )))
}

/// A failure of the commit: on the local side (staged bytes unreadable) or the store's.
enum Failed {
    Local(Error),
    Store(Failure),
    /// The commit failed otherwise than by its condition (after retries).
    Commit(String),
}

impl From<Failure> for Failed {
    fn from(e: Failure) -> Failed {
        Failed::Store(e)
    }
}

/// One part of a new version: a byte range of the version opened, copied by the store,
/// or bytes uploaded from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Part {
    Copy(std::ops::Range<u64>),
    /// A byte range of another object of the bucket (its key, its version), copied.
    CopyFrom(Arc<Source>, std::ops::Range<u64>),
    Upload(Vec<Piece>),
}

/// Another object of the archive's bucket whose bytes go into the new version: its key
/// and the version (ETag) read or copied (never another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Source {
    pub(super) key: String,
    pub(super) e_tag: String,
}

/// Where the bytes of an uploaded part come from, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    /// A byte range of the version opened, read (one ranged GET, conditional on it).
    Old(std::ops::Range<u64>),
    /// Zero bytes (padding).
    Zeros(u64),
    /// The next bytes of the staged file.
    Staged(u64),
    /// A byte range of another object, read (ranges of one object that touch are read
    /// with one GET per part).
    From(Arc<Source>, std::ops::Range<u64>),
}

impl Piece {
    pub(super) fn len(&self) -> u64 {
        match self {
            Piece::Old(r) | Piece::From(_, r) => r.end - r.start,
            Piece::Zeros(n) | Piece::Staged(n) => *n,
        }
    }

    /// The first `n` bytes (`n` < len) and the rest.
    pub(super) fn split(self, n: u64) -> (Piece, Piece) {
        match self {
            Piece::Old(r) => (
                Piece::Old(r.start..r.start + n),
                Piece::Old(r.start + n..r.end),
            ),
            Piece::From(o, r) => (
                Piece::From(o.clone(), r.start..r.start + n),
                Piece::From(o, r.start + n..r.end),
            ),
            Piece::Zeros(m) => (Piece::Zeros(n), Piece::Zeros(m - n)),
            Piece::Staged(m) => (Piece::Staged(n), Piece::Staged(m - n)),
        }
    }
}

/// `pieces` cut into uploaded parts of the `sizes` given in turn (the last part takes
/// what is left when the sizes run out; empty pieces are dropped). At least one part.
pub(super) fn split_parts(pieces: Vec<Piece>, mut sizes: impl Iterator<Item = u64>) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut room = sizes.next().unwrap_or(u64::MAX);
    for mut piece in pieces.into_iter().filter(|p| p.len() > 0) {
        while piece.len() > room {
            let (head, rest) = piece.split(room);
            if head.len() > 0 {
                current.push(head);
            }
            parts.push(Part::Upload(std::mem::take(&mut current)));
            room = sizes.next().unwrap_or(u64::MAX);
            piece = rest;
        }
        room -= piece.len();
        current.push(piece);
        if room == 0 {
            parts.push(Part::Upload(std::mem::take(&mut current)));
            room = sizes.next().unwrap_or(u64::MAX);
        }
    }
    if !current.is_empty() || parts.is_empty() {
        parts.push(Part::Upload(current));
    }
    parts
}

/// `pieces` as the last parts of an upload: `part` bytes each, the last what is left.
pub(super) fn uploads(pieces: Vec<Piece>, part: u64) -> Vec<Part> {
    split_parts(pieces, std::iter::repeat(part))
}

/// What the parts of a commit cost so far.
#[derive(Default)]
struct Cost {
    requests: u64,
    uploaded: u64,
    copied: u64,
    reread: u64,
}

/// The bytes of an uploaded part: old ranges read (at once, each conditional on the
/// version `e_tag`), zeros, staged bytes.
async fn fill(
    client: &Client,
    e_tag: &str,
    staged: &mut File,
    pieces: &[Piece],
    cost: &mut Cost,
) -> std::result::Result<Vec<u8>, Failed> {
    let reads = pieces.iter().filter_map(|p| match p {
        Piece::Old(r) => Some(read_old(client, r.clone(), e_tag)),
        _ => None,
    });
    // Ranges of other objects: those of one object that touch are read at once (the
    // runs of one rank's block, row after row, are back to back in its staging object).
    let mut spans: Vec<(Arc<Source>, std::ops::Range<u64>)> = Vec::new();
    let mut wanted: Vec<(&Arc<Source>, &std::ops::Range<u64>)> = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::From(o, r) => Some((o, r)),
            _ => None,
        })
        .collect();
    wanted.sort_by(|a, b| (&a.0.key, a.1.start).cmp(&(&b.0.key, b.1.start)));
    for (o, r) in wanted {
        match spans.last_mut() {
            Some((so, sr)) if so.key == o.key && sr.end >= r.start => sr.end = sr.end.max(r.end),
            _ => spans.push((o.clone(), r.clone())),
        }
    }
    let fetches = spans.iter().map(|(o, r)| read_object(client, o, r.clone()));
    let (old, fetched) = futures_util::future::try_join(
        futures_util::future::try_join_all(reads),
        futures_util::future::try_join_all(fetches),
    )
    .await?;
    let mut old = old.into_iter();
    let total: u64 = pieces.iter().map(Piece::len).sum();
    let mut buf = Vec::with_capacity(total as usize);
    for piece in pieces {
        match piece {
            Piece::Old(r) => {
                cost.requests += 1;
                cost.reread += r.end - r.start;
                buf.extend_from_slice(&old.next().unwrap_or_default());
            }
            Piece::From(o, r) => {
                let span = spans
                    .iter()
                    .position(|(so, sr)| so.key == o.key && sr.start <= r.start && r.end <= sr.end);
                let Some(i) = span else {
                    return Err(Failed::Local(
                        Error::from(std::io::Error::other("a piece outside the ranges read"))
                            .in_file(&client.url),
                    ));
                };
                let at = (r.start - spans[i].1.start) as usize;
                let bytes = fetched[i].get(at..at + (r.end - r.start) as usize);
                buf.extend_from_slice(bytes.unwrap_or_default());
            }
            Piece::Zeros(n) => buf.resize(buf.len() + *n as usize, 0),
            Piece::Staged(n) => {
                let have = buf.len();
                buf.resize(have + *n as usize, 0);
                staged
                    .read_exact(&mut buf[have..])
                    .map_err(|e| Failed::Local(Error::from(e).in_file(&client.url)))?;
            }
        }
    }
    cost.requests += spans.len() as u64;
    cost.reread += spans.iter().map(|(_, r)| r.end - r.start).sum::<u64>();
    if buf.len() as u64 != total {
        return Err(Failed::Local(
            Error::from(std::io::Error::other(format!(
                "an uploaded part holds {} bytes, {total} expected",
                buf.len()
            )))
            .in_file(&client.url),
        ));
    }
    Ok(buf)
}

/// The bytes `range` of object `o` of the archive's bucket, of its version `o.e_tag`.
async fn read_object(
    client: &Client,
    o: &Source,
    range: std::ops::Range<u64>,
) -> std::result::Result<Vec<u8>, Failed> {
    let path = object_store::path::Path::from(o.key.as_str());
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        if_match: Some(o.e_tag.clone()),
        ..Default::default()
    };
    let got =
        client.store.get_opts(&path, opts).await.map_err(|e| {
            Failed::Local(remote_err(&format!("{} (object {})", client.url, o.key), e))
        })?;
    let bytes = super::exact_body(got)
        .await
        .map_err(|e| Failed::Local(remote_err(&client.url, e)))?;
    if bytes.len() as u64 != range.end - range.start {
        return Err(Failed::Local(
            Error::from(std::io::Error::other(format!(
                "object {} answered {} bytes for bytes {}..{}",
                o.key,
                bytes.len(),
                range.start,
                range.end
            )))
            .in_file(&client.url),
        ));
    }
    Ok(bytes)
}

/// The bytes `range` of version `e_tag` (a lost race when the object is another version
/// or gone).
async fn read_old(
    client: &Client,
    range: std::ops::Range<u64>,
    e_tag: &str,
) -> std::result::Result<Vec<u8>, Failed> {
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range)),
        if_match: Some(e_tag.to_string()),
        ..Default::default()
    };
    let got = match client.store.get_opts(&client.path, opts).await {
        Ok(got) => got,
        Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => {
            return Err(Failed::Store(Failure::Precondition));
        }
        Err(e) => return Err(Failed::Local(remote_err(&client.url, e))),
    };
    if got.meta.e_tag.as_deref() != Some(e_tag) {
        return Err(Failed::Store(Failure::Precondition));
    }
    super::exact_body(got)
        .await
        .map_err(|e| Failed::Local(remote_err(&client.url, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// The copies cover the kept bytes in order, every one between S3's part limits.
    fn check_copies(p: &Plan, keep: u64) {
        let mut at = 0;
        for r in &p.copies {
            assert_eq!(r.start, at);
            let len = r.end - r.start;
            assert!((S3_MIN_PART..=MAX_PART).contains(&len), "{r:?}");
            at = r.end;
        }
        assert_eq!(at, keep);
    }

    #[test]
    fn kept_bytes_are_copied_from_the_part_minimum_on_and_reread_below_it() {
        let p = copy_plan(0, 100).unwrap();
        assert_eq!(
            (p.copies.len(), p.reread, p.upload_part),
            (0, 0, UPLOAD_PART)
        );
        let p = copy_plan(S3_MIN_PART - 1, 10).unwrap();
        assert_eq!((p.copies.len(), p.reread), (0, S3_MIN_PART - 1));
        let p = copy_plan(S3_MIN_PART, 10).unwrap();
        assert_eq!(p.reread, 0);
        assert_eq!(p.copies.len(), 1);
        assert_eq!(p.copies[0], 0..S3_MIN_PART);
        assert_eq!(p.upload_part, UPLOAD_PART);
    }

    #[test]
    fn urls_other_than_s3_are_refused_before_any_request() {
        use crate::archive::AppendMode;
        let tag = || TagBuilder::new("t");
        let opts = WriteOptions::default();
        for url in [
            "gs://bucket/m.zip",
            "http://127.0.0.1:9/m.zip",
            "file:///tmp/m.zip",
        ] {
            let e = crate::append_tag(url, tag(), AppendMode::InPlace, &opts).unwrap_err();
            let said = e.to_string();
            assert!(
                said.contains("is not supported") && said.contains("s3://"),
                "{said}"
            );
        }
        // An Appender appends remotely to s3:// only: other URLs are refused the same way.
        let e = crate::Appender::open("gs://bucket/m.zip", AppendMode::InPlace).unwrap_err();
        assert!(e.to_string().contains("is not supported"), "{e}");
    }

    #[test]
    fn large_prefixes_take_one_copy_per_5_gib() {
        for keep in [5 * GIB, 5 * GIB + 1, 12 * GIB + 7, (5 << 40) - 10 * MIB] {
            let p = copy_plan(keep, 10 * MIB).unwrap_or_else(|e| panic!("{keep}: {e}"));
            check_copies(&p, keep);
            assert_eq!(p.copies.len() as u64, keep.div_ceil(MAX_PART));
        }
    }

    #[test]
    fn many_new_bytes_grow_the_parts_to_stay_within_10000() {
        let p = copy_plan(GIB, 200 * GIB).unwrap();
        assert!(p.upload_part > UPLOAD_PART);
        let uploads = (200 * GIB).div_ceil(p.upload_part);
        assert!(uploads + p.copies.len() as u64 <= MAX_PARTS);
        let p = copy_plan(10 * MIB, 160 * MIB).unwrap();
        assert_eq!(p.upload_part, UPLOAD_PART);
        assert!(copy_plan(0, (5 << 40) + 1).is_err());
        assert!(copy_plan(5 << 40, 1).is_err());
    }
}
