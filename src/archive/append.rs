//! Adding tags to an existing archive, in place (with a rollback journal) or by rewriting.

use super::archive_path::ArchivePath;
use super::durable::TempTarget;
use super::journal;
use super::lock::WriteLock;
use super::reader::{Archive, OpenOptions};
use super::session::{Session, WriteOptions};
use super::summary::written_by_commit;
use super::writeback::EarlyWriteback;
use super::writer::{TagBuilder, TagWriter};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom};
use std::path::Path;

/// How a tag is added to an existing archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AppendMode {
    /// Write the new entries over the old central directory (saved in a journal first);
    /// the old tags.txt and summary stay behind as dead bytes until a compaction.
    #[default]
    InPlace,
    /// Copy the archive to a temp file with the new tag and rename it over the original.
    Rewrite,
}

enum Target {
    InPlace { file: File },
    Rewrite { temp: TempTarget },
}

/// Adds tags to an existing archive; [`Appender::finish`] makes them visible, dropping it
/// unfinished leaves the archive as it was.
///
/// # Examples
///
/// ```
/// use modelzip::{AppendMode, Appender, ArchiveWriter, TagBuilder, Tensor};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.zip");
/// let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0])?;
/// let mut writer = ArchiveWriter::create(&path)?;
/// writer.add_tag(TagBuilder::new("step-1").param("w", w.clone()))?;
/// writer.finish()?;
///
/// let mut app = Appender::open(&path, AppendMode::InPlace)?; // journaled
/// let mut tag = app.begin_tag("step-2")?;
/// tag.param("w", &w.view())?;
/// tag.finish()?;
/// app.finish()?; // the new tag becomes visible here
/// assert_eq!(modelzip::Archive::open(&path)?.tags(), &["step-1", "step-2"]);
/// # Ok::<(), modelzip::Error>(())
/// ```
pub struct Appender {
    inner: Inner,
}

enum Inner {
    Local(Box<LocalAppender>),
    #[cfg(feature = "remote")]
    Remote(Box<crate::remote::RemoteAppender>),
}

/// An append to a local file, under its write lock.
struct LocalAppender {
    session: Option<Session>,
    target: Option<Target>,
    path: ArchivePath,
    _lock: WriteLock,
}

impl std::fmt::Debug for Appender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Local(l) => f
                .debug_struct("Appender")
                .field("path", &l.path.shown)
                .field("resolved", &l.path.real)
                .finish(),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => f.debug_struct("Appender").field("remote", r).finish(),
        }
    }
}

/// How long a writer waits for the ranks of a dead sharded save to stop writing before it
/// rolls that save back.
const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Takes the lock, rolls back any unfinished append and opens the archive (`path`
/// resolved through symlinks: the lock, journal and temp files are the real file's).
pub(crate) fn open_locked(path: &ArchivePath, opts: &WriteOptions) -> Result<(WriteLock, Archive)> {
    let real = path.real.as_path();
    let lock = WriteLock::acquire_resolved(real, opts.wait_for_lock)?;
    super::durable::remove_stale_temps(real);
    journal::recover(real)?;
    super::sharded::recover_staged(real, RECOVERY_WAIT)?;
    let base = Archive::open_unrecovered(real, &path.shown, OpenOptions::default())?;
    Ok((lock, base))
}

/// Starts an in-place session on `base` (the archive at `path`, opened under its write
/// lock): saves the journal, then positions a writer at the old central directory. The
/// new central directory lists the old entries `keep` accepts, then whatever the session
/// writes. Its caller must drop `base` before finishing (the file may shrink).
pub(crate) fn in_place_session(
    path: &Path,
    base: &Archive,
    opts: &WriteOptions,
    keep: impl Fn(&super::container::ZipEntry) -> bool,
) -> Result<(Session, File)> {
    // Every local header checked before the journal is written: a refusal leaves nothing.
    base.directory()?;
    let original_len = base.len_bytes();
    let cd_offset = base.listing().cd_offset;
    let saved = base.bytes().get(cd_offset as usize..).unwrap_or_default();
    if let Err(e) = journal::write(path, original_len, cd_offset, saved) {
        // The archive is untouched; a torn journal would be discarded anyway.
        let _ = journal::remove(path);
        return Err(e);
    }
    let opened = (|| -> std::io::Result<(File, File)> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let mut w = file.try_clone()?;
        w.seek(SeekFrom::Start(cd_offset))?;
        Ok((file, w))
    })();
    let (file, w) = match opened {
        Ok(fw) => fw,
        Err(e) => {
            let _ = journal::remove(path);
            return Err(Error::from(e).in_file(path));
        }
    };
    let sink = BufWriter::with_capacity(1 << 20, EarlyWriteback::new(w, cd_offset, opts.fsync));
    let s = Session::in_place(Box::new(sink), base, opts.clone(), keep)?;
    Ok((s, file))
}

/// Writes tags.txt, the summary and the central directory of a session started from
/// `base` (or from the base it adopted), then unmaps the base. Returns the new length.
pub(crate) fn finish_session(mut session: Session, base: Option<Archive>) -> Result<u64> {
    let adopted = session.take_base();
    let base = base.or(adopted);
    // An in-place session overwrites only the old central directory: the summary may
    // still read the base's entries.
    let finished = session.finish(base.as_ref());
    // Unmapped before the file's length changes.
    drop(base);
    let (sink, end) = finished?;
    drop(sink);
    Ok(end)
}

/// A session whose bytes go to `sink` rather than into a file of its own (a remote
/// append stages them, then composes the new object): continuing `base` from its central
/// directory as an in-place append does (the new directory lists `base`'s entries but its
/// tags.txt and summary, then what the session writes; `sink`'s first byte lands at
/// `base`'s central directory offset, the bytes before it are `base`'s), or a new archive
/// from offset 0. A base read by ranges is deduplicated against through its manifests.
#[cfg(feature = "remote")]
pub(crate) fn remote_session(
    sink: Box<dyn std::io::Write>,
    base: Option<Archive>,
    opts: &WriteOptions,
) -> Result<Session> {
    match base {
        None => Ok(Session::new(sink, 0, opts.clone())),
        Some(base) => {
            let mut s =
                Session::in_place(sink, &base, opts.clone(), |e| !written_by_commit(&e.name))?;
            if base.is_remote() {
                s.adopt_remote_base(base)?;
            } else {
                s.adopt_base(base);
            }
            Ok(s)
        }
    }
}

/// Finishes a session of [`remote_session`]: writes tags.txt, the summary and the
/// central directory, flushes its sink and returns the offset after its last byte.
#[cfg(feature = "remote")]
pub(crate) fn finish_detached(session: Session, base: Option<Archive>) -> Result<u64> {
    let end = finish_session(session, base)?;
    Ok(end)
}

/// Finishes an in-place session on `base` (or the base it adopted): writes tags.txt, the
/// summary and the central directory, cuts the file to its new end, fsyncs, and removes
/// the journal (rolling back on failure). Returns the new file length.
pub(crate) fn finish_in_place(
    path: &Path,
    session: Session,
    file: File,
    base: Option<Archive>,
) -> Result<u64> {
    let fsync = session.opts.fsync;
    let end = match finish_session(session, base) {
        Ok(end) => end,
        Err(e) => {
            abandon_in_place(path, file);
            return Err(e);
        }
    };
    let done = file
        .set_len(end)
        .and_then(|()| if fsync { file.sync_all() } else { Ok(()) });
    if let Err(e) = done {
        abandon_in_place(path, file);
        return Err(e.into());
    }
    drop(file);
    journal::remove(path)?;
    Ok(end)
}

/// Rolls back an in-place session whose writer is gone (best effort: if this fails the
/// journal stays, and the next open rolls back).
pub(crate) fn abandon_in_place(path: &Path, file: File) {
    drop(file);
    let _ = journal::recover(path);
}

/// Finishes a rewrite session from `base` (or the base it adopted): writes tags.txt, the
/// summary and the central directory, then fsyncs the temp file and renames it over the
/// archive. Returns the new file length.
pub(crate) fn finish_rewrite(
    session: Session,
    temp: TempTarget,
    base: Option<Archive>,
) -> Result<u64> {
    let fsync = session.opts.fsync;
    let end = finish_session(session, base)?;
    temp.commit(fsync)?;
    Ok(end)
}

impl Appender {
    /// Opens the archive at `path` for appending with default options.
    pub fn open(path: impl AsRef<Path>, mode: AppendMode) -> Result<Appender> {
        Self::open_with(path, mode, &WriteOptions::default())
    }

    /// Opens the archive at `path` for appending. A symlinked `path` appends to the file
    /// it points at (a rewrite replaces that file; the link stays). With the `remote`
    /// feature, `path` may be an `s3://` or `az://` URL: the tags are appended remotely whatever
    /// `mode` (only their bytes uploaded, the old ones copied by the store, committed only
    /// if the object is still the version opened; as
    /// [`RemoteAppender`](crate::remote::RemoteAppender), whose `finish` also reports
    /// what the commit cost; docs/REMOTE.md). Other URLs are refused.
    pub fn open_with(
        path: impl AsRef<Path>,
        mode: AppendMode,
        opts: &WriteOptions,
    ) -> Result<Appender> {
        if let Some(url) = url_of(path.as_ref()) {
            #[cfg(feature = "remote")]
            {
                let remote = crate::remote::RemoteOptions::default();
                let r = crate::remote::RemoteAppender::open(url, &remote, opts)?;
                return Ok(Appender {
                    inner: Inner::Remote(Box::new(r)),
                });
            }
            // Without this, "s3://b/k" would be taken for the local path "s3:/b/k".
            #[allow(unreachable_code)]
            return Err(Error::new(crate::ErrorKind::InvalidInput(format!(
                "{url} is a URL: this build of modelzip writes local files only (the `remote` feature is off)"
            ))));
        }
        let ap = ArchivePath::resolve(path.as_ref())?;
        Self::open_resolved(&ap, mode, opts).map_err(|e| ap.located(e))
    }

    fn open_resolved(ap: &ArchivePath, mode: AppendMode, opts: &WriteOptions) -> Result<Appender> {
        let path = ap.real.as_path();
        let (lock, base) = open_locked(ap, opts)?;
        let (session, target) = match mode {
            AppendMode::Rewrite => {
                let temp = TempTarget::create(path)?;
                let mut s = Session::new(Box::new(temp.writer(opts.fsync)?), 0, opts.clone());
                s.copy_archive(
                    &base,
                    |e| written_by_commit(&e.name),
                    &HashMap::new(),
                    &mut || {},
                )?;
                s.adopt_base(base);
                (s, Target::Rewrite { temp })
            }
            AppendMode::InPlace => {
                let (mut s, file) =
                    in_place_session(path, &base, opts, |e| !written_by_commit(&e.name))?;
                s.adopt_base(base);
                (s, Target::InPlace { file })
            }
        };
        Ok(Appender {
            inner: Inner::Local(Box::new(LocalAppender {
                session: Some(session),
                target: Some(target),
                path: ap.clone(),
                _lock: lock,
            })),
        })
    }

    /// Starts writing a new tag (its name must not exist yet, ignoring case).
    pub fn begin_tag(&mut self, name: &str) -> Result<TagWriter<'_>> {
        match &mut self.inner {
            Inner::Local(l) => l.session()?.begin_tag(name),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.begin_tag(name),
        }
    }

    /// Writes a whole tag held in memory.
    pub fn add_tag(&mut self, tag: TagBuilder) -> Result<()> {
        let w = self.begin_tag(tag.name())?;
        tag.write_to(w)
    }

    /// Writes the new tags.txt and central directory and makes the append durable (of an
    /// `s3://` archive: composes and commits the new version of the object).
    pub fn finish(self) -> Result<()> {
        match self.inner {
            Inner::Local(mut l) => {
                let path = l.path.clone();
                l.finish_inner().map_err(|e| path.located(e))
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.finish().map(drop),
        }
    }
}

impl LocalAppender {
    fn session(&mut self) -> Result<&mut Session> {
        self.session.as_mut().ok_or_else(|| {
            crate::ErrorKind::InvalidInput("appender already finished".into()).into()
        })
    }

    fn finish_inner(&mut self) -> Result<()> {
        let (Some(session), Some(target)) = (self.session.take(), self.target.take()) else {
            return Ok(());
        };
        match target {
            Target::Rewrite { temp } => finish_rewrite(session, temp, None).map(drop),
            Target::InPlace { file } => {
                finish_in_place(&self.path.real, session, file, None).map(drop)
            }
        }
    }
}

impl Drop for LocalAppender {
    fn drop(&mut self) {
        drop(self.session.take());
        if let Some(Target::InPlace { file }) = self.target.take() {
            drop(file);
            // Best effort: if this fails the journal stays and the next open rolls back.
            let _ = journal::recover(&self.path.real);
        }
    }
}

/// Adds `tag` to the archive at `path`. With the `remote` feature, `path` may be an
/// `s3://` or `az://` URL (a remote append, whatever `mode`: see
/// [`RemoteAppender`](crate::remote::RemoteAppender) and docs/REMOTE.md); other URLs are
/// refused.
///
/// # Examples
///
/// ```
/// use modelzip::{AppendMode, ArchiveWriter, TagBuilder, Tensor, WriteOptions};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.zip");
/// let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0])?;
/// let mut writer = ArchiveWriter::create(&path)?;
/// writer.add_tag(TagBuilder::new("fp32").param("w", w.clone()))?;
/// writer.finish()?;
/// let next = TagBuilder::new("fp32-ft").param("w", w);
/// modelzip::append_tag(&path, next, AppendMode::InPlace, &WriteOptions::default())?;
/// let archive = modelzip::Archive::open(&path)?;
/// assert!(archive.latest()?.params()[0].location.shared); // stored once
/// # Ok::<(), modelzip::Error>(())
/// ```
pub fn append_tag(
    path: impl AsRef<Path>,
    tag: TagBuilder,
    mode: AppendMode,
    opts: &WriteOptions,
) -> Result<()> {
    let mut a = Appender::open_with(path, mode, opts)?;
    a.add_tag(tag)?;
    a.finish()
}

/// `path` as a URL (`s3://`, `gs://`, `http(s)://`, ...), if it is one (the one list of
/// schemes; `remote::is_url` asks here).
pub(crate) fn url_of(path: &Path) -> Option<&str> {
    const SCHEMES: [&str; 11] = [
        "s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https", "file",
    ];
    path.to_str().filter(|s| {
        s.split_once("://")
            .is_some_and(|(scheme, _)| SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
    })
}
