//! The S3 requests object_store 0.14 does not make: a multipart upload whose parts are
//! copied server-side from byte ranges of an existing object (`UploadPartCopy` with
//! `x-amz-copy-source-range`) or uploaded (`UploadPart`), completed only if the object is
//! still the version read (`CompleteMultipartUpload` with `If-Match`, or `If-None-Match: *`
//! for a new one), aborted on failure, and the listing of a key's unfinished uploads.
//!
//! Nothing here signs or sends by hand: the requests are signed with object_store's public
//! SigV4 signer ([`AwsAuthorizer`]) and credentials (the store's own provider chain:
//! environment, web identity, container, instance metadata), and sent with its HTTP client
//! ([`ReqwestConnector`] with the store's client options). docs/REMOTE.md says why.

use super::parts::Settled;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer, AwsCredentialProvider};
use object_store::client::{
    ClientConfigKey, ClientOptions, HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::time::Duration;

/// What RFC 3986 leaves unreserved stays as it is; everything else is percent-encoded,
/// as S3's canonical request wants a key (`/` kept: it separates nothing in a key, but
/// S3 signs it as written).
const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// The client settings carried over from the store's builder to the HTTP client of these
/// requests (timeouts, proxies, plain HTTP, certificates).
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

/// Signed access to one object of an S3 bucket, for the requests object_store lacks.
pub(super) struct S3Access {
    credentials: AwsCredentialProvider,
    region: String,
    bucket: String,
    key: String,
    /// The object's URL (endpoint, bucket, encoded key).
    object_url: String,
    http: HttpClient,
    sign_payload: bool,
    max_retries: usize,
}

impl std::fmt::Debug for S3Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Access")
            .field("object_url", &self.object_url)
            .finish()
    }
}

/// A failed request: the store refused a condition (the object is not the version
/// expected, or another writer's commit conflicts), or anything else (the message).
#[derive(Debug)]
pub(super) enum Failure {
    Precondition,
    Other(String),
}

type S3Result<T> = std::result::Result<T, Failure>;

/// One answer: status, headers, body.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

/// `url` with `query` appended (none when it is empty): a request's address.
pub(super) fn with_query(url: &str, query: &str) -> String {
    if query.is_empty() {
        url.to_string()
    } else {
        format!("{url}?{query}")
    }
}

/// `method url` with `headers` and `body`, not yet signed (the S3 and Azure requests
/// differ only in their authorizer).
pub(super) fn unsigned_request(
    method: &Method,
    url: &str,
    headers: &[(&str, String)],
    body: Bytes,
) -> std::result::Result<http::Request<HttpRequestBody>, String> {
    let mut b = http::Request::builder().method(method.clone()).uri(url);
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    b.body(HttpRequestBody::from(body))
        .map_err(|e| e.to_string())
}

/// The longest answer body [`answer`] reads. Every answer it reads is a control
/// answer (an XML result or error, a list of uploads or parts, Azure's list of at most
/// 50,000 committed blocks, about 5 MiB): a server that sends more is refused, not read
/// into memory without end.
pub(super) const MAX_ANSWER_BODY: u64 = 16 << 20;

/// Sends a signed request: the answer's status, headers and whole body (at most
/// [`MAX_ANSWER_BODY`] bytes).
pub(super) async fn answer(
    http: &HttpClient,
    request: http::Request<HttpRequestBody>,
) -> std::result::Result<Answer, String> {
    use futures_util::StreamExt;
    let response = http.execute(request).await.map_err(|e| error_chain(&e))?;
    let status = response.status();
    let headers = response.headers().clone();
    let too_long = |n: String| {
        format!(
            "the server's answer ({status}) is {n} bytes long, more than the {} MiB an \
             answer to this request can need",
            MAX_ANSWER_BODY >> 20
        )
    };
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > MAX_ANSWER_BODY) {
        return Err(too_long(n.to_string()));
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut stream = response.into_body().bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| error_chain(&e))?;
        if (body.len() + chunk.len()) as u64 > MAX_ANSWER_BODY {
            return Err(too_long(format!("over {}", MAX_ANSWER_BODY)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status,
        headers,
        body: Bytes::from(body),
    })
}

/// Runs `once` (one signed request) until it answers other than 5xx or 429, retried with
/// backoff up to `max_retries` times after a lost connection or such an answer; the last
/// answer is returned as it is, a request that never got one as a failure naming
/// `method` and `url`. Shared by the S3 and the Azure requests.
pub(super) async fn with_retries<F, Fut>(
    max_retries: usize,
    method: &Method,
    url: &str,
    mut once: F,
) -> S3Result<Answer>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<Answer, String>>,
{
    let mut attempt = 0;
    loop {
        let got = once().await;
        let retry = match &got {
            Ok(a) => a.status.is_server_error() || a.status == StatusCode::TOO_MANY_REQUESTS,
            Err(_) => true,
        };
        if !retry || attempt >= max_retries {
            return got
                .map_err(|e| Failure::Other(format!("{method} {url}: {e}{}", retried(attempt))));
        }
        attempt += 1;
        let wait = Duration::from_millis(100u64 << attempt.min(6)).min(Duration::from_secs(5));
        tokio::time::sleep(wait).await;
    }
}

/// [`with_retries`], also saying whether an attempt's answer was lost (no answer, or a
/// 5xx): that attempt may have done what it asked, which a commit's retry must allow for
/// (the object then changed by this very commit).
pub(super) async fn with_retries_lost<F, Fut>(
    max_retries: usize,
    method: &Method,
    url: &str,
    mut once: F,
) -> (S3Result<Answer>, bool)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<Answer, String>>,
{
    let lost = std::sync::atomic::AtomicBool::new(false);
    let got = with_retries(max_retries, method, url, || {
        let attempt = once();
        let lost = &lost;
        async move {
            let got = attempt.await;
            if !matches!(&got, Ok(a) if !a.status.is_server_error()) {
                lost.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            got
        }
    })
    .await;
    (got, lost.into_inner())
}

/// One part of the new object: copied from a byte range of the source, or uploaded.
pub(super) struct PartDone {
    pub(super) number: u32,
    /// The part's ETag (S3), or its block ids joined by commas (Azure).
    pub(super) e_tag: String,
    /// Requests beyond the one the part was counted as (an Azure part longer than its
    /// largest block is several blocks).
    pub(super) extra_requests: u64,
}

impl S3Access {
    /// The access of the object `key` of the store `built` from `builder` (whose settings
    /// give the endpoint, bucket, region and client options).
    pub(super) fn new(
        url: &url::Url,
        builder: &AmazonS3Builder,
        built: &object_store::aws::AmazonS3,
        key: &str,
        max_retries: usize,
    ) -> std::result::Result<S3Access, String> {
        let get = |k: AmazonS3ConfigKey| builder.get_config_value(&k);
        if !matches!(url.scheme(), "s3" | "s3a") {
            return Err(format!("{url} is not an s3:// URL"));
        }
        let bucket = url
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| format!("{url} names no bucket"))?
            .to_string();
        let region = get(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into());
        let is_true = |v: Option<String>| v.is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if is_true(get(AmazonS3ConfigKey::S3Express)) {
            return Err("writing to S3 Express One Zone buckets is not supported".into());
        }
        // Settings object_store would apply to its own writes and these requests do not
        // carry yet: refused rather than silently dropped.
        for key in [
            "aws_server_side_encryption",
            "aws_sse_customer_key_base64",
            "aws_request_payer",
        ] {
            let set = key
                .parse::<AmazonS3ConfigKey>()
                .ok()
                .and_then(|k| builder.get_config_value(&k))
                .is_some_and(|v| !v.is_empty() && v != "false");
            if set {
                return Err(format!(
                    "remote appends do not apply the {key} setting yet (docs/REMOTE.md)"
                ));
            }
        }
        let virtual_hosted = is_true(get(AmazonS3ConfigKey::VirtualHostedStyleRequest));
        // The store's own rule (object_store's AmazonS3Builder::build).
        let endpoint = get(AmazonS3ConfigKey::S3Endpoint).or(get(AmazonS3ConfigKey::Endpoint));
        let bucket_endpoint = match (endpoint, virtual_hosted) {
            (Some(e), true) => e,
            (Some(e), false) => format!("{}/{bucket}", e.trim_end_matches('/')),
            (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
            (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
        };
        let object_url = format!(
            "{}/{}",
            bucket_endpoint.trim_end_matches('/'),
            utf8_percent_encode(key, KEY_ENCODE)
        );
        let mut client = ClientOptions::new();
        for k in CLIENT_KEYS {
            if let Some(v) = get(AmazonS3ConfigKey::Client(k)) {
                client = client.with_config(k, v);
            }
        }
        let http = ReqwestConnector::default()
            .connect(&client)
            .map_err(|e| e.to_string())?;
        Ok(S3Access {
            credentials: built.credentials().clone(),
            region,
            bucket,
            key: key.to_string(),
            object_url,
            http,
            sign_payload: !is_true(get(AmazonS3ConfigKey::UnsignedPayload)),
            max_retries,
        })
    }

    /// Sends one signed request, retried (with backoff) on a lost connection, 5xx or 429
    /// answers up to `max_retries` times. Any other answer is returned as it is.
    async fn send(
        &self,
        method: Method,
        query: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> S3Result<Answer> {
        let url = with_query(&self.object_url, query);
        with_retries(self.max_retries, &method, &self.object_url, || {
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
            .credentials
            .get_credential()
            .await
            .map_err(|e| format!("no credentials: {e}"))?;
        let mut request = unsigned_request(method, url, headers, body)?;
        AwsAuthorizer::new(&credential, "s3", &self.region)
            .with_sign_payload(self.sign_payload)
            .try_authorize(&mut request, None)
            .map_err(|e| e.to_string())?;
        answer(&self.http, request).await
    }

    /// Starts a multipart upload to the key; returns its upload id.
    pub(super) async fn create_upload(&self) -> S3Result<String> {
        let a = self
            .send(Method::POST, "uploads=", &[], Bytes::new())
            .await?;
        let a = self.expect_ok(a, "CreateMultipartUpload")?;
        xml_text(&a.body, "UploadId").ok_or_else(|| {
            Failure::Other(format!(
                "CreateMultipartUpload of {}: the answer holds no UploadId",
                self.object_url
            ))
        })
    }

    /// Part `number` of upload `id`: the bytes `range` of the key's version `e_tag`,
    /// copied by the store (`x-amz-copy-source-if-match`: never another version's).
    pub(super) async fn copy_part(
        &self,
        id: &str,
        number: u32,
        range: std::ops::Range<u64>,
        e_tag: &str,
    ) -> S3Result<PartDone> {
        self.copy_part_from(id, number, &self.key, range, e_tag)
            .await
    }

    /// [`S3Access::copy_part`] from object `key` of the same bucket (version `e_tag`).
    pub(super) async fn copy_part_from(
        &self,
        id: &str,
        number: u32,
        key: &str,
        range: std::ops::Range<u64>,
        e_tag: &str,
    ) -> S3Result<PartDone> {
        let source = format!(
            "/{}/{}",
            utf8_percent_encode(&self.bucket, KEY_ENCODE),
            utf8_percent_encode(key, KEY_ENCODE)
        );
        let headers = [
            ("x-amz-copy-source", source),
            (
                "x-amz-copy-source-range",
                format!("bytes={}-{}", range.start, range.end - 1),
            ),
            ("x-amz-copy-source-if-match", e_tag.to_string()),
        ];
        let query = format!("partNumber={number}&uploadId={}", encode_query(id));
        let a = self
            .send(Method::PUT, &query, &headers, Bytes::new())
            .await?;
        let a = self.expect_ok(a, "UploadPartCopy")?;
        let e_tag = xml_text(&a.body, "ETag").ok_or_else(|| {
            Failure::Other(format!(
                "UploadPartCopy of {}: the answer holds no ETag",
                self.object_url
            ))
        })?;
        Ok(PartDone {
            number,
            e_tag,
            extra_requests: 0,
        })
    }

    /// Part `number` of upload `id`: `bytes`, uploaded.
    pub(super) async fn upload_part(
        &self,
        id: &str,
        number: u32,
        bytes: Bytes,
    ) -> S3Result<PartDone> {
        let query = format!("partNumber={number}&uploadId={}", encode_query(id));
        let a = self.send(Method::PUT, &query, &[], bytes).await?;
        let a = self.expect_ok(a, "UploadPart")?;
        let e_tag = a
            .headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                Failure::Other(format!(
                    "UploadPart of {}: the answer has no ETag header",
                    self.object_url
                ))
            })?
            .to_string();
        Ok(PartDone {
            number,
            e_tag,
            extra_requests: 0,
        })
    }

    /// Completes upload `id` from `parts`, only if the object is version `if_match`
    /// (`Some`) or does not exist (`None`). Returns the new object's ETag.
    pub(super) async fn complete(
        &self,
        id: &str,
        parts: &[PartDone],
        if_match: Option<&str>,
    ) -> S3Result<Option<String>> {
        let mut xml = String::from("<CompleteMultipartUpload>");
        for p in parts {
            xml.push_str(&format!(
                "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
                p.number,
                xml_escape(&p.e_tag)
            ));
        }
        xml.push_str("</CompleteMultipartUpload>");
        let condition = match if_match {
            Some(t) => ("if-match", t.to_string()),
            None => ("if-none-match", "*".to_string()),
        };
        let query = format!("uploadId={}", encode_query(id));
        let url = format!("{}?{query}", self.object_url);
        let (headers, body) = ([condition], Bytes::from(xml));
        let (a, lost) =
            with_retries_lost(self.max_retries, &Method::POST, &self.object_url, || {
                self.send_once(&Method::POST, &url, &headers, body.clone())
            })
            .await;
        let a = a?;
        if lost && a.status == StatusCode::NOT_FOUND {
            // The upload is gone: completed by the attempt whose answer was lost, when the
            // object is no longer the version this upload was conditioned on.
            let now = self.current_e_tag().await?;
            if now.is_some() && now.as_deref() != if_match {
                return Ok(now);
            }
        }
        let a = match self.expect_ok(a, "CompleteMultipartUpload") {
            Err(Failure::Precondition) if lost => {
                // A completed upload is gone; a refused one stays until it is aborted (by
                // this writer, or as a stale one by a later writer, hours later).
                return match self.upload_exists(id).await? {
                    false => self.current_e_tag().await,
                    true => Err(Failure::Precondition),
                };
            }
            a => a?,
        };
        // S3 may answer 200 and report the failure in the body.
        if let Some(code) = xml_text(&a.body, "Code") {
            let message = xml_text(&a.body, "Message").unwrap_or_default();
            return Err(failure_of(
                &code,
                format!(
                    "CompleteMultipartUpload of {}: {code}: {message}",
                    self.object_url
                ),
            ));
        }
        Ok(xml_text(&a.body, "ETag"))
    }

    /// See [`super::parts::PartsAccess::settle`]: an abort that the store answers ends
    /// the question. Aborted: the upload was open, so its commit did not happen and now
    /// cannot. `NoSuchUpload`: the upload is gone, which only its completion does to an
    /// upload this young (stale ones are aborted after [`super::append::STALE_UPLOAD_AGE`]),
    /// unless the object is still the version it was conditioned on.
    pub(super) async fn settle(&self, id: &str, if_match: Option<&str>) -> Settled {
        match self.abort_upload(id).await {
            Ok(true) => return Settled::NotCommitted,
            Ok(false) => {}
            Err(_) => return Settled::Unknown,
        }
        match self.current_e_tag().await {
            Ok(now) if now.is_some() && now.as_deref() != if_match => Settled::Committed(now),
            Ok(_) => Settled::NotCommitted,
            Err(_) => Settled::Unknown,
        }
    }

    /// Whether upload `id` is still open (ListParts answers; a completed or aborted
    /// upload is `NoSuchUpload`).
    async fn upload_exists(&self, id: &str) -> S3Result<bool> {
        let query = format!("uploadId={}&max-parts=1", encode_query(id));
        let a = self.send(Method::GET, &query, &[], Bytes::new()).await?;
        if a.status == StatusCode::NOT_FOUND {
            return Ok(false);
        }
        self.expect_ok(a, "ListParts").map(|_| true)
    }

    /// The object's ETag now (`None` when there is no object).
    async fn current_e_tag(&self) -> S3Result<Option<String>> {
        let a = self.send(Method::HEAD, "", &[], Bytes::new()).await?;
        if a.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let a = self.expect_ok(a, "HeadObject")?;
        Ok(a.headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string))
    }

    /// Aborts upload `id` (the store drops its parts).
    pub(super) async fn abort(&self, id: &str) -> S3Result<()> {
        self.abort_upload(id).await.map(drop)
    }

    /// Aborts upload `id`: true when this aborted it, false when it was gone already
    /// (`NoSuchUpload`: completed or aborted before).
    async fn abort_upload(&self, id: &str) -> S3Result<bool> {
        let query = format!("uploadId={}", encode_query(id));
        let a = self.send(Method::DELETE, &query, &[], Bytes::new()).await?;
        if a.status == StatusCode::NOT_FOUND {
            return Ok(false);
        }
        self.expect_ok(a, "AbortMultipartUpload").map(|_| true)
    }

    /// The unfinished multipart uploads of exactly this key: (upload id, initiated, as
    /// the store writes it: ISO 8601).
    pub(super) async fn list_uploads(&self) -> S3Result<Vec<(String, String)>> {
        let bucket_url = self
            .object_url
            .strip_suffix(&format!("/{}", utf8_percent_encode(&self.key, KEY_ENCODE)))
            .unwrap_or(&self.object_url)
            .to_string();
        let list = S3Access {
            object_url: bucket_url,
            credentials: self.credentials.clone(),
            region: self.region.clone(),
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            http: self.http.clone(),
            sign_payload: self.sign_payload,
            max_retries: self.max_retries,
        };
        let query = format!("prefix={}&uploads=", encode_query(&self.key));
        let a = list.send(Method::GET, &query, &[], Bytes::new()).await?;
        let a = self.expect_ok(a, "ListMultipartUploads")?;
        Ok(xml_uploads(&a.body)
            .into_iter()
            .filter(|(key, _, _)| *key == self.key)
            .map(|(_, id, initiated)| (id, initiated))
            .collect())
    }

    /// `a` when it is a success, else the failure it reports (S3's error code and
    /// message, or the status).
    fn expect_ok(&self, a: Answer, what: &str) -> S3Result<Answer> {
        if a.status.is_success() {
            return Ok(a);
        }
        let code = xml_text(&a.body, "Code").unwrap_or_default();
        let message = xml_text(&a.body, "Message").unwrap_or_default();
        let said = match (code.is_empty(), message.is_empty()) {
            (true, _) => a.status.to_string(),
            (false, true) => format!("{} {code}", a.status),
            (false, false) => format!("{} {code}: {message}", a.status),
        };
        let text = format!("{what} of {} failed: {said}", self.object_url);
        if a.status == StatusCode::PRECONDITION_FAILED || a.status == StatusCode::CONFLICT {
            return Err(Failure::Precondition);
        }
        Err(failure_of(&code, text))
    }
}

/// A failure from S3's error `code`: a refused condition or anything else.
fn failure_of(code: &str, text: String) -> Failure {
    match code {
        "PreconditionFailed" | "ConditionalRequestConflict" => Failure::Precondition,
        _ => Failure::Other(text),
    }
}

pub(super) fn retried(attempts: usize) -> String {
    match attempts {
        0 => String::new(),
        n => format!(" (after {n} retries)"),
    }
}

/// An error and its sources, joined.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let more = c.to_string();
        if !s.contains(&more) {
            s.push_str(": ");
            s.push_str(&more);
        }
        src = c.source();
    }
    s
}

fn encode_query(v: &str) -> String {
    utf8_percent_encode(v, KEY_ENCODE)
        .to_string()
        .replace('/', "%2F")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The text of the first element named `name` anywhere in `xml` (unescaped), if any.
pub(super) fn xml_text(xml: &[u8], name: &str) -> Option<String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut inside = false;
    let mut text = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) if e.local_name().as_ref() == name.as_bytes() => {
                inside = true;
                text.clear();
            }
            Ok(Event::Text(t)) if inside => text.push_str(&t.decode().ok()?),
            Ok(Event::GeneralRef(r)) if inside => {
                let entity = r.decode().ok()?;
                text.push_str(match &*entity {
                    "quot" => "\"",
                    "amp" => "&",
                    "lt" => "<",
                    "gt" => ">",
                    "apos" => "'",
                    _ => return None,
                });
            }
            Ok(Event::End(e)) if inside && e.local_name().as_ref() == name.as_bytes() => {
                return Some(text);
            }
            Ok(Event::Eof) | Err(_) => return None,
            _ => {}
        }
    }
}

/// The (key, upload id, initiated) of each `<Upload>` of a ListMultipartUploads answer.
fn xml_uploads(xml: &[u8]) -> Vec<(String, String, String)> {
    let text = String::from_utf8_lossy(xml);
    text.split("<Upload>")
        .skip(1)
        .filter_map(|u| {
            let u = u.split("</Upload>").next()?.as_bytes();
            Some((
                xml_text(u, "Key")?,
                xml_text(u, "UploadId")?,
                xml_text(u, "Initiated").unwrap_or_default(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_fields_are_found_and_unescaped() {
        let body = br#"<?xml version="1.0"?><CopyPartResult><LastModified>x</LastModified><ETag>&quot;abc&quot;</ETag></CopyPartResult>"#;
        assert_eq!(xml_text(body, "ETag").as_deref(), Some("\"abc\""));
        assert_eq!(xml_text(body, "UploadId"), None);
        let list = br#"<ListMultipartUploadsResult><Upload><Key>a/b.zip</Key><UploadId>1</UploadId><Initiated>2026-01-01T00:00:00.000Z</Initiated></Upload><Upload><Key>a/b.zip.x</Key><UploadId>2</UploadId></Upload></ListMultipartUploadsResult>"#;
        let got = xml_uploads(list);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "a/b.zip");
        assert_eq!(got[0].2, "2026-01-01T00:00:00.000Z");
        assert_eq!(got[1].1, "2");
    }

    #[test]
    fn object_urls_follow_the_stores_rule_and_uncarried_settings_are_refused() {
        let url = url::Url::parse("s3://bucket/runs/a b.zip").unwrap();
        let b = AmazonS3Builder::new()
            .with_url(url.as_str())
            .with_region("eu-west-1")
            .with_access_key_id("a")
            .with_secret_access_key("s");
        let access = |b: &AmazonS3Builder| {
            S3Access::new(&url, b, &b.clone().build().unwrap(), "runs/a b.zip", 0)
        };
        let s = access(&b).unwrap();
        assert_eq!(
            s.object_url,
            "https://s3.eu-west-1.amazonaws.com/bucket/runs/a%20b.zip"
        );
        let local = b.clone().with_endpoint("http://127.0.0.1:9000/");
        assert_eq!(
            access(&local).unwrap().object_url,
            "http://127.0.0.1:9000/bucket/runs/a%20b.zip"
        );
        let virt = b.clone().with_virtual_hosted_style_request(true);
        assert_eq!(
            access(&virt).unwrap().object_url,
            "https://bucket.s3.eu-west-1.amazonaws.com/runs/a%20b.zip"
        );
        for (key, value) in [
            ("aws_server_side_encryption", "aws:kms"),
            ("aws_request_payer", "true"),
        ] {
            let set = b.clone().with_config(key.parse().unwrap(), value);
            let why = access(&set).unwrap_err();
            assert!(why.contains(key), "{why}");
        }
    }

    /// A server answering with a body past MAX_ANSWER_BODY (declared, or sent without a
    /// length) is refused once the limit is passed, not read into memory without end.
    #[test]
    fn an_answer_longer_than_the_limit_is_refused() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for declared in [true, false] {
                let (mut c, _) = listener.accept().unwrap();
                let mut req = [0u8; 4096];
                let _ = c.read(&mut req);
                let n = MAX_ANSWER_BODY as usize + (1 << 20);
                let head = if declared {
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")
                } else {
                    "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string()
                };
                let _ = c.write_all(head.as_bytes());
                let zeros = vec![0u8; 1 << 20];
                for _ in 0..n >> 20 {
                    if c.write_all(&zeros).is_err() {
                        break;
                    }
                }
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = ClientOptions::new().with_allow_http(true);
        let http = ReqwestConnector::default().connect(&client).unwrap();
        for want in ["is 17825792 bytes long", "is over 16777216 bytes long"] {
            let url = format!("http://127.0.0.1:{port}/bucket?uploads=");
            let req = unsigned_request(&Method::GET, &url, &[], Bytes::new()).unwrap();
            let Err(why) = rt.block_on(answer(&http, req)) else {
                panic!("a {want} answer was read");
            };
            assert!(why.contains(want) && why.contains("16 MiB"), "{why}");
        }
        server.join().unwrap();
    }

    #[test]
    fn keys_are_encoded_as_s3_signs_them() {
        let k = utf8_percent_encode("runs/a b+c~d.zip", KEY_ENCODE).to_string();
        assert_eq!(k, "runs/a%20b%2Bc~d.zip");
    }
}
