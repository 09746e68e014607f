//! A checkpointer whose archive is an `s3://` or `az://` URL: each save is a remote append
//! ([`RemoteAppender`]), each retention pass a remote removal
//! ([`remote::remove_tags`](crate::remote::remove_tags)); a save or removal that loses a
//! race with another writer (the object changed since it was opened) re-opens the archive
//! and tries again, a bounded number of times.

use super::{Checkpoint, CheckpointOptions, SaveReport, retention_record, tag_for, to_remove};
use crate::archive::{Archive, Removal};
use crate::error::{ErrorKind, Result};
use crate::remote::{self, RemoteAppender, RemoteOptions, RemoteWrite};
use std::time::Duration;

/// How many times a save or a retention pass that lost a race is tried again.
pub const CONFLICT_RETRIES: u32 = 4;

/// Runs `op`, again after a lost race ([`ErrorKind::RemoteConflict`]), at most
/// [`CONFLICT_RETRIES`] more times, waiting 50 ms, 100 ms, 200 ms ... in between (the
/// other writer's commit is done by then; the archive is re-opened by `op`).
fn retrying<T>(mut op: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempt = 0;
    loop {
        match op() {
            Err(e) if matches!(e.kind(), ErrorKind::RemoteConflict(_)) => {
                if attempt == CONFLICT_RETRIES {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(50 << attempt));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The archive at `url`, or `None` when there is no object there yet.
pub(super) fn open(url: &str) -> Result<Option<Archive>> {
    let remote = RemoteOptions::default();
    match remote::remote_version(url, &remote)? {
        None => Ok(None),
        Some(_) => remote.open(url).map(Some),
    }
}

/// A save to the archive at `url`: the append, then the retention pass.
pub(super) fn save(url: &str, opts: &CheckpointOptions, ckpt: &Checkpoint) -> Result<SaveReport> {
    let tag = tag_for(&opts.pattern, ckpt.step)?;
    let remote = RemoteOptions::default();
    let appended = retrying(|| {
        // The archive is read for the record only when there is a policy to record.
        let snapshot = match opts.retention.is_unset() {
            true => None,
            false => open(url)?,
        };
        let record = retention_record(snapshot.as_ref(), opts, &tag, ckpt)?;
        let mut app = RemoteAppender::open(url, &remote, &opts.write)?;
        let mut w = app.begin_tag(&tag)?;
        super::write_tag(&mut w, ckpt, record.as_ref())?;
        w.finish()?;
        app.finish()
    })?;
    let (removed, removal, deferred) = match super::deferrable(apply_retention(url, opts))? {
        Some((removed, removal)) => (removed, removal, false),
        None => (Vec::new(), None, true),
    };
    let (up, copied) = removal.map_or((0, 0), |w| (w.bytes_uploaded, w.bytes_copied));
    Ok(SaveReport {
        tag,
        removed,
        // A remote archive is not compacted (docs/REMOTE.md): its dead bytes stay.
        compacted: false,
        bytes_uploaded: Some(appended.bytes_uploaded + up),
        bytes_copied: Some(appended.bytes_copied + copied),
        deferred,
    })
}

/// Removes the checkpoints the policy drops from the archive at `url`, and says what
/// the commit cost (`None`: nothing to remove, nothing written).
pub(super) fn apply_retention(
    url: &str,
    opts: &CheckpointOptions,
) -> Result<(Vec<String>, Option<RemoteWrite>)> {
    if opts.retention.is_unset() {
        return Ok((Vec::new(), None));
    }
    let remote = RemoteOptions::default();
    if remote::remote_version(url, &remote)?.is_none() {
        return Ok((Vec::new(), None)); // before the first save
    }
    retrying(|| {
        let removal = Removal::picked_by(|a| to_remove(a, &opts.retention));
        let r = remote::remove_tags(url, removal, &remote, &opts.write)?;
        Ok((r.removed, r.remote))
    })
}
