//! The Azure Blob Storage requests object_store 0.14 does not make, for remote appends:
//! a block blob's new version put together from blocks copied server-side from byte
//! ranges of its current version (`Put Block From URL` with `x-ms-source-range`,
//! conditional on the source's ETag) and blocks uploaded from here (`Put Block`), and
//! committed only if the blob is still the version read (`Put Block List` with
//! `If-Match`, or `If-None-Match: *` for a new blob).
//!
//! An S3 multipart upload maps onto this as: the upload is a random block-id prefix (no
//! request), a part is one or more blocks, completing is `Put Block List`, aborting is
//! nothing (Azure drops a blob's uncommitted blocks when a block list is next committed,
//! and after seven days: nothing is left to be billed forever and nothing can be listed).
//!
//! Nothing here signs by hand: requests carry object_store's Shared Key / bearer / SAS
//! authorization ([`AzureAuthorizer`]) from the store's own credential chain, and the
//! copy source is a URL the store signs ([`Signer::signed_url`]: a service SAS from an
//! account key, a user delegation SAS from a bearer token), read-only for a few minutes.

use super::parts::Settled;
use super::s3::{
    Answer, Failure, PartDone, answer, unsigned_request, with_query, with_retries,
    with_retries_lost, xml_text,
};
use base64::Engine;
use bytes::Bytes;
use http::{Method, StatusCode};
use object_store::azure::{AzureAuthorizer, AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::client::{
    ClientConfigKey, ClientOptions, HttpClient, HttpConnector, ReqwestConnector,
};
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use std::sync::Arc;
use std::time::Duration;

/// Largest block, uploaded or copied from a source range (Azure's limit since service
/// version 2019-12-12): a longer part is sent as several blocks.
const MAX_BLOCK: u64 = 4000 << 20;

/// How long the copy source's signed URL is valid (each block request reads its range
/// within seconds; a commit of many blocks signs afresh per part).
const SOURCE_URL_VALIDITY: Duration = Duration::from_secs(15 * 60);

/// The client settings carried over from the store's builder (as for S3).
const CLIENT_KEYS: [ClientConfigKey; 9] = [
    ClientConfigKey::AllowHttp,
    ClientConfigKey::AllowInvalidCertificates,
    ClientConfigKey::ConnectTimeout,
    ClientConfigKey::ReadTimeout,
    ClientConfigKey::Timeout,
    ClientConfigKey::ProxyUrl,
    ClientConfigKey::ProxyCaCertificate,
    ClientConfigKey::ProxyExcludes,
    ClientConfigKey::Http1Only,
];

type Result<T> = std::result::Result<T, Failure>;

/// Signed access to one blob of an Azure container, for the requests object_store lacks.
pub(super) struct AzureAccess {
    store: Arc<MicrosoftAzure>,
    account: String,
    key: String,
    /// The blob's URL (no query).
    blob_url: String,
    http: HttpClient,
    max_retries: usize,
}

impl std::fmt::Debug for AzureAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureAccess")
            .field("blob_url", &self.blob_url)
            .finish()
    }
}

impl AzureAccess {
    /// The access of blob `key` of the store `built` from `builder`.
    pub(super) fn new(
        builder: &MicrosoftAzureBuilder,
        built: Arc<MicrosoftAzure>,
        key: &str,
        signed_blob_url: url::Url,
        max_retries: usize,
    ) -> std::result::Result<AzureAccess, String> {
        let get = |k: AzureConfigKey| builder.get_config_value(&k);
        if get(AzureConfigKey::EncryptionKey).is_some_and(|v| !v.is_empty()) {
            return Err(
                "remote appends do not apply a customer-provided encryption key yet (docs/REMOTE.md)"
                    .into(),
            );
        }
        let emulator =
            get(AzureConfigKey::UseEmulator).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let account = match get(AzureConfigKey::AccountName) {
            Some(a) if !a.is_empty() => a,
            _ if emulator => "devstoreaccount1".to_string(),
            _ => return Err("no Azure storage account name is set".into()),
        };
        let mut blob_url = signed_blob_url;
        blob_url.set_query(None);
        let mut client = ClientOptions::new();
        for k in CLIENT_KEYS {
            if let Some(v) = get(AzureConfigKey::Client(k)) {
                client = client.with_config(k, v);
            }
        }
        // Plain HTTP where the store itself speaks it (the emulator, whose builder
        // allows it without the setting, or `azure_allow_http`): the URL it signed says.
        if blob_url.scheme() == "http" {
            client = client.with_allow_http(true);
        }
        let http = ReqwestConnector::default()
            .connect(&client)
            .map_err(|e| e.to_string())?;
        Ok(AzureAccess {
            store: built,
            account,
            key: key.to_string(),
            blob_url: blob_url.to_string(),
            http,
            max_retries,
        })
    }

    async fn send(
        &self,
        method: Method,
        query: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Answer> {
        let url = with_query(&self.blob_url, query);
        with_retries(self.max_retries, &method, &self.blob_url, || {
            self.send_once(&method, &url, headers, body.clone())
        })
        .await
    }

    async fn send_once(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> std::result::Result<Answer, String> {
        let credential = self
            .store
            .credentials()
            .get_credential()
            .await
            .map_err(|e| format!("no credentials: {e}"))?;
        // Shared Key signs Content-Length, so it is set before signing; and sent even
        // when 0: a `Put Block From URL` without it reads as a `Copy Blob` to servers
        // that tell the two apart by their headers (Azurite does).
        let length = ("content-length", body.len().to_string());
        let headers: Vec<(&str, String)> = headers.iter().cloned().chain([length]).collect();
        let mut request = unsigned_request(method, url, &headers, body)?;
        AzureAuthorizer::new(&credential, &self.account)
            .try_authorize(&mut request)
            .map_err(|e| e.to_string())?;
        answer(&self.http, request).await
    }

    /// A new upload: a random prefix of the block ids it stages (no request).
    pub(super) fn create_upload(&self) -> String {
        let mut r = [0u8; 12];
        unique_bytes(&mut r);
        r.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The id of block `k` of part `number` of upload `id`: 32 characters before base64,
    /// the length object_store's own uploads use (every block id of a blob has one
    /// length).
    fn block_id(id: &str, number: u32, k: u32) -> String {
        let raw = format!("{id}{:05x}{k:03x}", number);
        base64::engine::general_purpose::STANDARD.encode(raw)
    }

    /// Part `number` of upload `id`: the bytes `range` of blob `key` (this container) at
    /// version `e_tag`, copied by the store in blocks of at most 4000 MiB.
    pub(super) async fn copy_part_from(
        &self,
        id: &str,
        number: u32,
        key: &str,
        range: std::ops::Range<u64>,
        e_tag: &str,
    ) -> Result<PartDone> {
        let source = self
            .store
            .signed_url(Method::GET, &ObjectPath::from(key), SOURCE_URL_VALIDITY)
            .await
            .map_err(|e| Failure::Other(format!("signing the copy source {key}: {e}")))?;
        let mut ids = Vec::new();
        let mut start = range.start;
        let mut k = 0u32;
        while start < range.end {
            let end = (start + MAX_BLOCK).min(range.end);
            let block = Self::block_id(id, number, k);
            let headers = [
                ("x-ms-copy-source", source.to_string()),
                ("x-ms-source-range", format!("bytes={start}-{}", end - 1)),
                ("x-ms-source-if-match", e_tag.to_string()),
            ];
            let query = format!("comp=block&blockid={}", encode(&block));
            let a = self
                .send(Method::PUT, &query, &headers, Bytes::new())
                .await?;
            self.expect_ok(a, "Put Block From URL")?;
            ids.push(block);
            start = end;
            k += 1;
        }
        Ok(PartDone {
            number,
            e_tag: ids.join(","),
            extra_requests: u64::from(k.saturating_sub(1)),
        })
    }

    /// Part `number` of upload `id`: `bytes`, uploaded in blocks of at most 4000 MiB.
    pub(super) async fn upload_part(
        &self,
        id: &str,
        number: u32,
        bytes: Bytes,
    ) -> Result<PartDone> {
        let mut ids = Vec::new();
        let mut k = 0u32;
        let mut at = 0usize;
        loop {
            let end = (at + MAX_BLOCK as usize).min(bytes.len());
            let block = Self::block_id(id, number, k);
            let query = format!("comp=block&blockid={}", encode(&block));
            let a = self
                .send(Method::PUT, &query, &[], bytes.slice(at..end))
                .await?;
            self.expect_ok(a, "Put Block")?;
            ids.push(block);
            k += 1;
            at = end;
            if at >= bytes.len() {
                break;
            }
        }
        Ok(PartDone {
            number,
            e_tag: ids.join(","),
            extra_requests: u64::from(k - 1),
        })
    }

    /// Commits the blocks of `parts` in order as the blob's new version, only if the blob
    /// is version `if_match` (`Some`) or does not exist (`None`). Returns the new ETag.
    pub(super) async fn complete(
        &self,
        parts: &[PartDone],
        if_match: Option<&str>,
    ) -> Result<Option<String>> {
        let mut xml = String::from(r#"<?xml version="1.0" encoding="utf-8"?><BlockList>"#);
        for p in parts {
            for id in p.e_tag.split(',') {
                xml.push_str("<Latest>");
                xml.push_str(id);
                xml.push_str("</Latest>");
            }
        }
        xml.push_str("</BlockList>");
        let condition = match if_match {
            Some(t) => ("if-match", t.to_string()),
            None => ("if-none-match", "*".to_string()),
        };
        let headers = [condition, ("content-type", "application/xml".to_string())];
        let (url, body) = (
            format!("{}?comp=blocklist", self.blob_url),
            Bytes::from(xml),
        );
        let (a, lost) = with_retries_lost(self.max_retries, &Method::PUT, &self.blob_url, || {
            self.send_once(&Method::PUT, &url, &headers, body.clone())
        })
        .await;
        match self.expect_ok(a?, "Put Block List") {
            Err(Failure::Precondition) if lost => {
                // Block ids are this upload's alone: in the blob's committed list, they
                // are there because the lost attempt committed them.
                let ours = parts.iter().flat_map(|p| p.e_tag.split(',')).next_back();
                match ours {
                    Some(id) if self.committed_blocks_include(id).await? => {
                        self.current_e_tag().await
                    }
                    _ => Err(Failure::Precondition),
                }
            }
            Err(e) => Err(e),
            Ok(a) => Ok(e_tag_of(&a)),
        }
    }

    /// See [`super::parts::PartsAccess::settle`]: this upload's last block among the
    /// blob's committed blocks means committed; otherwise nothing fences a `Put Block
    /// List` the store may still carry out, so the outcome stays unknown.
    pub(super) async fn settle(&self, parts: &[PartDone]) -> Settled {
        let Some(ours) = parts.iter().flat_map(|p| p.e_tag.split(',')).next_back() else {
            return Settled::Unknown;
        };
        match self.committed_blocks_include(ours).await {
            Ok(true) => match self.current_e_tag().await {
                Ok(now) => Settled::Committed(now),
                Err(_) => Settled::Committed(None),
            },
            _ => Settled::Unknown,
        }
    }

    /// Whether block `id` is one of the blob's committed blocks (`Get Block List`).
    async fn committed_blocks_include(&self, id: &str) -> Result<bool> {
        let a = self
            .send(
                Method::GET,
                "comp=blocklist&blocklisttype=committed",
                &[],
                Bytes::new(),
            )
            .await?;
        let a = self.expect_ok(a, "Get Block List")?;
        let name = format!("<Name>{id}</Name>");
        Ok(a.body.windows(name.len()).any(|w| w == name.as_bytes()))
    }

    /// The blob's ETag now (`None` when there is no blob).
    async fn current_e_tag(&self) -> Result<Option<String>> {
        let a = self.send(Method::HEAD, "", &[], Bytes::new()).await?;
        if a.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(e_tag_of(&self.expect_ok(a, "Get Blob Properties")?))
    }

    /// `a` when it is a success, else the failure it reports.
    fn expect_ok(&self, a: Answer, what: &str) -> Result<Answer> {
        if a.status.is_success() {
            return Ok(a);
        }
        let code = xml_text(&a.body, "Code").unwrap_or_default();
        let message = xml_text(&a.body, "Message").unwrap_or_default();
        let message = message.lines().next().unwrap_or("").to_string();
        // A refused condition (the blob or the copy source is no longer the version
        // read, or exists already), or the staged blocks were dropped because another
        // writer committed a block list first: the object changed.
        if a.status == StatusCode::PRECONDITION_FAILED
            || a.status == StatusCode::CONFLICT
            || matches!(
                code.as_str(),
                "ConditionNotMet"
                    | "SourceConditionNotMet"
                    | "InvalidBlockList"
                    | "BlobAlreadyExists"
            )
        {
            return Err(Failure::Precondition);
        }
        let said = match (code.is_empty(), message.is_empty()) {
            (true, _) => a.status.to_string(),
            (false, true) => format!("{} {code}", a.status),
            (false, false) => format!("{} {code}: {message}", a.status),
        };
        Err(Failure::Other(format!(
            "{what} of {} failed: {said}",
            self.blob_url
        )))
    }

    /// The blob's key.
    pub(super) fn key(&self) -> &str {
        &self.key
    }
}

/// The ETag an answer carries.
fn e_tag_of(a: &Answer) -> Option<String> {
    a.headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Percent-encodes a block id for the query (base64's `+`, `/`, `=`).
fn encode(v: &str) -> String {
    v.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

fn unique_bytes(buf: &mut [u8]) {
    // Unique per commit, not secret: the time, the process and a counter mixed.
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for chunk in buf.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}
