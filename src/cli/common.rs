//! Helpers the archive commands share: their common arguments, opening with a clear
//! error, tensor JSON.

use super::CliError;
use super::progress::Progress;
use modelzip::TensorView;
use modelzip::WriteOptions;
use modelzip::sha256_hex;
use modelzip::{Archive, Tag, TensorLocation};
use std::path::{Path, PathBuf};

/// The archive and the tag a reading command works on (`ARCHIVE [--tag TAG]`).
#[derive(clap::Args, Debug, Clone)]
pub struct TagArgs {
    /// The archive.
    pub archive: PathBuf,
    /// The tag (ignoring case); default: the newest.
    #[arg(long)]
    pub tag: Option<String>,
}

impl TagArgs {
    /// Opens the archive (see [`open`]).
    pub fn open(&self) -> Result<Archive, CliError> {
        open(&self.archive)
    }

    /// The tag of `archive` these arguments name (see [`pick_tag`]).
    pub fn pick<'a>(&self, archive: &'a Archive) -> Result<Tag<'a>, CliError> {
        pick_tag(archive, self.tag.as_deref())
    }
}

/// The archive and `--json` of a command that reports on a whole archive (`tags`,
/// `verify`).
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// The archive.
    pub archive: PathBuf,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// How a command that reports an action prints: `--json` or `-q/--quiet`, which exclude
/// each other (docs/CLI.md). A command whose `--json` lists the document's fields says so
/// with `mut_arg("json", ...)`.
#[derive(clap::Args, Debug, Clone)]
pub struct OutputArgs {
    /// Print one JSON document instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Print nothing on success (and no progress bar).
    #[arg(short, long, conflicts_with = "json")]
    pub quiet: bool,
}

impl OutputArgs {
    /// A progress bar labelled `what`, hidden with `--json` or `--quiet`.
    pub fn progress(&self, what: &str) -> Progress {
        Progress::new(self.quiet || self.json, what)
    }
}

/// The switches of every command that writes an archive: `--wait`, `--json`, `--quiet`.
#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {
    /// Wait for another writer to finish instead of failing.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl WriteArgs {
    /// The write options these switches ask for.
    pub fn options(&self) -> WriteOptions {
        WriteOptions {
            wait_for_lock: self.wait,
            ..WriteOptions::default()
        }
    }

    /// [`WriteArgs::options`], reporting progress to `progress`.
    pub fn options_reporting(&self, progress: &Progress) -> WriteOptions {
        WriteOptions {
            progress: progress.hook(),
            ..self.options()
        }
    }
}

/// Refuses an archive path that is a directory, as `<what failed>: the archive path is
/// a directory, not a file` (the OS's own answer, from mapping it, is "No such
/// device"). `what_failed` names the path.
pub fn refuse_directory(path: &Path, what_failed: &str) -> Result<(), CliError> {
    if is_url(path) {
        // Reached only by commands that write: object stores cannot append or rewrite.
        return Err(CliError::Failed(format!(
            "{what_failed}: a remote archive cannot be written in place; write a local archive and upload it with `modelzip cp LOCAL URL`"
        )));
    }
    if path.is_dir() {
        return Err(CliError::Failed(format!(
            "{what_failed}: the archive path is a directory, not a file"
        )));
    }
    Ok(())
}

/// The directory the archive's file is in, every symlink resolved (for a new archive,
/// its parent directory's canonical path); None when that cannot be resolved.
pub fn archive_dir(archive: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(archive)
        .ok()
        .and_then(|real| real.parent().map(Path::to_path_buf))
        .or_else(|| {
            let parent = match archive.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            std::fs::canonicalize(parent).ok()
        })
}

/// Refuses a Paddle persistables-directory import without a model (every regular file
/// directly in `dir` is a parameter) into an archive that lies directly in `dir`: the
/// archive and its lock file would be read as tensor files (the first import worked, the
/// next failed with "unsupported LoDTensor version 67324752"). With a model (`model`, or
/// DIR/__model__ or DIR/graph.fb) only the model's variables are read; a directory
/// holding a `.pdiparams` is an inference model (or refused as ambiguous) and no other
/// file of it is read.
pub fn refuse_archive_in_modelless_dir(
    archive: &Path,
    dir: &Path,
    model: Option<&Path>,
    what_failed: &str,
) -> Result<(), CliError> {
    if model.is_some()
        || !dir.is_dir()
        || dir.join("__model__").exists()
        || dir.join("graph.fb").exists()
        || holds_pdiparams(dir)
    {
        return Ok(());
    }
    let Ok(dir_real) = std::fs::canonicalize(dir) else {
        return Ok(());
    };
    if archive_dir(archive).is_some_and(|a| a == dir_real) {
        return Err(CliError::Failed(format!(
            "{what_failed}: the archive is in {}, whose every file is read as a parameter (no model given), so the archive and its .lock file would be too; write the archive outside the directory",
            dir.display()
        )));
    }
    Ok(())
}

/// Whether a regular file directly in `dir` is named `*.pdiparams`.
fn holds_pdiparams(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            let p = e.path();
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x.eq_ignore_ascii_case("pdiparams"))
        })
    })
}

/// [`refuse_directory`], then refuses an archive that does not exist, for the commands
/// that change an existing archive (`rm`, `prune`, `compact`, `convert`, `quantize`,
/// `cast`): before the write lock is taken, so a mistyped path leaves no `ARCHIVE.lock`
/// behind. An existing file that is not a zip archive is refused then too
/// ([`refuse_non_archive`]).
pub fn require_archive(path: &Path, what_failed: &str) -> Result<(), CliError> {
    refuse_directory(path, what_failed)?;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(CliError::Failed(format!("{what_failed}: {e}")))
        }
        _ => refuse_non_archive(path, what_failed),
    }
}

/// Refuses an existing file at the archive path that does not start as a zip archive
/// does, before the write lock is taken: a writer that found it under the lock left
/// `ARCHIVE.lock` beside a file that is no archive. The error is the one the write
/// would give (the reader's, e.g. `bad zip: no end-of-central-directory record`).
///
/// Only the first four bytes decide, which no writer ever changes (a new or rewritten
/// archive is renamed into place whole; an append writes past them), so a writer
/// running meanwhile cannot make a good archive look bad here. Anything wrong further
/// in is still found under the lock. A missing path, or one that cannot be read, is
/// left to the write to report.
pub fn refuse_non_archive(path: &Path, what_failed: &str) -> Result<(), CliError> {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(());
    };
    let mut head = Vec::with_capacity(4);
    if file.take(4).read_to_end(&mut head).is_err() {
        return Ok(());
    }
    // A local file header, or the end record of an archive with no entries.
    if head == b"PK\x03\x04" || head == b"PK\x05\x06" {
        return Ok(());
    }
    match modelzip::Archive::open(path) {
        Err(e) => Err(CliError::Failed(format!("{what_failed}: {e}"))),
        // Data before the first entry (e.g. a self-extracting stub) the reader accepts.
        Ok(_) => Ok(()),
    }
}

/// Refuses an input path that does not exist, as the import would (`what_failed: No
/// such file or directory (os error 2) (file PATH)`), but before the archive's write
/// lock is taken: a mistyped input leaves no `ARCHIVE.lock` behind.
pub fn require_inputs<'a>(
    inputs: impl IntoIterator<Item = &'a Path>,
    what_failed: &str,
) -> Result<(), CliError> {
    for p in inputs {
        if let Err(e) = std::fs::metadata(p)
            && e.kind() == std::io::ErrorKind::NotFound
        {
            return Err(CliError::Failed(format!(
                "{what_failed}: {e} (file {})",
                p.display()
            )));
        }
    }
    Ok(())
}

/// True when the archive argument is a URL (`s3://`, `gs://`, `az://`, `http(s)://`,
/// `file://`) rather than a local path.
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(modelzip::remote::is_url)
}

/// The fields a remote write adds to a command's `--json` document (docs/REMOTE.md):
/// the versions before and after, and what the commit cost.
pub fn remote_write_fields(
    done: &modelzip::remote::RemoteWrite,
) -> serde_json::Map<String, serde_json::Value> {
    serde_json::Map::from_iter([
        ("version".to_string(), serde_json::json!(done.version)),
        (
            "previous_version".to_string(),
            serde_json::json!(done.previous_version),
        ),
        (
            "bytes_uploaded".to_string(),
            serde_json::json!(done.bytes_uploaded),
        ),
        (
            "bytes_copied".to_string(),
            serde_json::json!(done.bytes_copied),
        ),
        (
            "bytes_reread".to_string(),
            serde_json::json!(done.bytes_reread),
        ),
        ("requests".to_string(), serde_json::json!(done.requests)),
        (
            "stale_uploads_aborted".to_string(),
            serde_json::json!(done.stale_uploads_aborted),
        ),
    ])
}

/// `doc` (a JSON object) with [`remote_write_fields`] of `done`, when a remote write
/// happened.
pub fn with_remote(
    mut doc: serde_json::Value,
    done: Option<&modelzip::remote::RemoteWrite>,
) -> serde_json::Value {
    if let (Some(done), serde_json::Value::Object(m)) = (done, &mut doc) {
        m.extend(remote_write_fields(done));
    }
    doc
}

/// `"; N bytes uploaded, M copied by the store, K requests"` for a remote write (what
/// a command's line ends with), empty for a local one.
pub fn remote_cost(done: Option<&modelzip::remote::RemoteWrite>) -> String {
    done.map_or(String::new(), |d| {
        format!(
            "; {} bytes uploaded, {} copied by the store, {} requests",
            d.bytes_uploaded, d.bytes_copied, d.requests
        )
    })
}

/// Opens an archive (a local path, or a URL read by byte ranges with the store settings
/// of the environment), turning a failure into `cannot open PATH: why`.
pub fn open(path: &Path) -> Result<Archive, CliError> {
    if let Some(url) = path.to_str().filter(|_| is_url(path)) {
        let archive = modelzip::remote::RemoteOptions::default()
            .open(url)
            .map_err(|e| CliError::Failed(format!("cannot open {url}: {e}")))?;
        let seen = (
            url.to_string(),
            archive.remote_version().map(str::to_string),
        );
        *OPENED_REMOTE.lock().unwrap_or_else(|p| p.into_inner()) = Some(seen);
        return Ok(archive);
    }
    refuse_directory(path, &format!("cannot open {}", path.display()))?;
    Archive::open(path)
        .map_err(|e| CliError::Failed(format!("cannot open {}: {e}", path.display())))
}

/// The remote archive last opened: its URL and the version (ETag) read.
static OPENED_REMOTE: std::sync::Mutex<Option<(String, Option<String>)>> =
    std::sync::Mutex::new(None);

/// Runs a reading command; if it failed before printing anything and the remote object
/// it read has been replaced since it was opened (its ETag differs now: the failure may
/// be [`modelzip::ErrorKind::RemoteChanged`] or what a half-read new version looks like),
/// runs it once more, opening the new version: its output is all of one version or none.
pub fn reopen_once_if_changed(
    run: impl Fn() -> Result<super::Outcome, CliError>,
) -> Result<super::Outcome, CliError> {
    let first = run();
    if !matches!(first, Err(CliError::Failed(_))) || super::output::started() {
        return first;
    }
    let opened = OPENED_REMOTE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let Some((url, Some(seen))) = opened else {
        return first;
    };
    match modelzip::remote::remote_version(&url, &modelzip::remote::RemoteOptions::default()) {
        Ok(Some(now)) if now != seen => run(),
        _ => first,
    }
}

/// The tag named `name`, or the default (newest) tag.
pub fn pick_tag<'a>(archive: &'a Archive, name: Option<&str>) -> Result<Tag<'a>, CliError> {
    match name {
        Some(n) => archive
            .tag(n)
            .map_err(|e| CliError::Failed(format!("cannot read tag {n}: {e}"))),
        None => archive.latest().map_err(|e| match archive.default_tag() {
            Some(t) => CliError::Failed(format!("cannot read tag {t} (the newest): {e}")),
            None => CliError::Failed(format!("cannot read the newest tag: {e}")),
        }),
    }
}

/// Turns a library error about tag `tag` into `cannot read tag TAG: why`.
pub fn tag_err(tag: &str) -> impl Fn(modelzip::Error) -> CliError + '_ {
    move |e| CliError::Failed(format!("cannot read tag {tag}: {e}"))
}

/// What `show` says of one tensor file, computed once per file however many names
/// refer to it.
pub struct TensorInfo {
    pub dtype: modelzip::DType,
    pub dims: Vec<u64>,
    pub lod: Vec<Vec<u64>>,
    pub data_sha256: String,
}

impl TensorInfo {
    pub fn of(t: &TensorView<'_>) -> TensorInfo {
        TensorInfo {
            dtype: t.dtype(),
            dims: t.dims().to_vec(),
            lod: t.lod().clone(),
            data_sha256: sha256_hex(t.data()),
        }
    }
}

/// The JSON description of a stored tensor (the shape `show --json` documents), written
/// as it is serialized: `{name?, dtype, dtype_code, dims, lod, entry, shared_from,
/// data_sha256}`.
pub struct TensorJson<'a> {
    pub name: Option<&'a str>,
    pub loc: &'a TensorLocation,
    pub info: &'a TensorInfo,
}

impl serde::Serialize for TensorJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        if let Some(n) = self.name {
            m.serialize_entry("name", n)?;
        }
        m.serialize_entry("dtype", self.info.dtype.name())?;
        m.serialize_entry("dtype_code", &self.info.dtype.code())?;
        m.serialize_entry("dims", &self.info.dims)?;
        m.serialize_entry("lod", &self.info.lod)?;
        m.serialize_entry("entry", self.loc.entry())?;
        let shared = self.loc.shared.then_some(self.loc.tag());
        m.serialize_entry("shared_from", &shared)?;
        m.serialize_entry("data_sha256", &self.info.data_sha256)?;
        m.end()
    }
}

/// Leaves `archive` for the process's exit to free: freeing a directory of 100,000
/// entries took 1.8 ms of the 19 that `tags` took (docs/BENCHMARKS.md, P5). Test builds
/// asked for the work report drop it, as the report is made by the drop.
pub fn free_at_exit(archive: Archive) {
    #[cfg(feature = "test-internals")]
    if std::env::var_os("MODELZIP_TEST_WORK").is_some() {
        drop(archive);
        return;
    }
    std::mem::forget(archive);
}
