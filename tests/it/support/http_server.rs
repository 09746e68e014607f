//! A small HTTP/1.1 file server on 127.0.0.1 for the remote-archive tests: GET and HEAD of
//! in-memory objects with single byte ranges (`bytes=a-b`, `a-`, `-n`), an ETag per object
//! version and If-Match. It counts requests and bytes served, and can misbehave on purpose
//! (`Mode`): ignore Range (answer 200 with the whole body), cut bodies short, send bodies
//! shorter or longer than announced, wrong Content-Ranges, 416s, a Content-Length of 2^62,
//! stall or trickle, send no ETag; answer 503 a number of times, redirect, or replace an
//! object right after a chosen request. Started by the test and stopped when dropped.
//!
//! Why not axum + tower-http's `ServeDir` behind a counting layer (issue 13 suggests it):
//! the tests need the misbehaviour above on purpose, which `ServeDir` cannot do (it always
//! honours Range, never truncates, and serves files, not versions swapped between two
//! requests); the counting layer and the hooks would make the replacement about as long
//! as this file, for two more dev-dependencies and a tokio server in every test. What
//! this server does not do — HTTP/2, chunked bodies, several ranges per request — no
//! client here asks for: object_store sends one single range per request.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How the server misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Range requests answered as asked.
    #[default]
    Normal,
    /// Range headers ignored: 200 with the whole object.
    IgnoreRange,
    /// Bodies cut off after half their declared length (the connection closed).
    Truncate,
    /// A Content-Range whose start is one past the one asked for (same body).
    WrongStart,
    /// A Content-Range whose total is one more than the object's.
    WrongTotal,
    /// Half the body, with a Content-Length that says so (well framed, short).
    ShortBody,
    /// The body and 1,000 more bytes, with a Content-Length that says so.
    LongBody,
    /// Every range unsatisfiable: 416.
    Unsatisfiable,
    /// A Content-Length of 2^62: the body, then zeros until the client hangs up (at most
    /// 256 MiB).
    HugeLength,
    /// Half the body, then nothing (the connection kept open) for up to 30 s.
    Stall,
    /// No answer at all (the connection kept open) for up to 30 s.
    Mute,
    /// The body in 20 pieces 100 ms apart: slow but never silent for long.
    Trickle,
    /// No ETag, and a Last-Modified that changes with each version.
    NoEtag,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, (Vec<u8>, String)>,
    mode: Mode,
    versions: u64,
    /// Added before each answer (a far-away store, for the benchmark).
    latency: std::time::Duration,
    /// An object replaced (path, new bytes) once this many requests have been answered:
    /// someone uploading a new version while a client reads.
    replace_after: Option<(usize, String, Vec<u8>)>,
    /// Requests still to be answered 503 before the server behaves.
    fail_next: usize,
    /// Paths answered with a 302 to another path.
    redirects: HashMap<String, String>,
    /// Parts of S3 multipart uploads answered 500.
    fail_parts: bool,
    /// Bodies still to be cut off at half (the connection closed), as `Mode::Truncate`.
    cut_next: usize,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
}

pub struct Server {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<State>>,
    log: Arc<Mutex<Vec<Seen>>>,
    bytes_sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let bytes_sent = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (state, log, bytes_sent, stop) =
                (state.clone(), log.clone(), bytes_sent.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (state, log, bytes_sent, stop) =
                        (state.clone(), log.clone(), bytes_sent.clone(), stop.clone());
                    std::thread::spawn(move || serve(conn, &state, &log, &bytes_sent, &stop));
                }
            })
        };
        Server {
            addr,
            state,
            log,
            bytes_sent,
            stop,
            accept: Some(accept),
        }
    }

    /// Publishes (or replaces, with a new ETag) the object at `/name`.
    pub fn put(&self, name: &str, bytes: Vec<u8>) {
        let mut s = self.state.lock().unwrap();
        s.versions += 1;
        let etag = format!("\"v{}-{}\"", s.versions, bytes.len());
        s.objects.insert(format!("/{name}"), (bytes, etag));
    }

    /// Replaces the object at `/name` with `bytes` (a new ETag) right after the `n`th
    /// request from now has been answered.
    pub fn replace_after(&self, n: usize, name: &str, bytes: Vec<u8>) {
        let at = self.count() + n;
        self.state.lock().unwrap().replace_after = Some((at, format!("/{name}"), bytes));
    }

    /// Answers the next `n` requests with 503 Service Unavailable.
    pub fn fail_next(&self, n: usize) {
        self.state.lock().unwrap().fail_next = n;
    }

    /// Cuts the next `n` bodies off at half their length and closes the connection.
    pub fn cut_next(&self, n: usize) {
        self.state.lock().unwrap().cut_next = n;
    }

    /// Answers every part of an S3 multipart upload (`PUT ...?partNumber=N&uploadId=U`)
    /// with 500.
    pub fn fail_parts(&self, on: bool) {
        self.state.lock().unwrap().fail_parts = on;
    }

    /// The object at `/name`, if any.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.state.lock().unwrap();
        s.objects.get(&format!("/{name}")).map(|(b, _)| b.clone())
    }

    /// Answers requests for `/from` with a 302 to `/to`.
    pub fn redirect(&self, from: &str, to: &str) {
        let mut s = self.state.lock().unwrap();
        s.redirects.insert(format!("/{from}"), format!("/{to}"));
    }

    /// Delays every answer by `d`.
    pub fn set_latency(&self, d: std::time::Duration) {
        self.state.lock().unwrap().latency = d;
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = mode;
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}", self.addr)
    }

    /// Requests seen so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// Body bytes sent so far.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(
    conn: TcpStream,
    state: &Mutex<State>,
    log: &Mutex<Vec<Seen>>,
    sent: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
            return;
        };
        let (method, path) = (method.to_string(), path.to_string());
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let seen = Seen {
            method: method.clone(),
            path: path.clone(),
            range: headers.get("range").cloned(),
            if_match: headers.get("if-match").cloned(),
            if_none_match: headers.get("if-none-match").cloned(),
        };
        // A request body (PUT, POST): read whole.
        let body_len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut req_body = vec![0u8; body_len];
        if std::io::Read::read_exact(&mut reader, &mut req_body).is_err() {
            return;
        }
        log.lock().unwrap().push(seen.clone());
        let latency = state.lock().unwrap().latency;
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let (status, extra, body, mode) = respond(state, &seen, req_body);
        if state.lock().unwrap().mode == Mode::Mute {
            for _ in 0..300 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            return;
        }
        // Body misbehaviour only where a body is due.
        let mode = if !status.starts_with('2') {
            Mode::Normal
        } else if method == "GET" && take_cut(state) {
            Mode::Truncate
        } else {
            mode
        };
        let declared = match mode {
            Mode::ShortBody => (body.len() / 2) as u64,
            Mode::LongBody => body.len() as u64 + 1000,
            Mode::HugeLength => 1 << 62,
            _ => body.len() as u64,
        };
        let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {declared}\r\n");
        if !extra.iter().any(|(k, _)| k == "Last-Modified") {
            head.push_str("Last-Modified: Wed, 25 Nov 2026 12:00:00 GMT\r\n");
        }
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        if method == "HEAD" {
            continue;
        }
        let half = if body.len() > 1 {
            body.len() / 2
        } else {
            body.len()
        };
        let (n, cut) = match mode {
            Mode::Truncate | Mode::Stall => (half, true),
            Mode::ShortBody => (body.len() / 2, false),
            _ => (body.len(), false),
        };
        let wrote = if mode == Mode::Trickle {
            let piece = body.len().div_ceil(20).max(1);
            body.chunks(piece).all(|c| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                out.write_all(c).and_then(|_| out.flush()).is_ok()
            })
        } else {
            out.write_all(&body[..n]).is_ok()
        };
        if !wrote {
            return;
        }
        match mode {
            Mode::LongBody if out.write_all(&[0xAA; 1000]).is_err() => return,
            Mode::HugeLength => {
                let zeros = vec![0u8; 64 << 10];
                for _ in 0..4096 {
                    if stop.load(Ordering::SeqCst) || out.write_all(&zeros).is_err() {
                        break;
                    }
                }
                let _ = out.shutdown(Shutdown::Both);
                return;
            }
            Mode::Stall => {
                let _ = out.flush();
                for _ in 0..300 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                let _ = out.shutdown(Shutdown::Both);
                return;
            }
            _ => {}
        }
        sent.fetch_add(n as u64, Ordering::SeqCst);
        {
            let answered = log.lock().unwrap().len();
            let mut s = state.lock().unwrap();
            if s.replace_after
                .as_ref()
                .is_some_and(|(at, _, _)| answered >= *at)
                && let Some((_, path, bytes)) = s.replace_after.take()
            {
                s.versions += 1;
                let etag = format!("\"v{}-{}\"", s.versions, bytes.len());
                s.objects.insert(path, (bytes, etag));
            }
        }
        if cut {
            let _ = out.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// True (once per `cut_next`) when this body is to be cut off.
fn take_cut(state: &Mutex<State>) -> bool {
    let mut s = state.lock().unwrap();
    let cut = s.cut_next > 0;
    s.cut_next = s.cut_next.saturating_sub(1);
    cut
}

type Response = (&'static str, Vec<(String, String)>, Vec<u8>, Mode);

fn respond(state: &Mutex<State>, req: &Seen, req_body: Vec<u8>) -> Response {
    let mut s = state.lock().unwrap();
    if s.fail_next > 0 {
        s.fail_next -= 1;
        return ("503 Service Unavailable", Vec::new(), Vec::new(), s.mode);
    }
    if req.method != "GET" && req.method != "HEAD" {
        return s3_write(&mut s, req, req_body);
    }
    if let Some(to) = s.redirects.get(&req.path) {
        let to = vec![("Location".to_string(), to.clone())];
        return ("302 Found", to, Vec::new(), s.mode);
    }
    let Some((bytes, etag)) = s.objects.get(&req.path) else {
        // As S3 says it: no bucket (no object under the first path segment), or no key.
        let bucket = req.path.split('/').nth(1).unwrap_or("");
        let code = if s
            .objects
            .keys()
            .any(|k| k.split('/').nth(1) == Some(bucket))
        {
            "NoSuchKey"
        } else {
            "NoSuchBucket"
        };
        let body = format!("<Error><Code>{code}</Code></Error>").into_bytes();
        return ("404 Not Found", Vec::new(), body, s.mode);
    };
    let mut headers = vec![("Accept-Ranges".to_string(), "bytes".to_string())];
    if s.mode == Mode::NoEtag {
        // The version number as the minute: each version another Last-Modified.
        let v: u64 = etag[2..].split('-').next().unwrap().parse().unwrap();
        headers.push((
            "Last-Modified".into(),
            format!("Wed, 25 Nov 2026 12:{:02}:00 GMT", v % 60),
        ));
    } else {
        headers.push(("ETag".to_string(), etag.clone()));
    }
    if let Some(m) = &req.if_match
        && m != etag
        && m != "*"
    {
        return ("412 Precondition Failed", Vec::new(), Vec::new(), s.mode);
    }
    let len = bytes.len() as u64;
    let range = match (&req.range, s.mode) {
        (_, Mode::IgnoreRange) | (None, _) => None,
        (Some(_), Mode::Unsatisfiable) => Some(None),
        (Some(r), _) => parse_range(r, len),
    };
    let (shift, extra_total) = match s.mode {
        Mode::WrongStart => (1, 0),
        Mode::WrongTotal => (0, 1),
        _ => (0, 0),
    };
    match range {
        None => ("200 OK", headers, bytes.clone(), s.mode),
        Some(None) => {
            headers.push(("Content-Range".into(), format!("bytes */{len}")));
            ("416 Range Not Satisfiable", headers, Vec::new(), s.mode)
        }
        Some(Some((a, b))) => {
            headers.push((
                "Content-Range".into(),
                format!(
                    "bytes {}-{}/{}",
                    a + shift,
                    b - 1 + shift,
                    len + extra_total
                ),
            ));
            (
                "206 Partial Content",
                headers,
                bytes[a as usize..b as usize].to_vec(),
                s.mode,
            )
        }
    }
}

/// The writes of S3 the uploads send (path style, `/bucket/key`): a conditional PUT
/// (If-Match, If-None-Match: *), and of multipart uploads their start, parts (discarded)
/// and abort; completing one is not implemented (answered 501).
fn s3_write(s: &mut State, req: &Seen, body: Vec<u8>) -> Response {
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let current = s.objects.get(path).map(|(_, e)| e.clone());
    fn none<T>() -> Vec<T> {
        Vec::new()
    }
    match (req.method.as_str(), query) {
        ("PUT", q) if q.contains("partNumber=") => {
            if s.fail_parts {
                ("500 Internal Server Error", none(), none(), Mode::Normal)
            } else {
                let etag = vec![("ETag".to_string(), "\"part\"".to_string())];
                ("200 OK", etag, none(), Mode::Normal)
            }
        }
        ("PUT", "") => {
            let stale = match (&req.if_match, &req.if_none_match, &current) {
                (Some(m), _, Some(e)) => m != e,
                (Some(_), _, None) => true,
                (None, Some(n), Some(_)) => n == "*",
                _ => false,
            };
            if stale {
                return ("412 Precondition Failed", none(), none(), Mode::Normal);
            }
            s.versions += 1;
            let etag = format!("\"v{}-{}\"", s.versions, body.len());
            s.objects.insert(path.to_string(), (body, etag.clone()));
            (
                "200 OK",
                vec![("ETag".to_string(), etag)],
                none(),
                Mode::Normal,
            )
        }
        ("POST", "uploads" | "uploads=") => {
            let xml = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
                       <UploadId>u1</UploadId></InitiateMultipartUploadResult>";
            ("200 OK", none(), xml.as_bytes().to_vec(), Mode::Normal)
        }
        ("DELETE", q) if q.contains("uploadId=") => {
            ("204 No Content", none(), none(), Mode::Normal)
        }
        _ => ("501 Not Implemented", none(), none(), Mode::Normal),
    }
}

/// `Some(Some(start..end))` for a satisfiable single range, `Some(None)` for an
/// unsatisfiable one, `None` when the header is not a single byte range (served whole).
fn parse_range(h: &str, len: u64) -> Option<Option<(u64, u64)>> {
    let spec = h.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let r = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        if n == 0 || len == 0 {
            return Some(None);
        }
        (len.saturating_sub(n), len)
    } else {
        let a: u64 = a.parse().ok()?;
        let b = if b.is_empty() {
            len
        } else {
            (b.parse::<u64>().ok()? + 1).min(len)
        };
        if a >= len || a >= b {
            return Some(None);
        }
        (a, b)
    };
    Some(Some(r))
}
