//! `modelzip view`: a local web page of an archive (its tags, metrics, parameters,
//! diffs and graphs), served with a small read-only JSON API, or written as one static
//! HTML file (docs/VIEW.md).

mod api;

use super::common::{is_url, open};
use super::output::print;
use super::{CliError, Outcome};
use api::ApiError;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use modelzip::Archive;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Serve a web page of an archive on 127.0.0.1: a timeline of its tags (params, own
/// and shared bytes, graph encoding, dtypes), the checkpoints' metrics as charts over
/// the step (the best marked), a tag's parameters (sortable, filterable, with a
/// histogram and statistics of each), the diff of any two tags, and a tag's graph (pan,
/// zoom, click a node for its op, inputs, outputs and attributes). Read-only; the
/// archive is read again when it changes, so new checkpoints appear on reload. Every
/// script and style is built into modelzip: the page needs no network.
///
/// Prints the URL (port 0, the default, takes a free port) and serves until stopped
/// (Ctrl-C). --html writes the same page as one self-contained file instead (data
/// embedded: the timeline, the metrics, every tag's parameters and graph, the diffs
/// of consecutive tags; no histograms), replacing an existing file only with --force
/// and never the archive itself.
///
/// Example:
///   modelzip view ck.zip
///   modelzip view ck.zip --port 8080 --open
///   modelzip view s3://bucket/model.zip
///   modelzip view model.zip --html report.html
#[derive(clap::Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive (a path or a URL).
    archive: PathBuf,
    /// The port to listen on (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The address to listen on instead of 127.0.0.1 (a non-loopback address makes the
    /// page reachable from other machines: no authentication, anyone who reaches it
    /// reads the archive).
    #[arg(long)]
    host: Option<IpAddr>,
    /// Open the page in the default browser (xdg-open / open).
    #[arg(long)]
    open: bool,
    /// Write the page as one static HTML file (data embedded, no server) and exit. An
    /// existing FILE is refused unless --force; never the archive being read.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["port", "host", "open"])]
    html: Option<PathBuf>,
    /// With --html: replace FILE if it exists (atomically; never the archive being read).
    #[arg(long, requires = "html")]
    force: bool,
}

const INDEX_HTML: &str = include_str!("../../../assets/view/index.html");
const APP_JS: &str = include_str!("../../../assets/view/app.js");
const APP_CSS: &str = include_str!("../../../assets/view/app.css");

/// The archive the server reads: opened again when the file changed (its length or
/// modification time; for a URL, when the page asks for the tag list).
struct Source {
    path: PathBuf,
    cached: Mutex<Option<(Option<Stamp>, Arc<Archive>)>>,
}

type Stamp = (u64, Option<std::time::SystemTime>);

impl Source {
    fn stamp(&self) -> Option<Stamp> {
        if is_url(&self.path) {
            return None;
        }
        std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.len(), m.modified().ok()))
    }

    /// The archive as it is now; `fresh` re-opens a remote one.
    fn archive(&self, fresh: bool) -> Result<Arc<Archive>, ApiError> {
        let stamp = self.stamp();
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, a)) = cached.as_ref() {
            let same = if is_url(&self.path) {
                !fresh
            } else {
                stamp.is_some() && *seen == stamp
            };
            if same {
                return Ok(Arc::clone(a));
            }
        }
        *cached = None;
        let a = Arc::new(open(&self.path)?);
        *cached = Some((stamp, Arc::clone(&a)));
        Ok(a)
    }
}

type Shared = Arc<Source>;
type Params = Query<HashMap<String, String>>;

fn json_response(status: u16, v: &Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        v.to_string(),
    )
        .into_response()
}

/// Runs `work` on a blocking thread (archive reads block) and answers its document, or
/// `{"error": ...}` with its status; a panic is a 500, not the end of the server.
async fn answer<F>(work: F) -> Response
where
    F: FnOnce() -> Result<Value, ApiError> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(v)) => json_response(200, &v),
        Ok(Err(e)) => json_response(e.status, &json!({"error": e.message})),
        Err(_) => json_response(
            500,
            &json!({"error": "internal error: the request's worker stopped"}),
        ),
    }
}

fn arg(q: &HashMap<String, String>, name: &str) -> Result<String, ApiError> {
    api::check_name(name, q.get(name).map(String::as_str))
}

async fn archive_route(State(s): State<Shared>) -> Response {
    answer(move || {
        let a = s.archive(true)?;
        api::archive_doc(&a, &s.path)
    })
    .await
}

async fn tag_route(State(s): State<Shared>, Query(q): Params) -> Response {
    answer(move || {
        let name = arg(&q, "name")?;
        let a = s.archive(false)?;
        api::tag_doc(&a, &name)
    })
    .await
}

async fn param_route(State(s): State<Shared>, Query(q): Params) -> Response {
    answer(move || {
        let tag = arg(&q, "tag")?;
        let name = arg(&q, "name")?;
        let bins = match q.get("bins") {
            None => 40,
            Some(b) => b
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid bins {b:?}: not a number")))?,
        };
        let a = s.archive(false)?;
        api::param_doc(&a, &tag, &name, bins)
    })
    .await
}

async fn diff_route(State(s): State<Shared>, Query(q): Params) -> Response {
    answer(move || {
        let a = arg(&q, "a")?;
        let b = arg(&q, "b")?;
        let archive = s.archive(false)?;
        api::diff_doc(&archive, &a, &b)
    })
    .await
}

async fn graph_route(State(s): State<Shared>, Query(q): Params) -> Response {
    answer(move || {
        let tag = arg(&q, "tag")?;
        let a = s.archive(false)?;
        api::graph_doc(&a, &tag)
    })
    .await
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Refuses a request whose Host header is not the loopback address the server listens
/// on: a web page elsewhere cannot reach the server through a DNS name rebound to
/// 127.0.0.1 (its requests carry that name). Empty: any host (`--host`).
async fn check_host(
    State(allowed): State<Arc<Vec<String>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !allowed.is_empty() && !allowed.iter().any(|a| a == host) {
        return json_response(
            403,
            &json!({"error": "this server answers requests for 127.0.0.1 or localhost only"}),
        );
    }
    next.run(req).await
}

/// The Host headers [`check_host`] lets through for a server listening on `addr`: the
/// loopback names with the port (a loopback address such as 127.0.0.2 is its own URL's
/// name), and without it on port 80, which browsers leave out of the header. Empty (any
/// host) when `addr` is not a loopback address.
fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    if !addr.ip().is_loopback() {
        return Vec::new();
    }
    let port = addr.port();
    let bound = match addr {
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
        SocketAddr::V4(a) => a.ip().to_string(),
    };
    let mut names = vec!["127.0.0.1", "localhost", "[::1]"];
    if !names.contains(&bound.as_str()) {
        names.push(&bound);
    }
    let mut allowed: Vec<String> = names.iter().map(|h| format!("{h}:{port}")).collect();
    if port == 80 {
        allowed.extend(names.iter().map(|h| h.to_string()));
    }
    allowed
}

async fn not_found() -> Response {
    json_response(
        404,
        &json!({"error": "no such page (the page is /, the API /api/...)"}),
    )
}

/// The page's HTML with its script and style inlined and `data` (the API's answers by
/// request path) embedded: what `--html` writes.
fn static_page(data: &Value) -> String {
    // Every `<` as `\u003c` (JSON's escape; `<` stands only inside strings): `</script`
    // would end the element early, and `<!--<script` from an archive's names would keep
    // the parser in the element past its end, the whole page one broken script. U+2028
    // and U+2029 escaped too, as older JavaScript engines wanted.
    let data = data
        .to_string()
        .replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let js = APP_JS.replace("</script", "<\\/script");
    INDEX_HTML
        .replace(
            r#"<link rel="stylesheet" href="app.css">"#,
            &format!("<style>\n{APP_CSS}\n</style>"),
        )
        .replace(
            r#"<script src="app.js"></script>"#,
            &format!("<script>window.MODELZIP_DATA = {data};</script>\n<script>\n{js}\n</script>"),
        )
}

/// The most tags a static page holds documents for, at each end of the tag list (the
/// page's `MAX_ROWS`: the table lists the first ones, the diff menus the newest ones).
const MAX_PAGE_TAGS: usize = 2000;

/// Every answer the static page can show: the tag list, the parameters and graph of the
/// first and the newest [`MAX_PAGE_TAGS`] tags, the diffs of consecutive tags among the
/// newest. A part that fails is embedded as its error.
fn static_data(archive: &Archive, shown: &Path) -> Result<Value, CliError> {
    let mut m = serde_json::Map::new();
    let doc = api::archive_doc(archive, shown).map_err(|e| CliError::Failed(e.message))?;
    m.insert("api/archive".into(), doc);
    let mut put = |key: String, r: Result<Value, ApiError>| {
        let v = r.unwrap_or_else(|e| json!({"error": e.message}));
        m.insert(key, v);
    };
    // The tags the page can show: the table's first MAX_PAGE_TAGS rows and the diff
    // menus' newest MAX_PAGE_TAGS (the page's MAX_ROWS), not every tag of 60,000.
    let tags: Vec<String> = archive.tags().to_vec();
    let n = tags.len();
    let newest = n.saturating_sub(MAX_PAGE_TAGS);
    let shown = (0..n.min(MAX_PAGE_TAGS)).chain(newest.max(MAX_PAGE_TAGS.min(n))..n);
    // A tensor file or a graph several tags share is described once: a graph's document
    // is embedded for the first tag that has it, the others point at it (`same_as`).
    let mut described = api::Described::new();
    let mut graphs: HashMap<String, String> = HashMap::new();
    for i in shown {
        let t = &tags[i];
        put(
            format!("api/tag?name={}", enc(t)),
            api::tag_doc_with(archive, t, &mut described),
        );
        let key = format!("api/graph?tag={}", enc(t));
        let tag = match api::tag(archive, t) {
            Ok(tag) => tag,
            Err(e) => {
                put(key, Err(e));
                continue;
            }
        };
        match api::graph_entry(archive, &tag) {
            Some(entry) if graphs.contains_key(&entry) => {
                put(key, Ok(json!({"same_as": graphs[&entry], "tag": t})));
            }
            entry => {
                if let Some(entry) = &entry {
                    graphs.insert(entry.clone(), key.clone());
                }
                put(key, api::graph_doc_of(&tag, entry));
            }
        }
    }
    for w in tags[newest..].windows(2) {
        put(
            format!("api/diff?a={}&b={}", enc(&w[0]), enc(&w[1])),
            api::diff_doc(archive, &w[0], &w[1]),
        );
    }
    Ok(Value::Object(m))
}

/// A query value as the page's `encodeURIComponent` writes it.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'!'
            | b'~'
            | b'*'
            | b'\''
            | b'('
            | b')' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Whether `a` and `b` are the same existing file (hard and symbolic links included).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (x.dev(), x.ino()) == (y.dev(), y.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (x, y);
        matches!((a.canonicalize(), b.canonicalize()), (Ok(p), Ok(q)) if p == q)
    }
}

/// Refuses `--html FILE` where the page may not go: the archive being read (even with
/// --force), a directory, or an existing file without --force.
fn refuse_html_target(args: &Args, file: &Path) -> Result<(), CliError> {
    let cannot = format!("cannot write {}", file.display());
    if !is_url(&args.archive) && same_file(&args.archive, file) {
        return Err(CliError::Failed(format!(
            "{cannot}: it is the archive being read ({}); refusing to replace it with the page, even with --force",
            args.archive.display()
        )));
    }
    match std::fs::symlink_metadata(file) {
        Ok(m) if m.is_dir() => Err(CliError::Failed(format!(
            "{cannot}: it is a directory; give a file path"
        ))),
        Ok(_) if !args.force => Err(CliError::Failed(format!(
            "{cannot}: the file exists; pass --force to replace it"
        ))),
        _ => Ok(()),
    }
}

/// Writes `page` to `file` durably: a temp file beside it (`.NAME.XXXXXX.tmp`, removed on
/// failure), fsynced, renamed into place (over an existing file only with `force`; the
/// temp file is not renamed over a file that appeared meanwhile otherwise), and the
/// directory fsynced.
fn write_page(file: &Path, page: &[u8], force: bool) -> Result<(), CliError> {
    use std::io::Write;
    let failed =
        |e: std::io::Error| CliError::Failed(format!("cannot write {}: {e}", file.display()));
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // As a plain create would make it (the umask applies), not tempfile's 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut temp = builder.tempfile_in(&dir).map_err(failed)?;
    temp.write_all(page)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(failed)?;
    let persisted = if force {
        temp.persist(file)
    } else {
        temp.persist_noclobber(file)
    };
    persisted.map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            CliError::Failed(format!(
                "cannot write {}: the file exists; pass --force to replace it",
                file.display()
            ))
        } else {
            failed(e.error)
        }
    })?;
    #[cfg(unix)]
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CliError::Failed(format!("cannot sync {}: {e}", dir.display())))?;
    Ok(())
}

fn write_html(args: &Args, file: &Path) -> Result<Outcome, CliError> {
    refuse_html_target(args, file)?;
    let archive = open(&args.archive)?;
    let page = static_page(&static_data(&archive, &args.archive)?);
    write_page(file, page.as_bytes(), args.force)?;
    print(&format!(
        "wrote {} ({} tags of {})\n",
        file.display(),
        archive.tags().len(),
        args.archive.display()
    ))?;
    Ok(Outcome::Success)
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    if let Some(file) = &args.html {
        return write_html(&args, file);
    }
    // An IPv4-mapped address (`::ffff:127.0.0.1`) is the IPv4 address it maps: bound as
    // such, and a loopback one keeps the Host-header check.
    let host = args
        .host
        .map(|h| h.to_canonical())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the web server: {e}")))?;
    let source = Arc::new(Source {
        path: args.archive.clone(),
        cached: Mutex::new(None),
    });
    let router = axum::Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route("/api/archive", get(archive_route))
        .route("/api/tag", get(tag_route))
        .route("/api/param", get(param_route))
        .route("/api/diff", get(diff_route))
        .route("/api/graph", get(graph_route))
        .fallback(not_found)
        .with_state(source);
    if !host.is_loopback() {
        // Said before binding, so that it is seen even when the bind fails.
        eprintln!(
            "modelzip view: WARNING: --host {host} is not a loopback address: anyone who can \
             reach this machine on the port printed below can read {} (no authentication, \
             no TLS)",
            args.archive.display()
        );
    }
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(host, args.port))
            .await
            .map_err(|e| {
                CliError::Failed(format!("cannot listen on {host} port {}: {e}", args.port))
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| CliError::Failed(format!("cannot listen on {host}: {e}")))?;
        let allowed = allowed_hosts(addr);
        let app = router.layer(axum::middleware::from_fn_with_state(
            Arc::new(allowed),
            check_host,
        ));
        let url = match addr {
            SocketAddr::V6(a) => format!("http://[{}]:{}/", a.ip(), a.port()),
            SocketAddr::V4(a) => format!("http://{a}/"),
        };
        print(&format!(
            "modelzip view: {} at {url} (Ctrl-C stops)\n",
            args.archive.display()
        ))?;
        if args.open {
            let opener = if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            };
            if let Err(e) = std::process::Command::new(opener).arg(&url).spawn() {
                eprintln!("modelzip view: cannot open a browser ({opener}: {e}); open {url}");
            }
        }
        axum::serve(listener, app)
            .await
            .map_err(|e| CliError::Failed(format!("the web server stopped: {e}")))
    })?;
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::allowed_hosts;

    #[test]
    fn host_names_allowed_carry_the_port_but_on_port_80() {
        let at = |a: &str| allowed_hosts(a.parse().unwrap());
        assert_eq!(
            at("127.0.0.1:8080"),
            ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"]
        );
        assert_eq!(
            at("127.0.0.2:80"),
            [
                "127.0.0.1:80",
                "localhost:80",
                "[::1]:80",
                "127.0.0.2:80",
                "127.0.0.1",
                "localhost",
                "[::1]",
                "127.0.0.2"
            ]
        );
        assert_eq!(
            at("[::1]:9000"),
            ["127.0.0.1:9000", "localhost:9000", "[::1]:9000"]
        );
        assert!(at("192.0.2.1:80").is_empty());
    }
}
