//! A tag written out as files: a Paddle persistables directory, safely.
//!
//! [`extract`] writes one LoDTensor file per parameter, named by the parameter name (a
//! `/` in the name makes a subdirectory), plus the graph: `__model__` for a ProgramDesc
//! (the name Paddle's `load_inference_model` looks for in a directory) or `graph.fb`.
//! `modelzip pack` (and [`crate::interop`]'s persistables import) reads the directory back
//! as the same tag; updater state is not extracted.
//!
//! The guarantees (the CLI's `modelzip extract` is a thin wrapper of this):
//!
//! - **Nothing outside the output directory.** A parameter name that is absolute, has a
//!   drive letter, a backslash, a NUL or an empty, `.` or `..` component is refused
//!   before anything is written; symlinks are never followed or created; names that
//!   collide (a file where another name needs a directory) are refused.
//! - **Limits before writing.** The files and bytes it would write are added up first
//!   (each tensor file decoded once, however many names share it) and refused above
//!   [`ExtractOptions::max_files`] / [`ExtractOptions::max_output`]: many names may
//!   share one tensor file, so a small archive can describe a large directory.
//! - **No overwriting** of an existing file unless [`ExtractOptions::force`], and never
//!   the archive being read.
//! - **Never a partial file.** Every name is written (or hard-linked) under a temporary
//!   name in its directory (`.modelzip-extract.PID.N`, `.modelzip-link.PID.N`); only
//!   when all are written and durable are they renamed to their names (with `force`,
//!   over what is there, atomically; without it, only where nothing is). So at any
//!   instant, a crash included, each name holds either what it held before or the
//!   complete new file.
//! - **Nothing left on failure.** The temporaries, and the files, links and directories
//!   it created, are removed again (the output directory too, when it created it). A
//!   failure before the renames (nearly all: a write, a name in the way, a limit)
//!   changes no existing file; one during them leaves the files already renamed over
//!   existing ones (`force`) as their complete new versions. A killed extract cannot
//!   clean up: it leaves its temporaries, which the next `force` extract into that
//!   directory deletes.
//! - **Durable on success.** The files are fsynced before they are renamed, their
//!   directories after (from many threads, or one `syncfs` on Linux for 1,000 files and
//!   more).
//!
//! With [`ExtractOptions::link`], a name whose tensor file was already written is a hard
//! link to that first file instead of a copy (no bytes and no inode per alias); where a
//! link cannot be made (another filesystem, the filesystem's limit of links per file)
//! the name is a copy.
//!
//! ```no_run
//! use modelzip::{Archive, extract::{ExtractOptions, extract}};
//!
//! let archive = Archive::open("model.zip")?;
//! let report = extract(&archive.tag("fp32")?, "fp32_params", &ExtractOptions::default())?;
//! println!("{} files in {}", report.files, report.out.display());
//! # Ok::<(), modelzip::Error>(())
//! ```

use crate::archive::{GraphFormat, Tag};
use crate::error::{Error, ErrorKind, Result};
use crate::keyed::{KeyedMap, KeyedSet};
use crate::tensor;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Files [`extract`] writes at most unless [`ExtractOptions::max_files`] says otherwise.
pub const DEFAULT_MAX_FILES: u64 = 100_000;

/// [`ErrorKind::LimitExceeded`]'s `what` when an extract would write more files than
/// [`ExtractOptions::max_files`].
pub const FILES_LIMIT: &str = "files to extract";

/// [`ErrorKind::LimitExceeded`]'s `what` when an extract would write more bytes than
/// [`ExtractOptions::max_output`].
pub const BYTES_LIMIT: &str = "bytes to extract";

/// How [`extract`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractOptions {
    /// Replace existing files (atomically: every file or link is made under a
    /// temporary name in the same directory, then renamed over it); never the archive
    /// being read, nor a directory. Also deletes the temporaries a killed extract left
    /// there (`.modelzip-extract.PID.N`, `.modelzip-link.PID.N`, their process gone or
    /// 15 minutes old).
    pub force: bool,
    /// Make every further name of an already written tensor file a hard link to the
    /// first file written for it, not a copy.
    pub link: bool,
    /// Refuse to write more than this many bytes in all; `None`: 16 GiB or 100 times
    /// the archive's size, whichever is larger.
    /// With `link`, only the distinct files count (a copy made where a link cannot be is
    /// counted when made).
    pub max_output: Option<u64>,
    /// Refuse to write more than this many files (every name counts, links included).
    pub max_files: u64,
}

impl Default for ExtractOptions {
    fn default() -> Self {
        ExtractOptions {
            force: false,
            link: false,
            max_output: None,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// What [`extract`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractReport {
    /// The tag's name.
    pub tag: String,
    /// The output directory.
    pub out: PathBuf,
    /// The graph's file name (`__model__` or `graph.fb`), when the tag has a graph.
    pub graph_file: Option<&'static str>,
    /// The relative paths written: the graph file first, then one per parameter in
    /// params.txt order (a parameter's path is its name).
    pub paths: Vec<String>,
    /// Files written (the graph and every parameter name, links included).
    pub files: u64,
    /// Names written as hard links ([`ExtractOptions::link`]).
    pub links: usize,
    /// Bytes written (links add none).
    pub bytes: u64,
}

/// An error that is not the operating system's: invalid input or a refusal.
fn fail(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput(msg))
}

/// An I/O error `e` with `msg` (which names the path), keeping `e`'s kind.
fn io_fail(e: &std::io::Error, msg: String) -> Error {
    Error::from(std::io::Error::new(e.kind(), msg))
}

/// A file in the way of a new one, without `force`.
fn exists(path: &Path) -> Error {
    Error::from(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("cannot write {}: the file exists", path.display()),
    ))
}

/// The relative path for a parameter name of tag `tag`, or why it cannot be one.
fn safe_relative(tag: &str, name: &str) -> Result<PathBuf> {
    let refuse = |why: &str| {
        fail(format!(
            "cannot extract tag {tag}: refusing to extract parameter {name:?}: {why} (entry {tag}/params.txt)"
        ))
    };
    if name.starts_with('/') {
        return Err(refuse("absolute path"));
    }
    if name.contains('\\') || name.contains('\0') {
        return Err(refuse("backslash or NUL in the name"));
    }
    let bytes = name.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err(refuse("drive letter"));
    }
    let mut out = PathBuf::new();
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(refuse("empty, `.` or `..` path component"));
        }
        out.push(part);
    }
    Ok(out)
}

/// Creates the directories of `rel` under `root`, refusing symlinks on the way.
fn make_parents(root: &Path, rel: &Path, created: &mut Vec<PathBuf>) -> Result<()> {
    let mut dir = root.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for c in parents {
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(fail(format!(
                    "cannot create directory {}: something that is not a directory is in the way (symlinks are never followed)",
                    dir.display()
                )));
            }
            Err(_) => {
                std::fs::create_dir(&dir)
                    .map_err(|e| io_fail(&e, format!("cannot create {}: {e}", dir.display())))?;
                created.push(dir.clone());
            }
        }
    }
    Ok(())
}

/// Prefix of the temporary name every file is written under before it is renamed into
/// place (`.modelzip-extract.PID.N`).
const FILE_TEMP_PREFIX: &str = ".modelzip-extract.";

/// Prefix of the temporary name every hard link ([`ExtractOptions::link`]) is made
/// under before it is renamed into place (`.modelzip-link.PID.N`).
const LINK_TEMP_PREFIX: &str = ".modelzip-link.";

/// A name this extract made under a temporary name, to be renamed to its destination
/// once every file is written and durable.
struct Staged {
    /// The temporary name (`.modelzip-extract.PID.N` or `.modelzip-link.PID.N`) in the
    /// destination's directory.
    temp: PathBuf,
    /// Where it goes.
    dest: PathBuf,
    /// Whether something (a file or a symlink, `force` only) was at `dest` when it was
    /// checked: a failed extract leaves what it renamed over such a name, and removes
    /// the names it created.
    existed: bool,
    /// A hard link to an earlier staged file, not a file of its own.
    link: bool,
}

/// Whether something is at `path` (a symlink is not followed), refusing what may not be
/// replaced: anything without `force`, a directory with it.
fn check_destination(path: &Path, force: bool) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) if !force => Err(exists(path)),
        Ok(m) if m.is_dir() => Err(fail(format!(
            "cannot write {}: a directory is in the way",
            path.display()
        ))),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_fail(
            &e,
            format!("cannot create {}: {e}", path.display()),
        )),
    }
}

/// Makes a new temporary name `PREFIX PID.N` in `path`'s directory with `make` (which
/// must fail with `AlreadyExists` on a name that is taken, never following it), trying
/// the next `N` when one is taken.
fn temp_beside<T>(
    path: &Path,
    prefix: &str,
    seq: &mut u64,
    mut make: impl FnMut(&Path) -> std::io::Result<T>,
) -> std::io::Result<(PathBuf, T)> {
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut attempts = 0;
    loop {
        let temp = dir.join(format!("{prefix}{}.{}", std::process::id(), *seq));
        *seq += 1;
        match make(&temp) {
            Ok(v) => return Ok((temp, v)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 100 => {
                attempts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates the temporary file that becomes `path` (create-exclusive: nothing in the way
/// is followed or replaced).
fn create_temp_file(path: &Path, seq: &mut u64) -> Result<(PathBuf, File)> {
    temp_beside(path, FILE_TEMP_PREFIX, seq, |t| {
        OpenOptions::new().write(true).create_new(true).open(t)
    })
    .map_err(|e| {
        io_fail(
            &e,
            format!("cannot create a temporary file for {}: {e}", path.display()),
        )
    })
}

/// Creates the temporary file that becomes `path` ([`create_temp_file`]) and records it
/// in `staged` (`existed`: something was at `path` when it was checked).
fn stage_file(path: &Path, existed: bool, seq: &mut u64, staged: &mut Vec<Staged>) -> Result<File> {
    let (temp, f) = create_temp_file(path, seq)?;
    staged.push(Staged {
        temp,
        dest: path.to_path_buf(),
        existed,
        link: false,
    });
    Ok(f)
}

/// Makes a temporary hard link, beside `path`, to `src` (a temporary file this extract
/// wrote for `src_dest`). `Ok(None)` when the link cannot be made where a copy could
/// ([`link_unavailable`]): the caller writes a copy.
fn link_temp(src: &Path, src_dest: &Path, path: &Path, seq: &mut u64) -> Result<Option<PathBuf>> {
    match temp_beside(path, LINK_TEMP_PREFIX, seq, |t| std::fs::hard_link(src, t)) {
        Ok((temp, ())) => Ok(Some(temp)),
        Err(e) if link_unavailable(&e) => Ok(None),
        Err(e) => Err(io_fail(
            &e,
            format!(
                "cannot link {} to {}: {e}",
                path.display(),
                src_dest.display()
            ),
        )),
    }
}

/// Renames `s` to its destination: over what is there with `force`, otherwise only if
/// nothing is (`renameat2(RENAME_NOREPLACE)`, or a hard link and an unlink where the
/// filesystem lacks it), so a name that appeared since it was checked is not replaced.
fn place(s: &Staged, force: bool) -> Result<()> {
    let done = if force {
        std::fs::rename(&s.temp, &s.dest)
    } else {
        tempfile::TempPath::try_from_path(&s.temp).and_then(|t| {
            t.persist_noclobber(&s.dest).map_err(|e| {
                // Not deleted here: the caller removes what is left of a failed extract.
                let _ = e.path.keep();
                e.error
            })
        })
    };
    done.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            exists(&s.dest)
        } else {
            io_fail(
                &e,
                format!(
                    "cannot rename {} to {}: {e}",
                    s.temp.display(),
                    s.dest.display()
                ),
            )
        }
    })
}

/// How long a temporary (`.modelzip-extract.PID.N`, `.modelzip-link.PID.N`) whose
/// process may still be running (its PID is a live process, or cannot be checked) is
/// left alone by a later `extract --force`.
const LEFTOVER_GRACE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The PID in a temporary name `.modelzip-extract.PID.N` ([`create_temp_file`]) or
/// `.modelzip-link.PID.N` ([`link_temp`]), or `None` for any other name.
fn leftover_pid(name: &std::ffi::OsStr) -> Option<u32> {
    let name = name.to_str()?;
    let rest = name
        .strip_prefix(FILE_TEMP_PREFIX)
        .or_else(|| name.strip_prefix(LINK_TEMP_PREFIX))?;
    let (pid, seq) = rest.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(seq) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` is running on this machine: `Some(false)` only when it surely
/// is not (Linux: no `/proc/PID` while `/proc` is mounted), `None` when it cannot be told.
fn pid_is_live(pid: u32) -> Option<bool> {
    if pid == std::process::id() {
        return Some(true);
    }
    if cfg!(target_os = "linux") && Path::new("/proc/self").exists() {
        match std::fs::symlink_metadata(format!("/proc/{pid}")) {
            Ok(_) => return Some(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(false),
            Err(_) => return None,
        }
    }
    None
}

/// Whether a temporary of process `pid` (`live`: [`pid_is_live`]), last written, linked
/// or unlinked `age` ago (`None`: unknown), is a leftover safe to delete: its process is
/// gone, or it is older than [`LEFTOVER_GRACE`].
fn leftover_removable(live: Option<bool>, age: Option<std::time::Duration>) -> bool {
    live == Some(false) || age.is_some_and(|a| a > LEFTOVER_GRACE)
}

/// Deletes from `dir` the temporaries a killed extract left (every name is written or
/// linked under `.modelzip-extract.PID.N` or `.modelzip-link.PID.N`, then renamed to its
/// destination: killed in between, they stay) when [`leftover_removable`]. Only regular
/// files of those names; best effort (what cannot be read or deleted stays, and the
/// extract goes on). Returns how many it deleted.
fn remove_leftovers(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let Some(pid) = leftover_pid(&e.file_name()) else {
            continue;
        };
        // Not followed: a symlink or directory of that name is not ours.
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !m.file_type().is_file() {
            continue;
        }
        // The inode's change time: set by every link and unlink of the file, so a link
        // just made by a live extract is young even when its file was written long ago.
        #[cfg(unix)]
        let changed = {
            use std::os::unix::fs::MetadataExt;
            u64::try_from(m.ctime())
                .ok()
                .map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s))
        };
        #[cfg(not(unix))]
        let changed = m.modified().ok();
        let age = changed.and_then(|t| std::time::SystemTime::now().duration_since(t).ok());
        if leftover_removable(pid_is_live(pid), age) && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether a failed `hard_link` means "no link here" rather than a failure: another
/// filesystem (EXDEV), too many links to the file (EMLINK; 65,000 on ext4), links not
/// supported or not permitted by the filesystem (EPERM, EOPNOTSUPP, ENOSYS). A copy
/// is written instead; if the directory itself refuses it, that write says why.
fn link_unavailable(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    if matches!(
        e.kind(),
        K::CrossesDevices | K::TooManyLinks | K::Unsupported | K::PermissionDenied
    ) {
        return true;
    }
    #[cfg(target_os = "linux")]
    if let Some(code) = e.raw_os_error() {
        return code == rustix::io::Errno::OPNOTSUPP.raw_os_error();
    }
    false
}

/// Creates `out` and any missing parents, returning the directories it created
/// (outermost first), so a failed extract can remove them again.
fn create_out_dir(out: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut dir = out;
    loop {
        match std::fs::symlink_metadata(dir) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(dir.to_path_buf());
                match dir.parent() {
                    Some(p) if !p.as_os_str().is_empty() => dir = p,
                    _ => break,
                }
            }
            Err(e) => {
                return Err(io_fail(&e, format!("cannot create {}: {e}", dir.display())));
            }
        }
    }
    missing.reverse();
    let mut created = Vec::new();
    for d in missing {
        if let Err(e) = std::fs::create_dir(&d) {
            remove_dirs(&created);
            return Err(io_fail(&e, format!("cannot create {}: {e}", d.display())));
        }
        created.push(d);
    }
    match std::fs::metadata(out) {
        Ok(m) if m.is_dir() => Ok(created),
        _ => Err(fail(format!(
            "cannot extract to {}: not a directory",
            out.display()
        ))),
    }
}

/// Removes the (empty) directories, innermost first.
fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}

/// Makes `files`, the hard links `links` (names of some of `files`) and `dirs` durable:
/// many names (at least [`SYNCFS_FILES`]) on Linux with one `syncfs` per filesystem
/// that holds them (measured on 200,000 files: one call instead of 600,000 opens,
/// fsyncs and closes), otherwise with [`sync_all_parallel`] of the files, then (when
/// `with_dirs`) of `dirs` and every directory that holds a file or a link (a link is
/// only a directory entry).
fn sync_output(
    files: &[PathBuf],
    links: &[PathBuf],
    dirs: &[PathBuf],
    with_dirs: bool,
) -> Result<()> {
    #[cfg(target_os = "linux")]
    if files.len() + links.len() >= SYNCFS_FILES {
        use std::os::unix::fs::MetadataExt;
        // Every directory that holds one of the files or directories: usually one or a
        // few, each on its filesystem (a directory in the way may be a mount point).
        let mut holders: KeyedSet<&Path> = KeyedSet::default();
        holders.extend(
            files
                .iter()
                .chain(links)
                .chain(dirs)
                .filter_map(|p| p.parent()),
        );
        holders.extend(dirs.iter().map(PathBuf::as_path));
        let mut synced = KeyedSet::default();
        for d in holders {
            let d = if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            };
            let failed =
                |e: std::io::Error| io_fail(&e, format!("cannot sync {}: {e}", d.display()));
            let f = File::open(d).map_err(failed)?;
            if synced.insert(f.metadata().map_err(failed)?.dev()) {
                rustix::fs::syncfs(&f).map_err(|e| failed(e.into()))?;
            }
        }
        return Ok(());
    }
    if !with_dirs {
        return sync_all_parallel(files, &[]);
    }
    let mut seen: KeyedSet<&Path> = KeyedSet::default();
    let mut all_dirs: Vec<PathBuf> = Vec::new();
    let holders = files.iter().chain(links).filter_map(|p| p.parent());
    for d in dirs.iter().map(PathBuf::as_path).chain(holders) {
        if seen.insert(d) {
            all_dirs.push(if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d.to_path_buf()
            });
        }
    }
    sync_all_parallel(files, &all_dirs)
}

/// Fsyncs `files` (and then `dirs`) from several threads at once: one fsync after
/// another would cost a journal commit each (200,000 files took over a minute), while
/// concurrent ones share commits.
fn sync_all_parallel(files: &[PathBuf], dirs: &[PathBuf]) -> Result<()> {
    let sync = |paths: &[PathBuf]| -> Result<()> {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = paths.len().clamp(1, SYNC_THREADS);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(p) = paths.get(i) else {
                                return Ok(());
                            };
                            File::open(p).and_then(|f| f.sync_all()).map_err(|e| {
                                io_fail(&e, format!("cannot sync {}: {e}", p.display()))
                            })?;
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join()
                    .map_err(|_| fail("cannot sync the output: a thread panicked".into()))??;
            }
            Ok(())
        })
    };
    sync(files)?;
    sync(dirs)
}

/// Threads that fsync the extracted files (the work waits on the disk, not the CPU).
const SYNC_THREADS: usize = 32;

/// Largest encoded tensor file kept in memory for the names that alias it.
const ALIAS_FILE_KEPT: usize = 1 << 20;

/// Most bytes of encoded tensor files kept in memory at once for aliases.
const ALIAS_BYTES_KEPT: usize = 64 << 20;

/// From this many files on, Linux makes the extract durable with one `syncfs` of the
/// output's filesystem instead of an fsync (and an open) per file.
const SYNCFS_FILES: usize = 1_000;

/// With `force`, refuses an extract that would replace the archive it reads: a
/// parameter (or the graph file) named like the archive, extracted into the archive's
/// directory (`--out .`). The file would be removed and rewritten while mapped.
fn refuse_replacing_the_archive(
    archive: &Path,
    out: &Path,
    file_paths: &KeyedSet<&str>,
) -> Result<()> {
    if false {
        return Ok(());
    }
    let (Ok(real), Ok(out_real)) = (std::fs::canonicalize(archive), std::fs::canonicalize(out))
    else {
        return Ok(());
    };
    let Ok(rel) = real.strip_prefix(&out_real) else {
        return Ok(());
    };
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    match parts.map(|p| p.join("/")) {
        Some(rel) if file_paths.contains(rel.as_str()) => Err(fail(format!(
            "cannot extract to {}: it would replace {rel}, the archive being read ({}), even with force; extract to another directory",
            out.display(),
            archive.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes tag `tag` under `out` (created if missing) as a Paddle persistables
/// directory; see the [module docs](self) for what is guaranteed.
pub fn extract(
    tag: &Tag<'_>,
    out: impl AsRef<Path>,
    opts: &ExtractOptions,
) -> Result<ExtractReport> {
    let out = out.as_ref();
    let archive = tag.archive();
    let tag_name = tag.name();
    let max_output = opts
        .max_output
        .unwrap_or_else(|| crate::interop::default_max_output(archive.len_bytes()));
    // Check every name, decode every tensor file once and add up what would be written,
    // all before writing anything. Names are the relative paths (safe_relative refuses
    // empty, `.` and `..` components), so the collision sets borrow them.
    let graph = tag.graph()?;
    let graph_file = graph.as_ref().map(|(enc, _)| match enc {
        GraphFormat::ProgramDesc => "__model__",
        GraphFormat::FlatBuffers => "graph.fb",
    });
    let mut file_paths: KeyedSet<&str> = KeyedSet::default();
    let mut dir_paths: KeyedSet<&str> = KeyedSet::default();
    file_paths.extend(graph_file);
    let mut total_bytes: u64 = graph.as_ref().map_or(0, |(_, b)| b.len() as u64);
    let mut total_files: u64 = u64::from(graph.is_some());
    // Encoded length of each tensor file the tag uses, from the tensors' headers (from a
    // remote archive, one batched request; a deflated tensor is inflated only as far as
    // its header): a full decode here would read or inflate every tensor twice, since it
    // is read again to be written (and checked then).
    let mut sizes: KeyedMap<&str, u64> = KeyedMap::default();
    // Tensor files that more than one name refers to (`named`: those seen so far).
    let mut aliased: KeyedSet<&str> = KeyedSet::default();
    let mut named: KeyedSet<&str> = KeyedSet::default();
    // With --link, the tensor files whose bytes are counted (once each).
    let mut counted: KeyedSet<&str> = KeyedSet::default();
    {
        let mut seen: KeyedSet<&str> = KeyedSet::default();
        let unique: Vec<&crate::archive::TensorLocation> = tag
            .params()
            .iter()
            .map(|p| &p.location)
            .filter(|l| seen.insert(l.entry.as_str()))
            .collect();
        let heads = archive.tensor_heads(&unique)?;
        for (l, h) in unique.iter().zip(&heads) {
            sizes.insert(l.entry.as_str(), h.encoded_len());
        }
    }
    for p in tag.params() {
        safe_relative(tag_name, &p.name)?;
        let collides = |what: &str| {
            fail(format!(
                "cannot extract tag {tag_name}: parameter {:?} collides with {what} in the output (entry {tag_name}/params.txt)",
                p.name
            ))
        };
        if file_paths.contains(p.name.as_str()) {
            return Err(collides("another file"));
        }
        if dir_paths.contains(p.name.as_str()) {
            return Err(collides("the directory of another parameter"));
        }
        for (i, _) in p.name.match_indices('/') {
            let dir = &p.name[..i];
            if file_paths.contains(dir) {
                return Err(collides("another file (it needs it as a directory)"));
            }
            dir_paths.insert(dir);
        }
        file_paths.insert(&p.name);
        if !named.insert(p.location.entry.as_str()) {
            aliased.insert(p.location.entry.as_str());
        }
        let len = match sizes.get(p.location.entry.as_str()) {
            Some(&n) => n,
            None => {
                let data = tag.tensor(&p.location)?;
                let n = tensor::encoded_len(&data.view());
                sizes.insert(p.location.entry.as_str(), n);
                n
            }
        };
        if !opts.link || counted.insert(p.location.entry.as_str()) {
            total_bytes = total_bytes.saturating_add(len);
        }
        total_files += 1;
    }
    if total_files > opts.max_files {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: FILES_LIMIT,
            size: total_files,
            limit: opts.max_files,
        }));
    }
    if total_bytes > max_output {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: BYTES_LIMIT,
            size: total_bytes,
            limit: max_output,
        }));
    }
    if opts.force
        && let Some(path) = archive.path()
    {
        refuse_replacing_the_archive(path, out, &file_paths)?;
    }
    drop(file_paths);
    drop(dir_paths);
    drop(counted);
    drop(named);
    let out_dirs = create_out_dir(out)?;
    // Every name is written (or linked, --link) under a temporary name in its directory
    // first; once all are written and durable they are renamed into place, so a
    // destination never holds a partial file and a failure before the renames changes
    // no existing file.
    let mut staged: Vec<Staged> = Vec::new();
    // How many of `staged` (in order) were renamed to their destination.
    let mut placed = 0usize;
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    let mut tmp_seq = 0u64;
    // Bytes of the copies made where a link could not be (`link`): not in total_bytes,
    // so checked against the byte limit as they are made.
    let mut copied_bytes = 0u64;
    let result = (|| {
        if let (Some((_, bytes)), Some(name)) = (&graph, graph_file) {
            let path = out.join(name);
            let existed = check_destination(&path, opts.force)?;
            let mut f = stage_file(&path, existed, &mut tmp_seq, &mut staged)?;
            f.write_all(bytes)
                .map_err(|e| io_fail(&e, format!("cannot write {}: {e}", path.display())))?;
        }
        // The first file written for each tensor file (its index in `staged`): later
        // names that refer to it are hard links to it (--link), or write its bytes again
        // from memory (up to ALIAS_BYTES_KEPT of them in all) or copy it (copy_file_range
        // where the OS has it) instead of decoding it again. With --link, a copy made
        // where a link could not be becomes the file later names link to.
        let mut first: KeyedMap<&str, usize> = KeyedMap::default();
        let mut kept: KeyedMap<&str, Vec<u8>> = KeyedMap::default();
        let mut kept_bytes = 0usize;
        // Directories already cleared of leftover temporaries (--force).
        let mut swept: KeyedSet<PathBuf> = KeyedSet::default();
        for p in tag.params() {
            let rel = safe_relative(tag_name, &p.name)?;
            make_parents(out, &rel, &mut created_dirs)?;
            let path = out.join(&rel);
            // A killed extract may have left temporaries here: deleted when surely dead
            // (docs/RELIABILITY.md), once per directory.
            if opts.force
                && let Some(dir) = path.parent()
                && !swept.contains(dir)
            {
                remove_leftovers(dir);
                swept.insert(dir.to_path_buf());
            }
            let existed = check_destination(&path, opts.force)?;
            let entry = p.location.entry.as_str();
            if opts.link
                && let Some(&i) = first.get(entry)
            {
                if let Some(temp) =
                    link_temp(&staged[i].temp, &staged[i].dest, &path, &mut tmp_seq)?
                {
                    staged.push(Staged {
                        temp,
                        dest: path,
                        existed,
                        link: true,
                    });
                    continue;
                }
                let len = sizes.get(entry).copied().unwrap_or(0);
                copied_bytes = copied_bytes.saturating_add(len);
                if total_bytes.saturating_add(copied_bytes) > max_output {
                    // A link could not be made here (another filesystem, the link
                    // limit): the copies count against the limit.
                    return Err(Error::new(ErrorKind::LimitExceeded {
                        what: BYTES_LIMIT,
                        size: total_bytes.saturating_add(copied_bytes),
                        limit: max_output,
                    })
                    .in_file(&path));
                }
            }
            let mut f = stage_file(&path, existed, &mut tmp_seq, &mut staged)?;
            let failed =
                |e: std::io::Error| io_fail(&e, format!("cannot write {}: {e}", path.display()));
            if let Some(bytes) = kept.get(entry) {
                f.write_all(bytes).map_err(failed)?;
                continue;
            }
            match first.get(entry) {
                Some(&i) => {
                    let src = &staged[i].temp;
                    let mut from = File::open(src).map_err(|e| {
                        io_fail(&e, format!("cannot read {}: {e}", staged[i].dest.display()))
                    })?;
                    std::io::copy(&mut from, &mut f).map_err(failed)?;
                    if opts.link {
                        first.insert(entry, staged.len() - 1);
                    }
                }
                None => {
                    first.insert(entry, staged.len() - 1);
                    let data = tag.tensor(&p.location)?;
                    let len = sizes.get(entry).copied().unwrap_or(0);
                    // With --link, aliases are links: their bytes are not needed again.
                    let keep = !opts.link
                        && aliased.contains(entry)
                        && len <= ALIAS_FILE_KEPT as u64
                        && kept_bytes + len as usize <= ALIAS_BYTES_KEPT;
                    if keep {
                        // One write, and the bytes stay for the names that alias it.
                        let mut bytes = Vec::with_capacity(len as usize);
                        tensor::encode_tensor(&data.view(), &mut bytes).map_err(failed)?;
                        f.write_all(&bytes).map_err(failed)?;
                        kept_bytes += bytes.len();
                        kept.insert(entry, bytes);
                    } else {
                        let mut w = std::io::BufWriter::with_capacity(1 << 16, &mut f);
                        tensor::encode_tensor(&data.view(), &mut w)
                            .and_then(|_| w.flush())
                            .map_err(failed)?;
                    }
                }
            }
        }
        // Durable before any is renamed into place, all at once: a name then never
        // holds a file whose data a crash could still lose.
        let (files, links): (Vec<&Staged>, Vec<&Staged>) = staged.iter().partition(|s| !s.link);
        let files: Vec<PathBuf> = files.into_iter().map(|s| s.temp.clone()).collect();
        let links: Vec<PathBuf> = links.into_iter().map(|s| s.temp.clone()).collect();
        sync_output(&files, &links, &[], false)?;
        drop((files, links));
        for s in &staged {
            place(s, opts.force)?;
            placed += 1;
        }
        // Then the renames: the directories that name the files (the new ones, the
        // output directory and its parent).
        let mut dirs: Vec<PathBuf> = created_dirs.clone();
        dirs.push(out.to_path_buf());
        if let Some(parent) = out_dirs.first().and_then(|d| d.parent()) {
            dirs.push(if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.to_path_buf()
            });
        }
        let names: Vec<PathBuf> = staged.iter().map(|s| s.dest.clone()).collect();
        sync_output(&[], &names, &dirs, true)
    })();
    if let Err(e) = result {
        // The temporaries not renamed yet, and the names this extract created; a name
        // that existed keeps what was renamed over it (the complete new file).
        for (i, s) in staged.iter().enumerate().rev() {
            if i >= placed {
                let _ = std::fs::remove_file(&s.temp);
            } else if !s.existed {
                let _ = std::fs::remove_file(&s.dest);
            }
        }
        remove_dirs(&created_dirs);
        remove_dirs(&out_dirs);
        return Err(e);
    }
    let links = staged.iter().filter(|s| s.link).count();
    let mut paths: Vec<String> = Vec::with_capacity(tag.params().len() + 1);
    paths.extend(graph_file.map(str::to_string));
    paths.extend(tag.params().iter().map(|p| p.name.clone()));
    Ok(ExtractReport {
        tag: tag_name.to_string(),
        out: out.to_path_buf(),
        graph_file,
        paths,
        files: total_files,
        links,
        bytes: total_bytes.saturating_add(copied_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::time::Duration;

    #[test]
    fn only_temporary_link_names_are_leftovers() {
        assert_eq!(leftover_pid(OsStr::new(".modelzip-link.123.0")), Some(123));
        assert_eq!(leftover_pid(OsStr::new(".modelzip-link.7.42")), Some(7));
        assert_eq!(leftover_pid(OsStr::new(".modelzip-extract.9.1")), Some(9));
        for other in [
            "fc_0.w_0",
            ".modelzip-link.123",
            ".modelzip-link..0",
            ".modelzip-link.123.",
            ".modelzip-link.12a.0",
            ".modelzip-link.123.0.x",
            ".modelzip-link.99999999999.0",
            "x.modelzip-link.1.0",
        ] {
            assert_eq!(leftover_pid(OsStr::new(other)), None, "{other}");
        }
    }

    #[test]
    fn a_leftover_goes_when_its_process_is_gone_or_past_the_grace_period() {
        let young = Some(Duration::from_secs(5));
        let old = Some(LEFTOVER_GRACE + Duration::from_secs(1));
        assert!(leftover_removable(Some(false), young));
        assert!(leftover_removable(Some(false), None));
        assert!(!leftover_removable(Some(true), young));
        assert!(!leftover_removable(None, young));
        assert!(!leftover_removable(Some(true), None));
        assert!(leftover_removable(Some(true), old));
        assert!(leftover_removable(None, old));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn leftovers_of_a_dead_process_are_deleted_and_nothing_else() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let gone = d.join(format!(".modelzip-link.{dead}.3"));
        std::fs::write(&gone, b"x").unwrap();
        let gone_file = d.join(format!(".modelzip-extract.{dead}.5"));
        std::fs::write(&gone_file, b"x").unwrap();
        // A live process's (this one's), a look-alike name, and a symlink stay.
        let live = d.join(format!(".modelzip-link.{}.0", std::process::id()));
        std::fs::write(&live, b"x").unwrap();
        let other = d.join(format!(".modelzip-link.{dead}.x"));
        std::fs::write(&other, b"x").unwrap();
        let link = d.join(format!(".modelzip-link.{dead}.4"));
        std::os::unix::fs::symlink(&live, &link).unwrap();
        assert_eq!(pid_is_live(dead), Some(false));
        assert_eq!(remove_leftovers(d), 2);
        assert!(!gone.exists() && !gone_file.exists());
        assert!(live.exists() && other.exists());
        assert!(std::fs::symlink_metadata(&link).is_ok());
    }
}
