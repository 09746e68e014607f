//! Remote archives in object stores (S3, GCS, Azure, HTTP, `file://`), read by byte ranges
//! and uploaded whole, through the `object_store` crate behind a synchronous API (a private
//! runtime per call). See docs/REMOTE.md for URLs, credentials, request counts and the
//! consistency guarantees.
//!
//! ```no_run
//! use modelzip::Archive;
//!
//! let archive = Archive::open_url("s3://models/resnet.zip")?; // ≤ 2 requests (az://: ≤ 3)
//! let tag = archive.latest()?; // 1 batched request for its tables
//! let w = tag.param("fc.w")?; // 1 request
//! # Ok::<(), modelzip::Error>(())
//! ```

use crate::archive::source::{RangeSource, RangedLimits};
use crate::archive::{Archive, OpenOptions};
use crate::error::{Error, ErrorKind, Result};
use object_store::path::Path as ObjectPath;
use object_store::{
    ClientOptions, GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt,
    ObjectStoreScheme, PutMode, PutOptions, PutPayload, RetryConfig, UpdateVersion,
};
use std::io::{Read, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod append;
mod azure;
mod compact;
mod parts;
mod s3;
pub(crate) mod sharded;

pub use append::{RemoteAppender, RemoteWrite, remove_tags};
#[allow(unused_imports)]
pub(crate) use append::{S3_MIN_PART, STALE_UPLOAD_AGE};
pub(crate) use append::{check_writable, continue_remote};
pub use compact::compact;

/// True when `s` is a URL this module opens (`s3://`, `gs://`, `az://`, `abfs://`,
/// `http(s)://`, `file://`, ...) rather than a local path.
pub fn is_url(s: &str) -> bool {
    crate::archive::url_of(Path::new(s)).is_some()
}

/// How remote archives are opened: store configuration, retries and read sizes.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Store configuration as `object_store` config keys (`aws_endpoint`,
    /// `aws_allow_http`, `google_service_account`, ...), applied over what the environment
    /// gives (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
    pub config: Vec<(String, String)>,
    /// How often a failed request is retried (default 3; object_store's backoff).
    pub max_retries: usize,
    /// Longest wait for the server (default 60 s): for the answer to a request (an upload's
    /// body included), and then between two pieces of its body. A server that stalls fails
    /// the request after this long; a long download that keeps arriving is not cut off.
    pub timeout: Duration,
    /// Bytes of the first request, from the end of the object (default 256 KiB, at least
    /// 64 KiB + 41): the end records, and the central directory and tags.txt of archives of
    /// up to a few thousand entries.
    pub tail_bytes: u64,
    /// Largest central directory read (default 1 GiB).
    pub max_directory_size: u64,
    /// The limits of the archive reader.
    pub open: OpenOptions,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            config: Vec::new(),
            max_retries: 3,
            timeout: Duration::from_secs(60),
            tail_bytes: 256 << 10,
            max_directory_size: 1 << 30,
            open: OpenOptions::default(),
        }
    }
}

/// Bytes before the central directory read with it when the first request did not
/// cover it: tags.txt and the summary, written just before the directory, come along
/// (the summary of a few thousand tags).
const DIRECTORY_SLACK: u64 = 256 << 10;

/// The whole-request time limit, in effect none: stalls are bounded by
/// [`RemoteOptions::timeout`] instead.
const NO_TOTAL_LIMIT: &str = "30days";

/// Ranges closer than this are fetched as one request.
const COALESCE: u64 = 1 << 20;

impl RemoteOptions {
    /// Opens the archive at `url`: one request for the end of the object (often the
    /// central directory and tags.txt too; two on Azure, which answers no suffix range:
    /// a `HEAD`, then the range), one more for the central directory when the first did
    /// not hold it. Entries are fetched as they are read, every request
    /// conditional on the version the first one saw.
    pub fn open(&self, url: &str) -> Result<Archive> {
        let client = Client::new(url, self)?;
        // At least the bytes that always hold the end records (the longest archive
        // comment and the zip64 locator).
        let tail_bytes = self.tail_bytes.max(22 + 0xffff + 20);
        let first = if client.suffix_ranges {
            client.get(GetOptions {
                range: Some(GetRange::Suffix(tail_bytes)),
                ..Default::default()
            })
        } else {
            client.tail_after_head(tail_bytes)
        };
        let (meta, tail) = match first {
            Ok(r) => r,
            // An empty object cannot satisfy a suffix range: say what it is.
            Err(_) if client.is_empty_object() => {
                return Err(Error::new(ErrorKind::Zip(
                    "file of 0 bytes is too short to be a zip archive".into(),
                ))
                .in_file(url)
                .at_offset(0));
            }
            Err(e) => return Err(e),
        };
        let source = Object {
            client,
            len: meta.size,
            e_tag: meta.e_tag.clone(),
            meta,
        };
        let limits = RangedLimits {
            max_directory_size: self.max_directory_size,
            directory_slack: DIRECTORY_SLACK,
        };
        Archive::from_source(Box::new(source), tail, &limits, url, self.open.clone())
    }
}

impl Archive {
    /// Opens a remote archive (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`) with
    /// credentials and endpoints from the environment (see [`RemoteOptions::open`]).
    /// Tensors read from it are owned buffers.
    pub fn open_url(url: &str) -> Result<Archive> {
        RemoteOptions::default().open(url)
    }
}

/// A store, the object's path in it, and the runtime that drives its requests.
struct Client {
    rt: tokio::runtime::Runtime,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    /// For an S3 store: its builder (the settings) and the store, from which the requests
    /// object_store lacks (remote appends) are made on demand ([`Client::parts_access`]).
    s3: Option<(
        object_store::aws::AmazonS3Builder,
        Arc<object_store::aws::AmazonS3>,
    )>,
    /// The same for an Azure store.
    azure: Option<(
        object_store::azure::MicrosoftAzureBuilder,
        Arc<object_store::azure::MicrosoftAzure>,
    )>,
    max_retries: usize,
    /// False for a store that answers no suffix range (`bytes=-N`): Azure Blob Storage.
    suffix_ranges: bool,
}

impl Client {
    fn new(url: &str, opts: &RemoteOptions) -> Result<Client> {
        let invalid =
            |why: String| Error::new(ErrorKind::InvalidInput(format!("URL {url:?}: {why}")));
        let parsed = url::Url::parse(url).map_err(|e| invalid(e.to_string()))?;
        let (scheme, path) =
            ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(e.to_string()))?;
        let retry = RetryConfig {
            max_retries: opts.max_retries,
            // Retries are bounded by their count (each by `timeout`), not by the time since
            // the request began: a download dropped after minutes still resumes.
            retry_timeout: Duration::from_secs(30 * 86_400),
            ..Default::default()
        };
        // Set as config keys, not with `with_client_options`: that would drop the client
        // settings `from_env` read (AWS_ALLOW_HTTP, proxies, ...). The limit is on a stall
        // (reqwest's read timeout), not on a whole request: a download of gigabytes takes
        // as long as it takes while bytes arrive.
        let timeout = format!("{}ms", opts.timeout.as_millis());
        let bad_key = |k: &str, e: object_store::Error| invalid(format!("config key {k:?}: {e}"));
        let mut s3 = None;
        let mut azure = None;
        fn client_key<K: std::str::FromStr<Err = object_store::Error>>(k: &str) -> Result<K> {
            k.parse()
                .map_err(|e| Error::new(ErrorKind::InvalidInput(format!("config key {k:?}: {e}"))))
        }
        let store: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(url)
                    .with_retry(retry)
                    .with_config(client_key("read_timeout")?, &timeout)
                    .with_config(client_key("timeout")?, NO_TOTAL_LIMIT);
                // Create-only uploads in parts end with a copy that must not replace an
                // object: S3 does that with a conditional CompleteMultipartUpload.
                if std::env::var_os("AWS_COPY_IF_NOT_EXISTS").is_none() {
                    b = b.with_config(
                        object_store::aws::AmazonS3ConfigKey::CopyIfNotExists,
                        "multipart",
                    );
                }
                for (k, v) in &opts.config {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                let built = Arc::new(b.clone().build().map_err(|e| remote_err(url, e))?);
                s3 = Some((b, built.clone()));
                built
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url)
                    .with_retry(retry)
                    .with_config(client_key("read_timeout")?, &timeout)
                    .with_config(client_key("timeout")?, NO_TOTAL_LIMIT);
                for (k, v) in &opts.config {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                Arc::new(b.build().map_err(|e| remote_err(url, e))?)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .with_retry(retry)
                    .with_config(client_key("read_timeout")?, &timeout)
                    .with_config(client_key("timeout")?, NO_TOTAL_LIMIT);
                for (k, v) in &opts.config {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                let built = Arc::new(b.clone().build().map_err(|e| remote_err(url, e))?);
                azure = Some((b, built.clone()));
                built
            }
            ObjectStoreScheme::Http => {
                let origin = &parsed[..url::Position::BeforePath];
                let mut client_opts = ClientOptions::new()
                    .with_allow_http(true)
                    .with_timeout_disabled()
                    .with_read_timeout(opts.timeout);
                for (k, v) in &opts.config {
                    client_opts = client_opts.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                Arc::new(
                    object_store::http::HttpBuilder::new()
                        .with_url(origin)
                        .with_retry(retry)
                        .with_client_options(client_opts)
                        .build()
                        .map_err(|e| remote_err(url, e))?,
                )
            }
            ObjectStoreScheme::Local => Arc::new(object_store::local::LocalFileSystem::new()),
            other => return Err(invalid(format!("unsupported store {other:?}"))),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::from)?;
        Ok(Client {
            rt,
            store,
            path,
            url: url.to_string(),
            s3,
            azure,
            max_retries: opts.max_retries,
            suffix_ranges: !matches!(scheme, ObjectStoreScheme::MicrosoftAzure),
        })
    }

    /// Runs `f` to completion on the private runtime (from a thread of its own when the
    /// caller is itself inside a runtime, where blocking on one would panic).
    fn block_on<F: std::future::Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| {
                s.spawn(|| self.rt.block_on(f))
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
        } else {
            self.rt.block_on(f)
        }
    }

    /// The signed requests object_store lacks (remote writes), for this object; or why
    /// there are none (not an `s3://` or `az://` URL, an unsupported bucket kind).
    fn parts_access(&self) -> std::result::Result<parts::PartsAccess, String> {
        if let Some((builder, store)) = &self.s3 {
            let parsed = url::Url::parse(&self.url).map_err(|e| e.to_string())?;
            return s3::S3Access::new(
                &parsed,
                builder,
                store,
                self.path.as_ref(),
                self.max_retries,
            )
            .map(parts::PartsAccess::S3);
        }
        if let Some((builder, store)) = &self.azure {
            // The blob's URL as the store builds it: one it signs, without the signature.
            let signed = self
                .block_on(object_store::signer::Signer::signed_url(
                    store.as_ref(),
                    http::Method::GET,
                    &self.path,
                    Duration::from_secs(60),
                ))
                .map_err(|e| format!("the store cannot sign a URL of the blob: {e}"))?;
            return azure::AzureAccess::new(
                builder,
                store.clone(),
                self.path.as_ref(),
                signed,
                self.max_retries,
            )
            .map(parts::PartsAccess::Azure);
        }
        Err(format!("{} is not an s3:// or az:// URL", self.url))
    }

    /// The last `n` bytes of the object (all of it when shorter) from a store that
    /// serves no suffix ranges (Azure Blob Storage): a HEAD for the size and version,
    /// then a GET of the range, conditional on that version.
    fn tail_after_head(&self, n: u64) -> Result<(ObjectMeta, Vec<u8>)> {
        let meta = self
            .block_on(self.store.head(&self.path))
            .map_err(|e| remote_err(&self.url, e))?;
        if meta.size == 0 {
            // What the suffix request's caller reports for an empty object.
            return Err(Error::new(ErrorKind::Zip("empty object".into())));
        }
        self.get(GetOptions {
            range: Some(GetRange::Bounded(meta.size.saturating_sub(n)..meta.size)),
            if_match: meta.e_tag.clone(),
            ..Default::default()
        })
    }

    /// One GET: the object's metadata and the bytes asked for.
    fn get(&self, opts: GetOptions) -> Result<(ObjectMeta, Vec<u8>)> {
        self.block_on(async {
            let r = self.store.get_opts(&self.path, opts).await?;
            let meta = r.meta.clone();
            let bytes = exact_body(r).await?;
            Ok((meta, bytes))
        })
        .map_err(|e| remote_err(&self.url, e))
    }

    /// True when the object exists and is empty (a HEAD request; asked only after the
    /// first read failed).
    fn is_empty_object(&self) -> bool {
        self.block_on(self.store.head(&self.path))
            .is_ok_and(|m| m.size == 0)
    }
}

/// An object read by ranges, every request conditional on the first one's ETag (or,
/// from a server that sends none, checked against its Last-Modified).
struct Object {
    client: Client,
    len: u64,
    e_tag: Option<String>,
    /// The first answer's metadata (its Last-Modified tells versions apart without ETag).
    meta: ObjectMeta,
}

impl Object {
    async fn get_range(&self, r: Range<u64>) -> object_store::Result<bytes::Bytes> {
        let opts = GetOptions {
            range: Some(GetRange::Bounded(r)),
            if_match: self.e_tag.clone(),
            ..Default::default()
        };
        let got = self.client.store.get_opts(&self.client.path, opts).await?;
        // Also when a server ignores If-Match: a different version is never mixed in.
        // Without ETags, Last-Modified tells versions apart (the epoch when absent too).
        if got.meta.e_tag != self.e_tag
            || got.meta.size != self.len
            || (self.e_tag.is_none() && got.meta.last_modified != self.meta.last_modified)
        {
            return Err(object_store::Error::Precondition {
                path: self.client.path.to_string(),
                source: format!(
                    "the object is now {} bytes, version {:?}",
                    got.meta.size, got.meta.e_tag
                )
                .into(),
            });
        }
        exact_body(got).await.map(bytes::Bytes::from)
    }
}

/// A body of another length than the byte range its answer's headers announced.
#[derive(Debug)]
struct BodyLength {
    range: Range<u64>,
    got: u64,
}

impl std::fmt::Display for BodyLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let want = self.range.end - self.range.start;
        let (a, b) = (self.range.start, self.range.end);
        if self.got > want {
            write!(
                f,
                "the server sent more than the {want} bytes of byte range {a}..{b} it announced"
            )
        } else {
            write!(
                f,
                "the server sent {} bytes for byte range {a}..{b} ({want} bytes)",
                self.got
            )
        }
    }
}

impl std::error::Error for BodyLength {}

/// Largest buffer reserved ahead for a body; a larger one grows as its bytes arrive (the
/// length is the server's word until they have).
const BODY_RESERVE: u64 = 64 << 20;

/// The body of `got`, exactly the bytes of the range it announced: a shorter body (a
/// well-framed answer that stops early) or a longer one (the surplus is not read) is an
/// error naming the range, never bytes at the wrong offsets.
async fn exact_body(got: object_store::GetResult) -> object_store::Result<Vec<u8>> {
    let range = got.range.clone();
    let want = range.end - range.start;
    let mut buf = Vec::with_capacity(want.min(BODY_RESERVE) as usize);
    let mut stream = got.into_stream();
    while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
        let chunk = chunk?;
        if buf.len() as u64 + chunk.len() as u64 > want {
            let got = buf.len() as u64 + chunk.len() as u64;
            return Err(body_length(range, got));
        }
        buf.extend_from_slice(&chunk);
    }
    if buf.len() as u64 != want {
        return Err(body_length(range, buf.len() as u64));
    }
    Ok(buf)
}

fn body_length(range: Range<u64>, got: u64) -> object_store::Error {
    object_store::Error::Generic {
        store: "remote",
        source: Box::new(BodyLength { range, got }),
    }
}

impl RangeSource for Object {
    fn len(&self) -> u64 {
        self.len
    }

    fn version(&self) -> Option<&str> {
        self.e_tag.as_deref()
    }

    fn read_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u8>>> {
        let got = self
            .client
            .block_on(object_store::coalesce_ranges(
                ranges,
                |r| self.get_range(r),
                COALESCE,
            ))
            .map_err(|e| match e {
                object_store::Error::Precondition { .. } => {
                    Error::new(ErrorKind::RemoteChanged(self.e_tag.clone().unwrap_or_else(
                        || format!("last modified {}", self.meta.last_modified.to_rfc2822()),
                    )))
                    .in_file(&self.client.url)
                }
                e => remote_err_reading(&self.client.url, e, ranges),
            })?;
        Ok(got.into_iter().map(Vec::from).collect())
    }
}

/// An object_store error as ours: a range-ignoring server, a conflict or a plain failure.
fn remote_err(url: &str, e: object_store::Error) -> Error {
    remote_err_reading(url, e, &[])
}

/// [`remote_err`] of a read of `ranges` (named in the message of a plain failure).
fn remote_err_reading(url: &str, e: object_store::Error, ranges: &[Range<u64>]) -> Error {
    // Our own finding about a body says all there is to say.
    let ours = match &e {
        object_store::Error::Generic { source, .. } => source.downcast_ref::<BodyLength>(),
        _ => None,
    };
    // object_store's "Generic S3 error: " says nothing to the user: its source does.
    let mut chain = match (ours, &e) {
        (Some(b), _) => b.to_string(),
        (None, object_store::Error::Generic { source, .. }) => source.to_string(),
        (None, e) => e.to_string(),
    };
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        // object_store's messages often repeat their source's already.
        let more = s.to_string();
        if !chain.contains(&more) {
            chain.push_str(": ");
            chain.push_str(&more);
        }
        src = s.source();
    }
    // Nor does a nested one's ("Generic HTTP error: " in the source of another error).
    let mut from = 0;
    while let Some(i) = chain[from..].find("Generic ").map(|i| i + from) {
        match chain[i..].find(" error: ") {
            Some(j) if j <= 40 && !chain[i..i + j].contains(':') => {
                chain.replace_range(i..i + j + " error: ".len(), "")
            }
            _ => from = i + "Generic ".len(),
        }
    }
    // The retry error's "…, after 3 retries, max_retries: 3, retry_timeout: 2592000s  - "
    // quotes object_store's settings; the count of retries says it. An empty body leaves
    // a trailing ": ".
    if let Some(i) = chain.find(", max_retries: ")
        && let Some(j) = chain[i..].find(" - ")
    {
        chain.replace_range(i..i + j, "");
    }
    let chain = chain.trim_end_matches([':', ' ']).to_string();
    let kind = match &e {
        object_store::Error::NotFound { .. } if chain.contains("NoSuchBucket") => {
            ErrorKind::Remote(format!("no object at {url}: the bucket does not exist"))
        }
        object_store::Error::NotFound { .. } => ErrorKind::Remote(format!("no object at {url}")),
        // The last resort of the credential chains, the cloud instance's metadata service
        // (AWS's token and role paths, GCP's computeMetadata), failed: there were none
        // anywhere else either.
        _ if [
            "/latest/api/token",
            "/latest/meta-data/",
            "/computeMetadata/",
        ]
        .iter()
        .any(|p| chain.contains(p)) =>
        {
            ErrorKind::Remote(format!(
                "no credentials for {url}: none in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, ...; docs/REMOTE.md), and the cloud instance metadata service gave none ({chain})"
            ))
        }
        object_store::Error::AlreadyExists { .. } => ErrorKind::RemoteConflict(format!(
            "an object already exists at {url}; nothing was uploaded (it is replaced only by an upload told to replace it)"
        )),
        object_store::Error::Precondition { .. } => ErrorKind::RemoteConflict(format!(
            "the object at {url} is not the version this upload may replace (someone else wrote it); nothing was replaced"
        )),
        // object_store reports a 200 answer to a range request only in its message (the
        // HTTP store as "not supported", the others as a "non-partial response").
        object_store::Error::NotSupported { .. } if chain.contains("Range request") => {
            ErrorKind::RangeNotSupported
        }
        _ if chain.contains("non-partial response") => ErrorKind::RangeNotSupported,
        _ if ours.is_some() || ranges.is_empty() => ErrorKind::Remote(chain),
        _ => {
            let shown: Vec<String> = ranges
                .iter()
                .take(3)
                .map(|r| format!("{}..{}", r.start, r.end))
                .collect();
            let more = if ranges.len() > 3 {
                format!(" and {} more", ranges.len() - 3)
            } else {
                String::new()
            };
            let s = if ranges.len() == 1 { "" } else { "s" };
            ErrorKind::Remote(format!(
                "{chain} (reading byte range{s} {}{more})",
                shown.join(", ")
            ))
        }
    };
    Error::new(kind).in_file(url)
}

/// What an upload may replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadMode {
    /// Only create: fail if an object exists at the URL.
    Create,
    /// Replace the object only if it is still the version with this ETag.
    ReplaceVersion(String),
    /// Replace whatever is there.
    Replace,
}

internal! {
    /// Largest upload sent as one request; larger files are sent in parts (multipart).
    pub const MULTIPART_THRESHOLD: u64 = 64 << 20;
}

/// Size of one part of a multipart upload.
const PART_SIZE: usize = 16 << 20;

/// The version (ETag) of the object at `url`, or `None` when there is none.
pub fn remote_version(url: &str, opts: &RemoteOptions) -> Result<Option<String>> {
    let client = Client::new(url, opts)?;
    match client.block_on(client.store.head(&client.path)) {
        Ok(m) => Ok(Some(m.e_tag.unwrap_or_default())),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(remote_err(url, e)),
    }
}

/// Uploads the local archive at `local` to `url` (after checking it opens as an archive).
/// What is checked is what goes up: the file is opened before the check and read through
/// that one handle, and refused if the path names another file after the check (another
/// device, inode, size or modification time; on Unix) or if the file's size or
/// modification time changed by the time it was read whole ([`ErrorKind::InvalidInput`]:
/// nothing is uploaded, a multipart upload is aborted). Files of up to
/// 64 MiB go in one PUT (conditional unless [`UploadMode::Replace`]); larger ones in parts: with
/// [`UploadMode::Replace`] straight to the key, otherwise to a temporary key that is then
/// copied to `url` only if no object is there (a conditional replace of a large object is
/// refused: the stores cannot complete a multipart upload on a version).
/// `progress(done, total)` is called as bytes are sent. Returns the new object's ETag.
pub fn upload(
    local: &Path,
    url: &str,
    mode: UploadMode,
    opts: &RemoteOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Option<String>> {
    let (mut file, checked) = open_checked(local)?;
    let total = checked.len;
    let client = Client::new(url, opts)?;
    if total <= MULTIPART_THRESHOLD {
        // At most MULTIPART_THRESHOLD bytes: the size checked bounds the buffer, and a
        // file grown since is cut off there (and refused below).
        let mut buf = Vec::with_capacity(total as usize);
        (&mut file)
            .take(total + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Error::from(e).in_file(local))?;
        still_as_checked(&file, &checked, buf.len() as u64, local)?;
        let put_mode = match &mode {
            UploadMode::Create => PutMode::Create,
            UploadMode::Replace => PutMode::Overwrite,
            UploadMode::ReplaceVersion(tag) => PutMode::Update(UpdateVersion {
                e_tag: Some(tag.clone()),
                version: None,
            }),
        };
        let put = PutOptions {
            mode: put_mode,
            ..Default::default()
        };
        let r = client
            .block_on(
                client
                    .store
                    .put_opts(&client.path, PutPayload::from(buf), put),
            )
            .map_err(|e| remote_err(url, e))?;
        progress(total, total);
        return Ok(r.e_tag);
    }
    if let UploadMode::ReplaceVersion(_) = mode {
        return Err(Error::new(ErrorKind::RemoteConflict(format!(
            "replacing {url} only if it is still the version given is not supported for files over {MULTIPART_THRESHOLD} bytes (uploaded in parts); nothing was replaced"
        )))
        .in_file(url));
    }
    let staging = match mode {
        UploadMode::Replace => client.path.clone(),
        // A name of this upload's own: two writers (on two hosts, with the same process
        // id) never publish each other's staged bytes.
        _ => ObjectPath::from(format!(
            "{}.modelzip-upload-{}-{:016x}",
            client.path,
            std::process::id(),
            staging_nonce()
        )),
    };
    let store_err = |e| remote_err(url, e);
    client.block_on(async {
        let up = client
            .store
            .put_multipart(&staging)
            .await
            .map_err(store_err)?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(up, PART_SIZE);
        // A failure before `finish` (a part refused, the local file unreadable or
        // changed) aborts the upload: the store drops its parts, and nothing at all
        // appears at the key. (`finish` aborts on its own failures.)
        let sent = send_parts(&mut w, &mut file, &checked, local, progress)
            .await
            .map_err(|e| match e {
                Failed::Local(e) => e,
                Failed::Store(e) => store_err(e),
            });
        if let Err(e) = sent {
            let _ = w.abort().await;
            return Err(e);
        }
        w.finish().await.map_err(store_err)?;
        if staging != client.path {
            let copied = client
                .store
                .copy_if_not_exists(&staging, &client.path)
                .await;
            let _ = client.store.delete(&staging).await;
            copied.map_err(store_err)?;
        }
        Ok(())
    })?;
    remote_version(url, opts)
}

/// 64 random bits (std's hasher keys come from the OS's random source, fresh per
/// `RandomState`), mixed with the time: a staging object's name no other upload has.
fn staging_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// What identifies the local file an upload checked: device, inode (on Unix), size and
/// modification time.
#[derive(Debug, PartialEq, Eq)]
struct Checked {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Checked {
    fn of(m: &std::fs::Metadata) -> Checked {
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        Checked {
            dev,
            ino,
            len: m.len(),
            modified: m.modified().ok(),
        }
    }
}

/// The error of a local file that is not the one checked, or no longer as checked.
fn local_changed(local: &Path, when: &str) -> Error {
    Error::new(ErrorKind::InvalidInput(format!(
        "the file changed {when}; nothing was uploaded (upload it again once it is no longer being written)"
    )))
    .in_file(local)
}

/// `local` opened, then checked to open as an archive, and the path found still naming
/// the file opened, unchanged: the handle reads the bytes that were checked. A file
/// changed in place during the check (as the rollback of an interrupted append does) is
/// checked once more.
fn open_checked(local: &Path) -> Result<(std::fs::File, Checked)> {
    let stat = |f: &std::fs::File| {
        f.metadata()
            .map(|m| Checked::of(&m))
            .map_err(|e| Error::from(e).in_file(local))
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let file = std::fs::File::open(local).map_err(|e| Error::from(e).in_file(local))?;
        let before = stat(&file)?;
        // Refuse to publish something that is not an archive.
        Archive::open(local)?;
        #[cfg(feature = "fault-injection")]
        fault::after_upload_check();
        let named = std::fs::metadata(local)
            .map(|m| Checked::of(&m))
            .map_err(|e| Error::from(e).in_file(local))?;
        let opened = stat(&file)?;
        if named == before && opened == before {
            return Ok((file, before));
        }
        // Another file at the path: what was checked is not what was opened.
        if (named.dev, named.ino) != (before.dev, before.ino) || attempts == 2 {
            return Err(local_changed(local, "while it was checked"));
        }
    }
}

/// `Ok` when `file`, of which `read` bytes were read, is still as `checked`.
fn still_as_checked(
    file: &std::fs::File,
    checked: &Checked,
    read: u64,
    local: &Path,
) -> Result<()> {
    let now = file
        .metadata()
        .map(|m| Checked::of(&m))
        .map_err(|e| Error::from(e).in_file(local))?;
    if read != checked.len {
        return Err(local_changed(
            local,
            &format!(
                "while it was uploaded (it was {} bytes when checked; {read} read)",
                checked.len
            ),
        ));
    }
    if now != *checked {
        return Err(local_changed(local, "while it was uploaded"));
    }
    Ok(())
}

/// A transfer's failure: on the local side (said as ours, naming the local file) or the
/// store's.
enum Failed {
    Local(Error),
    Store(object_store::Error),
}

impl From<object_store::Error> for Failed {
    fn from(e: object_store::Error) -> Failed {
        Failed::Store(e)
    }
}

/// Reads `file` (as `checked`) into the parts of `w`; a file not as checked by the time
/// it is read whole is an error.
async fn send_parts(
    w: &mut object_store::WriteMultipart,
    file: &mut std::fs::File,
    checked: &Checked,
    local: &Path,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> std::result::Result<(), Failed> {
    let total = checked.len;
    let mut buf = vec![0u8; PART_SIZE];
    let mut done = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Failed::Local(Error::from(e).in_file(local)))?;
        if n == 0 {
            break;
        }
        w.wait_for_capacity(4).await?;
        w.write(&buf[..n]);
        done += n as u64;
        if done > total {
            break;
        }
        progress(done, total);
    }
    still_as_checked(file, checked, done, local).map_err(Failed::Local)
}

/// Test hook (`fault-injection` feature): something to run between an upload's check of
/// the local file and its look at what the path names afterwards.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault {
    use std::cell::RefCell;

    thread_local! {
        static AFTER_CHECK: RefCell<Option<Box<dyn FnMut()>>> = const { RefCell::new(None) };
    }

    /// Runs `f` on this thread right after the next uploads' archive check (`None`: nothing).
    pub fn set_after_upload_check(f: Option<Box<dyn FnMut()>>) {
        AFTER_CHECK.with(|h| *h.borrow_mut() = f);
    }

    pub(super) fn after_upload_check() {
        AFTER_CHECK.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f()
            }
        });
    }
}

/// Bytes free to an unprivileged writer on the file system of `file` (`None` where not
/// known).
fn free_space(file: &std::fs::File) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        rustix::fs::fstatvfs(file)
            .ok()
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Downloads the archive at `url` to `local`: into a temporary file beside it, checked
/// (every CRC-32, table, tensor and manifest, as `verify` does), then renamed over
/// `local`, so `local` is never a partial or unverified file. Every request after the
/// first is conditional on its version. `progress(done, total)` is called as bytes
/// arrive. Returns the version downloaded.
///
/// With `overwrite`, it replaces `local` as [`crate::ArchiveWriter::create`] does: a
/// symlinked `local` replaces the file it points at (the link stays); `local`'s write
/// lock is held from start to end ([`ErrorKind::Locked`] at once if another writer holds
/// it), and the journal of an append to the old file that was cut short is rolled back
/// first, so it is never replayed onto the downloaded file. Without it, an existing
/// `local` is refused (an I/O error of kind `AlreadyExists`) before anything is
/// downloaded, and the file is put in place only if none has appeared meanwhile.
pub fn download(
    url: &str,
    local: &Path,
    overwrite: bool,
    opts: &RemoteOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Option<String>> {
    let client = Client::new(url, opts)?;
    let ap = crate::archive::ArchivePath::resolve(local)?;
    let real = ap.real.as_path();
    let exists = || {
        Error::from(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "file already exists; refusing to overwrite it",
        ))
        .in_file(local)
    };
    if !overwrite && std::fs::symlink_metadata(local).is_ok() {
        return Err(exists());
    }
    let _lock =
        crate::archive::WriteLock::acquire_resolved(real, false).map_err(|e| ap.located(e))?;
    crate::archive::settle_before_replace(real).map_err(|e| ap.located(e))?;
    let mut temp = crate::archive::new_temp_beside(real).map_err(|e| ap.located(e))?;
    // The first answer's version, to tell a failure from a replacement.
    let mut first: Option<String> = None;
    let got = client.block_on(async {
        let r = client
            .store
            .get_opts(&client.path, GetOptions::default())
            .await?;
        let total = r.meta.size;
        let version = r.meta.e_tag.clone();
        first.clone_from(&version);
        // An object larger than the space left is refused before a byte is written
        // (the size is the server's word: the body is never written past it).
        if let Some(free) = free_space(temp.as_file())
            && total > free
        {
            return Err(Failed::Local(
                Error::new(ErrorKind::InvalidInput(format!(
                    "the object at {url} is {total} bytes and only {free} are free where it would be written"
                )))
                .in_file(local),
            ));
        }
        let mut stream = r.into_stream();
        let mut done = 0u64;
        while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
            let chunk = chunk?;
            temp.write_all(&chunk)
                .map_err(|e| Failed::Local(Error::from(e).in_file(local)))?;
            done += chunk.len() as u64;
            progress(done, total);
        }
        Ok::<_, Failed>(version)
    });
    let version = match got {
        Ok(v) => v,
        Err(Failed::Local(e)) => return Err(e),
        // Failed mid-body: if the object is now another version (a resumed request
        // found another ETag), say so rather than the lost connection's error.
        Err(Failed::Store(e)) => {
            if let Some(was) = first
                && remote_version(url, opts).is_ok_and(|now| now.as_deref() != Some(&was))
            {
                return Err(Error::new(ErrorKind::RemoteChanged(was)).in_file(url));
            }
            return Err(remote_err(url, e));
        }
    };
    // The file is made durable while it is verified: the fsync waits on the disk, the
    // verification reads the page cache and hashes on the CPU (issue 27's remote row:
    // one after the other they cost the sum). Both finish before the rename.
    let (synced, verified) = std::thread::scope(|s| {
        let file = temp.as_file();
        let sync = s.spawn(move || file.sync_all());
        // The temp file is deleted on failure: errors name the URL the bytes came from.
        let verified = Archive::open(temp.path())
            .map_err(|e| {
                e.with_file_renamed(temp.path(), Path::new(url))
                    .in_file(url)
            })
            .map(|a| a.verify());
        let synced = sync
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the fsync thread panicked")));
        (synced, verified)
    });
    synced.map_err(|e| Error::from(e).in_file(temp.path()))?;
    let report = verified?;
    if let Some(p) = report.problems.first() {
        return Err(Error::new(ErrorKind::Checksum(format!(
            "the downloaded archive does not verify ({} problems; first: {}{})",
            report.problems.len(),
            p.entry
                .as_deref()
                .map(|e| format!("{e}: "))
                .unwrap_or_default(),
            p.message
        )))
        .in_file(url));
    }
    if overwrite {
        temp.persist(real)
            .map_err(|e| Error::from(e.error).in_file(local))?;
    } else {
        temp.persist_noclobber(real).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                exists()
            } else {
                Error::from(e.error).in_file(local)
            }
        })?;
    }
    // fsync_dir syncs the directory that holds its argument.
    crate::archive::fsync_dir(real).map_err(|e| ap.located(e))?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each create-only upload in parts stages under a name of its own, within a process
    /// as across processes (whose ids may repeat on two hosts).
    #[test]
    fn staging_names_differ_per_upload() {
        let nonces: std::collections::HashSet<u64> = (0..64).map(|_| staging_nonce()).collect();
        assert_eq!(nonces.len(), 64);
    }

    /// Neither object_store's "Generic … error: " (at the top or nested) nor its retry
    /// settings reach the message; what the store said does.
    #[test]
    fn store_errors_lose_object_stores_wording() {
        let nested = object_store::Error::NotSupported {
            source: Box::new(object_store::Error::Generic {
                store: "HTTP",
                source: "Error performing GET http://h/m.zip in 3ms, after 2 retries, max_retries: 2, retry_timeout: 180s  - Server returned non-2xx status code: 503 Service Unavailable: ".into(),
            }),
        };
        for e in [
            nested,
            object_store::Error::Generic {
                store: "S3",
                source: "Generic S3 error: connection reset".into(),
            },
        ] {
            let said = remote_err("s3://b/m.zip", e).to_string();
            assert!(!said.contains("Generic"), "{said}");
            assert!(!said.contains("max_retries"), "{said}");
            assert!(!said.contains("retry_timeout"), "{said}");
            assert!(
                said.contains("503 Service Unavailable") || said.contains("connection reset"),
                "{said}"
            );
        }
    }
}
