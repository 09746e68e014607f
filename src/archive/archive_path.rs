//! The file an archive path names, resolved once per operation.
//!
//! The lock (`<archive>.lock`), the journal (`<archive>.journal`) and the temp file of a
//! rewrite are named after the archive, and a rewrite renames a new file over it. Named
//! after a symlink, they would belong to the link rather than to the file it points at:
//! a writer through the link and one through the real path would lock two different lock
//! files, and a rewrite would replace the link with a regular file, leaving the real
//! archive unchanged. So every write operation, and the journal recovery a reader does,
//! first resolves the path: an existing file to its canonical path (every symlink
//! followed), a path that does not exist to its canonical directory joined with its file
//! name. A dangling symlink is followed to the file it names, which is then created there
//! (the link stays and points at the new archive), as `open(O_CREAT)` would; a link whose
//! target directory does not exist is refused.

use crate::error::{Error, ErrorKind, Result};
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};

/// How many symlinks a dangling chain may have, as Linux's `ELOOP` limit.
const MAX_LINKS: usize = 40;

/// An archive path as the caller gave it and the file it resolves to.
#[derive(Debug, Clone)]
pub(crate) struct ArchivePath {
    /// The file every lock, journal, temp file and rename acts on.
    pub real: PathBuf,
    /// The path as given: what errors name.
    pub shown: PathBuf,
}

impl ArchivePath {
    /// Resolves `path` (see the module documentation).
    pub fn resolve(path: &Path) -> Result<ArchivePath> {
        Ok(ArchivePath {
            real: resolve(path)?,
            shown: path.to_path_buf(),
        })
    }

    /// For readers: the canonical path when `path` exists, else `path` as given (opening
    /// it will report why).
    pub fn for_reading(path: &Path) -> ArchivePath {
        ArchivePath {
            real: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            shown: path.to_path_buf(),
        }
    }

    /// `e` naming the path as the caller gave it: a file location that is the resolved
    /// path is replaced, none is filled in (sidecar files keep their resolved names).
    pub fn located(&self, e: Error) -> Error {
        e.with_file_renamed(&self.real, &self.shown)
            .in_file(&self.shown)
    }
}

/// The file `path` names, following symlinks (see the module documentation).
pub(crate) fn resolve(path: &Path) -> Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(p) => return Ok(p),
        Err(e) if e.kind() != IoKind::NotFound => return Err(Error::from(e).in_file(path)),
        Err(_) => {}
    }
    // Nothing at the end of the chain (or a directory on the way is missing): follow the
    // symlinks by hand to the name a create would use.
    let mut cur = path.to_path_buf();
    let mut links = 0;
    loop {
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Error::new(ErrorKind::InvalidInput(format!(
                        "more than {MAX_LINKS} symbolic links in a chain"
                    )))
                    .in_file(path));
                }
                let target = std::fs::read_link(&cur).map_err(|e| Error::from(e).in_file(&cur))?;
                cur = super::durable::parent_dir(&cur).join(target);
            }
            // It appeared since canonicalize looked: resolve it as an existing file.
            Ok(_) => {
                return std::fs::canonicalize(&cur).map_err(|e| Error::from(e).in_file(path));
            }
            Err(e) if e.kind() == IoKind::NotFound => break,
            Err(e) => return Err(Error::from(e).in_file(&cur)),
        }
    }
    let name = match cur.file_name() {
        Some(n) if !ends_like_a_directory(&cur) => n.to_owned(),
        _ => {
            return Err(Error::new(ErrorKind::InvalidInput(
                "an archive path must name a file, not end in a directory".into(),
            ))
            .in_file(path));
        }
    };
    let dir = super::durable::parent_dir(&cur);
    match std::fs::canonicalize(&dir) {
        Ok(d) => Ok(d.join(name)),
        Err(e) if links > 0 => Err(Error::new(ErrorKind::InvalidInput(format!(
            "it is a symbolic link to {}, whose directory {} cannot be used: {e}",
            cur.display(),
            dir.display()
        )))
        .in_file(path)),
        Err(e) => Err(Error::from(e).in_file(&dir)),
    }
}

/// Path of an archive's sidecar file with `suffix` appended (`.lock`, `.journal`).
pub(crate) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Refuses a sidecar (`what`: journal, lock file) that exists and is not a regular file:
/// opening a FIFO would block forever, and a directory or device is no journal.
pub(crate) fn regular_file(p: &Path, what: &'static str) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if !m.file_type().is_file() => {
            Err(Error::new(ErrorKind::NotARegularFile(what)).in_file(p))
        }
        _ => Ok(()),
    }
}

/// True for paths spelled as a directory: ending in `/`, `/.` or `..`.
fn ends_like_a_directory(p: &Path) -> bool {
    let s = p.as_os_str().as_encoded_bytes();
    s.ends_with(b"/") || s.ends_with(b"/.") || s == b"." || s.ends_with(b"..")
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn resolves_links_new_files_and_dangling_links() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/s.zip"), b"x").unwrap();
        symlink("real/s.zip", root.join("link.zip")).unwrap();
        symlink("link.zip", root.join("link2.zip")).unwrap();
        symlink("real", root.join("dirlink")).unwrap();
        let real = root.join("real/s.zip");
        assert_eq!(resolve(&root.join("link.zip")).unwrap(), real);
        assert_eq!(resolve(&root.join("link2.zip")).unwrap(), real);
        assert_eq!(resolve(&root.join("dirlink/s.zip")).unwrap(), real);
        assert_eq!(resolve(&root.join("real/./s.zip")).unwrap(), real);
        // A new file: its directory resolved, the name kept.
        assert_eq!(
            resolve(&root.join("dirlink/new.zip")).unwrap(),
            root.join("real/new.zip")
        );
        // A dangling link (relative, through another link) resolves to its target.
        symlink("real/later.zip", root.join("dangling.zip")).unwrap();
        symlink("dangling.zip", root.join("dangling2.zip")).unwrap();
        assert_eq!(
            resolve(&root.join("dangling2.zip")).unwrap(),
            root.join("real/later.zip")
        );
        // Refused: a link into a missing directory, a loop, a missing directory, a
        // directory spelling.
        symlink("nowhere/x.zip", root.join("bad.zip")).unwrap();
        let e = resolve(&root.join("bad.zip")).unwrap_err().to_string();
        assert!(
            e.contains("symbolic link to") && e.contains("nowhere"),
            "{e}"
        );
        symlink("loop2.zip", root.join("loop1.zip")).unwrap();
        symlink("loop1.zip", root.join("loop2.zip")).unwrap();
        assert!(resolve(&root.join("loop1.zip")).is_err());
        let e = resolve(&root.join("missing/x.zip")).unwrap_err();
        assert_eq!(e.location().file.as_deref(), Some(&*root.join("missing")));
        assert!(resolve(&root.join("missing/..")).is_err());
        assert!(resolve(&root.join("new/")).is_err());
    }
}
