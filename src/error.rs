//! The one error type of the library: a kind saying what went wrong, plus where.

use std::fmt;
use std::path::{Path, PathBuf};

/// Result alias used throughout modelzip.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong. The kind's text says what and why, with the numbers a user needs to
/// understand it (sizes, counts, names); the location (file, entry, record, line, byte
/// offset) lives in [`Location`]. A kind keeps its values as fields only where callers
/// act on them: [`LimitExceeded`](Self::LimitExceeded) (which limit, by how much) and
/// [`UnrepresentableValues`](Self::UnrepresentableValues) (what allows them).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An operating-system I/O failure. Its text is part of the error's `Display`, so
    /// `Error::source` (see [`std::error::Error::source`]) goes on with what the I/O error wraps (if anything), not with
    /// the I/O error itself: a chain prints each cause once.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A dtype number that is not one of Paddle's element types.
    #[error("unknown dtype number {0}")]
    UnknownDType(i64),
    /// A dtype name that is not one of Paddle's element types.
    #[error("unknown dtype name {0:?}")]
    UnknownDTypeName(String),
    /// The input ends before a field it declares: which field, the bytes it needs and
    /// the bytes that remain.
    #[error("{0}")]
    Truncated(String),
    /// Bytes follow the last record where none are allowed: how many.
    #[error("{0} unexpected bytes after the record")]
    TrailingBytes(u64),
    /// A version word other than 0: which one, and its value.
    #[error("{0}")]
    BadVersion(String),
    /// The TensorDesc size is negative or larger than what remains: the size, and the
    /// bytes left after the size field.
    #[error("{0}")]
    BadDescSize(String),
    /// The TensorDesc protobuf is malformed or incomplete.
    #[error("invalid TensorDesc: {0}")]
    BadTensorDesc(String),
    /// A dimension below zero: its value and position.
    #[error("{0}")]
    NegativeDim(String),
    /// Element count or byte count does not fit in 64 bits / memory.
    #[error("size overflow: {0}")]
    SizeOverflow(String),
    /// The LoD offsets are not a valid level-of-detail table.
    #[error("invalid LoD: {0}")]
    BadLod(String),
    /// A typed view was asked of data whose address is not aligned for the type: the
    /// type, its alignment and the data's address.
    #[error("{0}")]
    Misaligned(String),
    /// A typed view was asked with a Rust type that does not match the dtype: the
    /// tensor's dtype and the one asked for.
    #[error("{0}")]
    DTypeMismatch(String),
    /// Tensor data does not match dtype × dims: the bytes given and the bytes needed.
    #[error("{0}")]
    DataLength(String),
    /// The zip container is malformed or unsupported.
    #[error("bad zip: {0}")]
    Zip(String),
    /// A tag name breaks one of the naming rules: the name and the rule.
    #[error("{0}")]
    InvalidTagName(String),
    /// No tag of that name (ignoring ASCII case): the name, and the tags the archive has
    /// (in tags.txt order: all of them when there are at most 10, else the oldest few and
    /// the newest, with how many there are).
    #[error("{0}")]
    TagNotFound(String),
    /// A tag that already exists (ignoring ASCII case).
    #[error("tag {0:?} already exists")]
    TagExists(String),
    /// No parameter of that name.
    #[error("no parameter {0:?} in tag {1:?}")]
    ParamNotFound(String, String),
    /// A text file line that does not follow its grammar.
    #[error("{0}")]
    Syntax(String),
    /// A required entry is absent.
    #[error("missing entry {0:?}")]
    MissingEntry(String),
    /// An entry name that could escape a directory or is otherwise unsafe: the name and
    /// why it is refused.
    #[error("{0}")]
    UnsafeName(String),
    /// A size or count over a configured limit.
    #[error("{what} of {size} exceeds the limit of {limit}")]
    LimitExceeded {
        /// What was measured.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Another process holds the archive's write lock.
    #[error(
        "archive is locked by another process (a writer is running); retry later or wait for it"
    )]
    Locked,
    /// A stored checksum does not match the data.
    #[error("checksum mismatch: {0}")]
    Checksum(String),
    /// A graph that cannot be decoded, encoded or converted.
    #[error("graph: {0}")]
    Graph(String),
    /// A tag asked for as a checkpoint that a checkpointer did not write: the tag
    /// (spelled as in tags.txt) and why it is not one.
    #[error("{0}")]
    NotACheckpoint(String),
    /// An asynchronous checkpoint save failed (reported a second time: the first report
    /// is the save's own error, see `checkpoint::SaveHandle::wait`).
    #[error("asynchronous save failed: {0}")]
    AsyncSave(String),
    /// A rollback journal (the path) lies beside the archive that was not written for it
    /// (the archive was replaced after an append was interrupted): it is not replayed.
    #[error(
        "the rollback journal {} does not belong to this archive (the central directory \
         it saved does not match the archive's entries): the archive was replaced after \
         an append was interrupted; move the journal away to open it",
        .0.display()
    )]
    ForeignJournal(PathBuf),
    /// An in-place append was interrupted and this reader could not roll it back: why.
    #[error("archive has an unfinished append; open it writable once to roll back ({0})")]
    UnfinishedAppend(String),
    /// An in-place write to an archive with more than one name (hard links): how many
    /// names the file has.
    #[error(
        "the archive has {0} hard links; an in-place write through one name \
         cannot be made crash-safe for the others (rewrite it instead, e.g. \
         --rewrite, or remove the other links)"
    )]
    HardLinked(u64),
    /// A file beside the archive, its `"journal"` or `"lock file"`, that exists and is
    /// not a regular file (a FIFO, a directory, a device): it is neither opened nor
    /// removed.
    #[error(
        "the archive's {0} is not a regular file (remove it if no modelzip writer \
         is running)"
    )]
    NotARegularFile(&'static str),
    /// A caller-supplied value that makes no sense.
    #[error("{0}")]
    InvalidInput(String),
    /// A parameter a variant (`quantize`, `cast`) would convert holds values the new
    /// dtype cannot carry faithfully: NaN or ±inf, or (cast) finite values beyond the
    /// target dtype's range. Refused unless the caller allows them
    /// ([`AllowValues`](crate::variants::AllowValues), named by `allow`).
    #[error("{message}; refused unless such values are allowed")]
    UnrepresentableValues {
        /// The parameter, what is wrong with its values ("are NaN or infinite", "are
        /// beyond FP16's range"), how many, the flat (row-major) index and value (as
        /// FP32) of the first, and what the variant would store for them.
        message: String,
        /// The [`AllowValues`](crate::variants::AllowValues) field that allows them:
        /// `non_finite` or `overflow`.
        allow: &'static str,
    },
    /// A request to an object store failed: network, credentials, no such object
    /// (docs/REMOTE.md).
    #[error("remote: {0}")]
    Remote(String),
    /// The server answered a byte-range request with the whole object (HTTP 200, not 206).
    #[error(
        "the server ignored a byte-range request (it sent the whole object, HTTP 200 instead of 206); remote archives need a server that supports Range requests"
    )]
    RangeNotSupported,
    /// The remote object changed between two requests of one read (its ETag is not the
    /// one the first request saw, which the kind names): nothing of two versions is
    /// mixed.
    #[error("the remote object changed while it was read (version {0} is gone); open it again")]
    RemoteChanged(String),
    /// A conditional upload or remote append refused: the object exists, or is not the
    /// version read.
    #[error("{0}")]
    RemoteConflict(String),
}

impl ErrorKind {
    /// How many tags a [`ErrorKind::TagNotFound`] lists at most.
    pub(crate) const TAGS_LISTED: usize = 10;

    /// [`ErrorKind::TagNotFound`] for `name` in an archive with `tags` (tags.txt order,
    /// oldest first): lists all of them when there are at most [`Self::TAGS_LISTED`],
    /// else the 3 oldest and the 7 newest (the likely targets of a typo).
    pub(crate) fn tag_not_found(name: &str, tags: &[String]) -> ErrorKind {
        const OLDEST: usize = 3;
        let listed = if tags.len() <= Self::TAGS_LISTED {
            tags.to_vec()
        } else {
            let newest = &tags[tags.len() - (Self::TAGS_LISTED - OLDEST)..];
            tags[..OLDEST].iter().chain(newest).cloned().collect()
        };
        ErrorKind::TagNotFound(format!("no tag {name:?}; {}", TagList(&listed, tags.len())))
    }

    /// [`ErrorKind::Truncated`]: field `what` needs `needed` bytes, `available` remain.
    pub(crate) fn truncated(what: &str, needed: u64, available: u64) -> ErrorKind {
        ErrorKind::Truncated(format!(
            "truncated {what}: needs {needed} bytes, {available} remain"
        ))
    }

    /// [`ErrorKind::BadVersion`]: version word `what` is `value`, not 0.
    pub(crate) fn bad_version(what: &str, value: u32) -> ErrorKind {
        ErrorKind::BadVersion(format!("unsupported {what} {value} (only 0 is defined)"))
    }

    /// [`ErrorKind::NegativeDim`]: dimension `index` is `value`.
    pub(crate) fn negative_dim(index: usize, value: i64) -> ErrorKind {
        ErrorKind::NegativeDim(format!("negative dimension {value} at index {index}"))
    }

    /// [`ErrorKind::DTypeMismatch`]: the tensor has dtype `actual`, not `expected`.
    pub(crate) fn dtype_mismatch(expected: &str, actual: &str) -> ErrorKind {
        ErrorKind::DTypeMismatch(format!("tensor has dtype {actual}, not {expected}"))
    }

    /// [`ErrorKind::InvalidTagName`]: `name` breaks `rule`.
    pub(crate) fn invalid_tag_name(name: &str, rule: &str) -> ErrorKind {
        ErrorKind::InvalidTagName(format!("invalid tag name {name:?}: {rule}"))
    }

    /// [`ErrorKind::UnsafeName`]: entry name `name` is refused because `why`.
    pub(crate) fn unsafe_name(name: &str, why: &str) -> ErrorKind {
        ErrorKind::UnsafeName(format!("unsafe entry name {name:?}: {why}"))
    }
}

/// Renders the tags of a [`ErrorKind::TagNotFound`]: `tags: a, b, c`, with `…` where
/// some were left out and the total after.
struct TagList<'a>(&'a [String], usize);

impl fmt::Display for TagList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let TagList(tags, total) = *self;
        if total == 0 {
            return f.write_str("the archive has no tags");
        }
        f.write_str("tags: ")?;
        let cut = (tags.len() < total).then_some(3);
        for (i, t) in tags.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if Some(i) == cut {
                f.write_str("…, ")?;
            }
            f.write_str(t)?;
        }
        if tags.len() < total {
            write!(f, " ({total} in all)")?;
        }
        Ok(())
    }
}

/// Where an error happened: any of file, entry, record, line and byte offset.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file on disk.
    pub file: Option<PathBuf>,
    /// The zip entry.
    pub entry: Option<String>,
    /// The record index inside a tensor file.
    pub record: Option<usize>,
    /// The 1-based line of a text file.
    pub line: Option<usize>,
    /// The byte offset inside the file or entry.
    pub offset: Option<u64>,
}

impl Location {
    fn is_empty(&self) -> bool {
        *self == Location::default()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(file) = &self.file {
            parts.push(format!("file {}", file.display()));
        }
        if let Some(entry) = &self.entry {
            parts.push(format!("entry {entry}"));
        }
        if let Some(record) = self.record {
            parts.push(format!("record {record}"));
        }
        if let Some(line) = self.line {
            parts.push(format!("line {line}"));
        }
        if let Some(offset) = self.offset {
            parts.push(format!("byte {offset}"));
        }
        f.write_str(&parts.join(", "))
    }
}

/// The modelzip error: a [`ErrorKind`] and the [`Location`] it happened at.
/// Boxed so that `Result<T, Error>` stays one pointer wide on the happy path.
#[derive(Debug)]
pub struct Error(Box<Inner>);

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    location: Location,
}

impl Error {
    /// An error of this kind with no location yet (callers outside the crate use
    /// `Error::from(kind)` or `kind.into()`).
    pub(crate) fn new(kind: ErrorKind) -> Self {
        Error(Box::new(Inner {
            kind,
            location: Location::default(),
        }))
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// Where it went wrong.
    pub fn location(&self) -> &Location {
        &self.0.location
    }

    /// Records the file, unless one is already set.
    pub fn in_file(mut self, path: impl AsRef<Path>) -> Self {
        self.0
            .location
            .file
            .get_or_insert_with(|| path.as_ref().to_path_buf());
        self
    }

    /// Replaces a file location equal to `from` with `to` (an archive path resolved
    /// through symlinks, named as the caller spelled it).
    pub(crate) fn with_file_renamed(mut self, from: &Path, to: &Path) -> Self {
        if self.0.location.file.as_deref() == Some(from) {
            self.0.location.file = Some(to.to_path_buf());
        }
        self
    }

    /// Records the zip entry, unless one is already set.
    pub fn in_entry(mut self, entry: impl Into<String>) -> Self {
        self.0.location.entry.get_or_insert_with(|| entry.into());
        self
    }

    /// Records the record index, unless one is already set.
    pub(crate) fn in_record(mut self, record: usize) -> Self {
        self.0.location.record.get_or_insert(record);
        self
    }

    /// Records the 1-based line, unless one is already set.
    pub(crate) fn at_line(mut self, line: usize) -> Self {
        self.0.location.line.get_or_insert(line);
        self
    }

    /// Records the byte offset, unless one is already set.
    pub(crate) fn at_offset(mut self, offset: u64) -> Self {
        self.0.location.offset.get_or_insert(offset);
        self
    }

    /// Adds `base` to the byte offset (for an error found inside a sub-slice).
    pub(crate) fn shift_offset(mut self, base: u64) -> Self {
        if let Some(o) = self.0.location.offset.as_mut() {
            *o = o.saturating_add(base);
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.location.is_empty() {
            write!(f, "{}", self.0.kind)
        } else {
            write!(f, "{} ({})", self.0.kind, self.0.location)
        }
    }
}

impl std::error::Error for Error {
    /// The cause behind the kind, when the kind's text does not already say it: for an
    /// I/O error, what the [`std::io::Error`] wraps (its own text is in `Display`).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0.kind)
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error::new(kind)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(ErrorKind::Io(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// The error and its causes, as a chain printer (anyhow, eyre) shows them.
    fn chain(e: &Error) -> String {
        let mut parts = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            parts.push(cause.to_string());
            next = cause.source();
        }
        parts.join(": ")
    }

    #[test]
    fn an_io_error_prints_once_in_a_chain() {
        let e =
            Error::from(std::io::Error::new(std::io::ErrorKind::NotFound, "gone")).in_file("m.zip");
        assert_eq!(chain(&e), "gone (file m.zip)");
        // An I/O error wrapping another error: each text once.
        let inner = Error::new(ErrorKind::Zip("torn".into()));
        let e = Error::from(std::io::Error::other(inner));
        assert_eq!(chain(&e).matches("torn").count(), 1, "{}", chain(&e));
    }

    #[test]
    fn a_missing_tag_lists_the_tags_there_are() {
        let tags = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
        let three: Vec<String> = ["fp32", "int8", "fp16"].map(String::from).to_vec();
        assert_eq!(
            ErrorKind::tag_not_found("nope", &three).to_string(),
            r#"no tag "nope"; tags: fp32, int8, fp16"#
        );
        assert_eq!(
            ErrorKind::tag_not_found("x", &[]).to_string(),
            r#"no tag "x"; the archive has no tags"#
        );
        assert_eq!(
            ErrorKind::tag_not_found("x", &tags(10)).to_string(),
            r#"no tag "x"; tags: t0, t1, t2, t3, t4, t5, t6, t7, t8, t9"#
        );
        let many = ErrorKind::tag_not_found("x", &tags(100_000));
        assert_eq!(
            many.to_string(),
            r#"no tag "x"; tags: t0, t1, t2, …, t99993, t99994, t99995, t99996, t99997, t99998, t99999 (100000 in all)"#
        );
    }
}
