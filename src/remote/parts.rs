//! The store's requests of a remote write, whichever store it is: a new version put
//! together from ranges of objects the store copies and bytes uploaded from here, then
//! committed conditionally. S3 does it with a multipart upload ([`super::s3`]), Azure
//! Blob Storage with blocks ([`super::azure`]); the composing code (`append.rs`) sees
//! one shape: start, copy a part, upload a part, complete, abort, list leftovers.

use super::azure::AzureAccess;
use super::s3::{Failure, PartDone, S3Access};
use bytes::Bytes;

type Result<T> = std::result::Result<T, Failure>;

/// What a commit whose answers were all errors did (see [`PartsAccess::settle`]).
#[derive(Debug)]
pub(super) enum Settled {
    /// The new version is the object's (its ETag, as far as it is known).
    Committed(Option<String>),
    /// Nothing was committed, and nothing will be: the upload is gone.
    NotCommitted,
    /// The store did not say.
    Unknown,
}

/// Signed access to the one object a remote write replaces.
#[derive(Debug)]
pub(super) enum PartsAccess {
    S3(S3Access),
    Azure(AzureAccess),
}

impl PartsAccess {
    /// Starts an upload; returns its id (S3's upload id; Azure's block-id prefix).
    pub(super) async fn create_upload(&self) -> Result<String> {
        match self {
            PartsAccess::S3(a) => a.create_upload().await,
            PartsAccess::Azure(a) => Ok(a.create_upload()),
        }
    }

    /// True when starting an upload is a request (S3); Azure's is not.
    pub(super) fn create_is_request(&self) -> bool {
        matches!(self, PartsAccess::S3(_))
    }

    /// Part `number`: the bytes `range` of the object's version `e_tag`, copied by the
    /// store.
    pub(super) async fn copy_part(
        &self,
        id: &str,
        number: u32,
        range: std::ops::Range<u64>,
        e_tag: &str,
    ) -> Result<PartDone> {
        match self {
            PartsAccess::S3(a) => a.copy_part(id, number, range, e_tag).await,
            PartsAccess::Azure(a) => {
                let key = a.key().to_string();
                a.copy_part_from(id, number, &key, range, e_tag).await
            }
        }
    }

    /// Part `number`: the bytes `range` of object `key` (same bucket or container) at
    /// version `e_tag`, copied by the store.
    pub(super) async fn copy_part_from(
        &self,
        id: &str,
        number: u32,
        key: &str,
        range: std::ops::Range<u64>,
        e_tag: &str,
    ) -> Result<PartDone> {
        match self {
            PartsAccess::S3(a) => a.copy_part_from(id, number, key, range, e_tag).await,
            PartsAccess::Azure(a) => a.copy_part_from(id, number, key, range, e_tag).await,
        }
    }

    /// Part `number`: `bytes`, uploaded.
    pub(super) async fn upload_part(
        &self,
        id: &str,
        number: u32,
        bytes: Bytes,
    ) -> Result<PartDone> {
        match self {
            PartsAccess::S3(a) => a.upload_part(id, number, bytes).await,
            PartsAccess::Azure(a) => a.upload_part(id, number, bytes).await,
        }
    }

    /// Commits `parts` as the new version, only if the object is version `if_match`
    /// (`Some`) or absent (`None`). Returns the new version's ETag.
    pub(super) async fn complete(
        &self,
        id: &str,
        parts: &[PartDone],
        if_match: Option<&str>,
    ) -> Result<Option<String>> {
        match self {
            PartsAccess::S3(a) => a.complete(id, parts, if_match).await,
            PartsAccess::Azure(a) => a.complete(parts, if_match).await,
        }
    }

    /// What became of upload `id` after its commit failed otherwise than by its
    /// condition (an error answer through every retry): S3 aborts the upload, which only
    /// an open one survives, so the abort's answer settles it; on Azure, this upload's
    /// blocks in the blob's committed list mean committed, and there is no fence for the
    /// rest.
    pub(super) async fn settle(
        &self,
        id: &str,
        parts: &[PartDone],
        if_match: Option<&str>,
    ) -> Settled {
        match self {
            PartsAccess::S3(a) => a.settle(id, if_match).await,
            PartsAccess::Azure(a) => a.settle(parts).await,
        }
    }

    /// Drops what upload `id` staged (S3: aborts it; Azure: nothing to do, the store
    /// drops uncommitted blocks itself).
    pub(super) async fn abort(&self, id: &str) -> Result<()> {
        match self {
            PartsAccess::S3(a) => a.abort(id).await,
            PartsAccess::Azure(_) => Ok(()),
        }
    }

    /// The object's unfinished uploads: (id, initiated, ISO 8601). None on Azure, whose
    /// uncommitted blocks cannot be listed apart from a writer's and expire by themselves.
    pub(super) async fn list_uploads(&self) -> Result<Vec<(String, String)>> {
        match self {
            PartsAccess::S3(a) => a.list_uploads().await,
            PartsAccess::Azure(_) => Ok(Vec::new()),
        }
    }
}
