//! Writing archives: [`ArchiveWriter`] for new files, [`TagWriter`] for one tag's entries,
//! [`TagBuilder`] for a tag held in memory, and the session all write paths share.

use super::archive_path::ArchivePath;
use super::container::write::EntrySpec;
use super::durable::TempTarget;
use super::entry_name::check_entry_name;
use super::hashing::{IN_FLIGHT_LIMIT, hex_digest, sha256_parts};
use super::lock::WriteLock;
use super::reader::{GraphFormat, TensorKind};
use super::session::{Candidate, FileCandidate, FileKey, Session, Sha, WriteOptions};
use super::tag::SHARED_TXT;
use super::tag_name::validate_tag_name;
use super::text::{self, ParamRef};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::codec::encode_header;
use crate::tensor::{DType, Tensor, TensorView};
use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::Path;

impl Session {
    /// Starts writing tag `name`.
    pub fn begin_tag(&mut self, name: &str) -> Result<TagWriter<'_>> {
        validate_tag_name(name)?;
        if let Some(t) = self.tags.iter().find(|t| t.eq_ignore_ascii_case(name)) {
            return Err(ErrorKind::TagExists(t.clone()).into());
        }
        let lower = format!("{}/", name.to_ascii_lowercase());
        if let Some(e) = self
            .out
            .entries
            .iter()
            .find(|e| e.name.to_ascii_lowercase().starts_with(&lower))
        {
            return Err(ErrorKind::InvalidInput(format!(
                "entry {:?} already exists under the directory of new tag {name:?}",
                e.name
            ))
            .into());
        }
        let first_entry = self.out.entries.len();
        Ok(TagWriter {
            s: self,
            name: name.to_string(),
            first_entry,
            params: Vec::new(),
            updater: Vec::new(),
            param_names: HashSet::new(),
            updater_names: HashSet::new(),
            next: [0, 0],
            sums: Vec::new(),
            used: HashSet::new(),
            shared: Vec::new(),
            shareable: Vec::new(),
            dtypes: BTreeSet::new(),
            metadata: false,
            done: false,
        })
    }
}

/// Tensors of at least this many data bytes are hashed by the session's [`HashPool`]
/// while later ones are written (below it, the hand-off costs more than it saves).
const POOL_HASH_MIN: usize = 64 << 10;

/// File names a tag writer produces itself.
const RESERVED: [&str; 10] = [
    "params.txt",
    "shards.txt",
    "shared.txt",
    "updater.txt",
    "sha256sums.txt",
    "metadata.json",
    "trainingConfig.fb",
    "graph.fb",
    "graph.pdmodel",
    "params/",
];

/// Writes one tag's entries as they are added (tensors are not kept in memory).
/// Dropping it without [`TagWriter::finish`] leaves the tag out of the archive.
pub struct TagWriter<'s> {
    s: &'s mut Session,
    name: String,
    first_entry: usize,
    params: Vec<(String, ParamRef)>,
    updater: Vec<(String, Vec<ParamRef>)>,
    param_names: HashSet<String>,
    updater_names: HashSet<String>,
    next: [u64; 2],
    sums: Vec<(Sha, String)>,
    used: HashSet<String>,
    /// Files taken from other tags (shared.txt): (file, owning tag).
    shared: Vec<(&'static str, String)>,
    /// Files this tag stores that later tags may share: (key, SHA-256).
    shareable: Vec<(FileKey, [u8; 32])>,
    /// Element types of the tag's tensors (for the summary).
    dtypes: BTreeSet<DType>,
    metadata: bool,
    done: bool,
}

impl std::fmt::Debug for TagWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagWriter")
            .field("name", &self.name)
            .finish()
    }
}

impl TagWriter<'_> {
    /// The tag being written.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn claim(&mut self, rel: &str) -> Result<String> {
        if !self.used.insert(rel.to_string()) {
            return Err(
                ErrorKind::InvalidInput(format!("tag {:?} already has {rel}", self.name)).into(),
            );
        }
        Ok(format!("{}/{rel}", self.name))
    }

    /// Writes a small file of the tag: deflated when `compressible` and the options say
    /// so (see [`WriteOptions::deflate_text`]), else stored.
    fn put_file(&mut self, rel: &str, bytes: &[u8], compressible: bool) -> Result<()> {
        let full = self.claim(rel)?;
        if compressible {
            self.s.write_text(&full, bytes)?;
        } else {
            self.s
                .out
                .write_entry(EntrySpec::stored(&full, crc32fast::hash(bytes), &[bytes]))?;
        }
        self.sums
            .push((Sha::Ready(sha256_parts(&[bytes])), rel.to_string()));
        Ok(())
    }

    /// Adds the graph (at most one, in either encoding). The bytes must decode as
    /// readers decode them (a ProgramDesc with its required fields; graph.fb through the
    /// FlatBuffers verifier), or [`ErrorKind::Graph`] says why and nothing is written.
    pub fn graph(&mut self, enc: GraphFormat, bytes: &[u8]) -> Result<()> {
        if self.used.contains("graph.fb") || self.used.contains("graph.pdmodel") {
            return Err(ErrorKind::InvalidInput(format!(
                "tag {:?} already has a graph",
                self.name
            ))
            .into());
        }
        check_graph(&self.name, enc, bytes)?;
        self.put_shareable(enc.file_name(), bytes)
    }

    /// Stores `file` (a graph or training config), or, when an earlier tag holds the same
    /// bytes under the same name, lists it in shared.txt instead.
    fn put_shareable(&mut self, file: &'static str, bytes: &[u8]) -> Result<()> {
        let sha = sha256_parts(&[bytes]);
        if let Some(owner) = self.s.find_file(file, bytes, &sha)
            && owner != self.name
        {
            self.claim(file)?;
            self.shared.push((file, owner));
            return Ok(());
        }
        self.put_file(file, bytes, true)?;
        let key = (file, bytes.len() as u64, crc32fast::hash(bytes));
        self.shareable.push((key, sha));
        Ok(())
    }

    fn add_tensor(&mut self, kind: TensorKind, t: &TensorView<'_>) -> Result<ParamRef> {
        self.dtypes.insert(t.dtype());
        let header = encode_header(t);
        let len = header.len() as u64 + t.data().len() as u64;
        let parts: [&[u8]; 2] = [&header, t.data()];
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header);
        crc.update(t.data());
        let key = (kind, len, crc.finalize());
        // SHA-256 is the slowest step of a save (~1.8 GB/s with SHA-NI, CRC-32 ~15x
        // faster). Only a tensor with a dedup candidate of its kind, length and CRC-32
        // needs its digest before it is written; any other is written while it is hashed:
        // by the pool (a copy, hashed on another core while later tensors are written), or
        // beside its own write when it is too large to copy.
        let (sha, (rel, index)) = if self.s.dedup.map.contains_key(&key) {
            let sha = sha256_parts(&parts);
            let found = self.s.dedup.find(self.s.base.as_ref(), key, &sha, &parts);
            if let Some((tag, index)) = found {
                let tag = if tag == self.name { None } else { Some(tag) };
                return Ok(ParamRef { tag, index });
            }
            (Sha::Ready(sha), self.write_tensor(key, &parts)?)
        } else if t.data().len() < POOL_HASH_MIN {
            (
                Sha::Ready(sha256_parts(&parts)),
                self.write_tensor(key, &parts)?,
            )
        } else if let Some(pool) = self.s.pool.get().filter(|_| len <= IN_FLIGHT_LIMIT as u64) {
            let ticket = pool.submit(&parts);
            (Sha::Pending(ticket), self.write_tensor(key, &parts)?)
        } else {
            let (sha, written) = std::thread::scope(|scope| {
                let hasher = scope.spawn(|| sha256_parts(&parts));
                let written = self.write_tensor(key, &parts);
                let sha = hasher
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                (sha, written)
            });
            (Sha::Ready(sha), written?)
        };
        self.s.dedup.insert(
            key,
            Candidate {
                tag: self.name.clone(),
                index,
                sha: Some(sha.clone()),
                base_entry: None,
            },
        );
        self.sums.push((sha, rel));
        Ok(ParamRef { tag: None, index })
    }

    /// Stores a new tensor file (`parts` = record header, data); returns its name
    /// relative to the tag and its index.
    fn write_tensor(
        &mut self,
        (kind, len, crc): (TensorKind, u64, u32),
        parts: &[&[u8]; 2],
    ) -> Result<(String, u64)> {
        let slot = match kind {
            TensorKind::Params => 0,
            TensorKind::Updater => 1,
        };
        let index = self.next[slot];
        self.next[slot] += 1;
        let rel = format!("{}/{index}.lodtensor", kind.dir());
        let full = self.claim(&rel)?;
        self.s.out.write_entry(EntrySpec {
            uncompressed_size: len,
            align_after: Some(parts[0].len() as u64),
            ..EntrySpec::stored(&full, crc, parts)
        })?;
        Ok((rel, index))
    }

    /// Adds parameter `name` (unique, non-empty); an identical tensor already in the
    /// archive is referenced instead of stored again.
    pub fn param(&mut self, name: &str, t: &TensorView<'_>) -> Result<()> {
        self.param_returning_ref(name, t).map(|_| ())
    }

    /// [`TagWriter::param`], returning the reference it listed: further names of the
    /// same tensor can be added with [`TagWriter::param_ref`] without hashing it again.
    pub(crate) fn param_returning_ref(
        &mut self,
        name: &str,
        t: &TensorView<'_>,
    ) -> Result<ParamRef> {
        if name.is_empty() {
            return Err(ErrorKind::InvalidInput("parameter names must not be empty".into()).into());
        }
        if self.param_names.contains(name) {
            return Err(ErrorKind::InvalidInput(format!(
                "parameter {name:?} is added twice to tag {:?}",
                self.name
            ))
            .into());
        }
        let r = self.add_tensor(TensorKind::Params, t)?;
        self.param_names.insert(name.to_string());
        self.params.push((name.to_string(), r.clone()));
        Ok(r)
    }

    /// Lists tensor file `index` of `kind` whose entry (local header and record) was
    /// already written into the file by positioned writes (a sharded save): `entry` goes
    /// into the central directory as it is. Its SHA-256 is not in sha256sums.txt (the
    /// caller lists it per shard in shards.txt).
    pub(crate) fn place_tensor(
        &mut self,
        kind: TensorKind,
        index: u64,
        entry: super::container::ZipEntry,
        dtype: DType,
    ) -> Result<ParamRef> {
        let rel = format!("{}/{index}.lodtensor", kind.dir());
        let full = self.claim(&rel)?;
        if *full != *entry.name {
            return Err(ErrorKind::InvalidInput(format!(
                "placed entry {:?} is not {full:?}",
                entry.name
            ))
            .into());
        }
        let slot = match kind {
            TensorKind::Params => 0,
            TensorKind::Updater => 1,
        };
        self.next[slot] = self.next[slot].max(index + 1);
        self.dtypes.insert(dtype);
        self.s.out.list_placed(entry);
        Ok(ParamRef { tag: None, index })
    }

    /// A reference to tensor file `index` of tag `tag` (an identical tensor stored
    /// earlier), whose element type is `dtype`.
    pub(crate) fn reuse_tensor(&mut self, tag: &str, index: u64, dtype: DType) -> ParamRef {
        self.dtypes.insert(dtype);
        let tag = (tag != self.name).then(|| tag.to_string());
        ParamRef { tag, index }
    }

    /// Adds parameter `name` referring to `r` (from [`TagWriter::place_tensor`],
    /// [`TagWriter::reuse_tensor`] or [`TagWriter::param_returning_ref`]).
    pub(crate) fn param_ref(&mut self, name: &str, r: ParamRef) -> Result<()> {
        if name.is_empty() || !self.param_names.insert(name.to_string()) {
            return Err(ErrorKind::InvalidInput(format!(
                "parameter {name:?} is empty or added twice to tag {:?}",
                self.name
            ))
            .into());
        }
        self.params.push((name.to_string(), r));
        Ok(())
    }

    /// Adds the updater state of parameter `name` referring to `refs` (see
    /// [`TagWriter::param_ref`]).
    pub(crate) fn updater_refs(&mut self, name: &str, refs: Vec<ParamRef>) -> Result<()> {
        if name.is_empty() || refs.is_empty() || !self.updater_names.insert(name.to_string()) {
            return Err(ErrorKind::InvalidInput(format!(
                "updater state of {name:?} is empty or added twice to tag {:?}",
                self.name
            ))
            .into());
        }
        self.updater.push((name.to_string(), refs));
        Ok(())
    }

    /// Writes a file of modelzip's own under the tag (shards.txt), deflated like the
    /// tables and listed in sha256sums.txt.
    pub(crate) fn own_file(&mut self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.put_file(rel, bytes, true)
    }

    /// Adds the updater state arrays of parameter `name` (one or more, in order).
    pub fn updater(&mut self, name: &str, arrays: &[TensorView<'_>]) -> Result<()> {
        if name.is_empty() || arrays.is_empty() {
            return Err(ErrorKind::InvalidInput(
                "updater entries need a non-empty name and at least one array".into(),
            )
            .into());
        }
        if self.updater_names.contains(name) {
            return Err(ErrorKind::InvalidInput(format!(
                "updater state of {name:?} is added twice to tag {:?}",
                self.name
            ))
            .into());
        }
        let refs = arrays
            .iter()
            .map(|a| self.add_tensor(TensorKind::Updater, a))
            .collect::<Result<Vec<_>>>()?;
        self.updater_names.insert(name.to_string());
        self.updater.push((name.to_string(), refs));
        Ok(())
    }

    /// Adds `trainingConfig.fb`: bytes that [`crate::TrainingConfig::decode`] accepts.
    pub fn training_config(&mut self, bytes: &[u8]) -> Result<()> {
        crate::graph::training_config::TrainingConfig::decode(bytes).map_err(|e| {
            Error::new(ErrorKind::InvalidInput(format!(
                "the training config of tag {:?} does not decode: {}",
                self.name,
                e.kind()
            )))
        })?;
        self.put_shareable("trainingConfig.fb", bytes)
    }

    /// Adds `metadata.json`: a JSON object; a `"created"` key (RFC 3339 UTC, now) is
    /// added when absent.
    pub fn metadata(&mut self, json: &[u8]) -> Result<()> {
        let with = with_created(Some(json))?;
        self.put_file("metadata.json", &with, true)?;
        self.metadata = true;
        Ok(())
    }

    /// Whether [`TagWriter::metadata`] was called.
    pub(crate) fn has_metadata(&self) -> bool {
        self.metadata
    }

    /// Adds an entry of the caller's own under the tag directory (kept by every copy).
    pub fn extra_entry(&mut self, rel_name: &str, bytes: &[u8]) -> Result<()> {
        check_entry_name(rel_name)?;
        // sha256sums.txt lists the file on a line of its own: a line break (or any
        // control character) in its name would break that line.
        if let Some(c) = rel_name.chars().find(|c| c.is_control()) {
            return Err(ErrorKind::InvalidInput(format!(
                "{rel_name:?} holds the control character {c:?}: a tag file's name is listed on one line of sha256sums.txt"
            ))
            .into());
        }
        if rel_name.ends_with('/')
            || RESERVED.contains(&rel_name)
            || rel_name.starts_with("params/")
            || rel_name.starts_with("updater/")
        {
            return Err(ErrorKind::InvalidInput(format!(
                "{rel_name:?} is reserved for modelzip's own files"
            ))
            .into());
        }
        self.put_file(rel_name, bytes, false)
    }

    /// Writes params.txt, updater.txt, metadata.json (if not given) and sha256sums.txt,
    /// and lists the tag as the newest.
    pub fn finish(mut self) -> Result<()> {
        let params = text::render_table(
            self.params
                .iter()
                .map(|(n, r)| (n.as_str(), std::slice::from_ref(r))),
        );
        self.put_file("params.txt", params.as_bytes(), true)?;
        if !self.updater.is_empty() {
            let upd =
                text::render_table(self.updater.iter().map(|(n, r)| (n.as_str(), r.as_slice())));
            self.put_file("updater.txt", upd.as_bytes(), true)?;
        }
        if !self.metadata {
            let m = with_created(None)?;
            self.put_file("metadata.json", &m, true)?;
        }
        if !self.shared.is_empty() {
            let rows = text::render_shared(self.shared.iter().map(|(f, t)| (*f, t.as_str())));
            self.put_file(SHARED_TXT, rows.as_bytes(), true)?;
        }
        let sums: Vec<(String, String)> = self
            .sums
            .iter()
            .map(|(sha, rel)| (hex_digest(&sha.get()), rel.clone()))
            .collect();
        let sums = text::render_sums(&sums);
        let full = format!("{}/sha256sums.txt", self.name);
        self.s.write_text(&full, sums.as_bytes())?;
        self.s.tags.push(self.name.clone());
        let dtypes = std::mem::take(&mut self.dtypes);
        self.s.summary.note_tag(&self.name, dtypes);
        for (key, sha) in std::mem::take(&mut self.shareable) {
            self.s.files.entry(key).or_default().push(FileCandidate {
                tag: self.name.clone(),
                sha: Some(sha),
                base_entry: None,
            });
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for TagWriter<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Leave the tag's bytes as dead space: out of the directory and the dedup index.
            self.s.out.entries.truncate(self.first_entry);
            self.s.dedup.forget_tag(&self.name);
        }
    }
}

/// Checks that `bytes` decode as a graph in encoding `enc`, as every reader decodes them
/// (a graph that does not would be stored, then fail every later use).
pub(crate) fn check_graph(tag: &str, enc: GraphFormat, bytes: &[u8]) -> Result<()> {
    crate::graph::Graph::decode(enc, bytes)
        .map(drop)
        .map_err(|e| {
            let why = crate::graph::graph_error_why(&e);
            let what = match enc {
                GraphFormat::ProgramDesc => "graph.pdmodel (a Paddle ProgramDesc protobuf)",
                GraphFormat::FlatBuffers => "graph.fb (modelzip's FlatBuffers graph)",
            };
            Error::new(ErrorKind::Graph(format!(
                "the graph of tag {tag:?} is not a valid {what}: {why}"
            )))
        })
}

/// `json` (a JSON object) with a `"created"` key added if absent, or `{"created": now}`.
fn with_created(json: Option<&[u8]>) -> Result<Vec<u8>> {
    let now = super::time::rfc3339(std::time::SystemTime::now());
    let Some(b) = json else {
        return Ok(format!("{{\"created\":\"{now}\"}}\n").into_bytes());
    };
    crate::json_cost::check_json_cost(b, "estimated memory of parsing the metadata")?;
    let v: serde_json::Value = serde_json::from_slice(b).map_err(|e| {
        Error::new(ErrorKind::InvalidInput(format!(
            "metadata is not valid JSON: {e}"
        )))
    })?;
    let Some(obj) = v.as_object() else {
        return Err(ErrorKind::InvalidInput("metadata must be a JSON object".into()).into());
    };
    if obj.contains_key("created") {
        return Ok(b.to_vec());
    }
    // Insert textually after the opening brace, keeping the caller's bytes and key order.
    let brace = b.iter().position(|&c| c == b'{').unwrap_or(0);
    let sep = if obj.is_empty() { "" } else { "," };
    let mut out = Vec::with_capacity(b.len() + 40);
    out.extend_from_slice(&b[..=brace.min(b.len().saturating_sub(1))]);
    out.extend_from_slice(format!("\"created\":\"{now}\"{sep}").as_bytes());
    out.extend_from_slice(b.get(brace + 1..).unwrap_or_default());
    Ok(out)
}

/// A tag held in memory, written in one call by [`ArchiveWriter::add_tag`] or
/// [`append_tag`](super::append_tag).
#[derive(Debug, Clone, Default)]
pub struct TagBuilder {
    name: String,
    graph: Option<(GraphFormat, Vec<u8>)>,
    params: Vec<(String, Tensor)>,
    updater: Vec<(String, Vec<Tensor>)>,
    training_config: Option<Vec<u8>>,
    metadata: Option<Vec<u8>>,
    extra: Vec<(String, Vec<u8>)>,
}

impl TagBuilder {
    /// An empty tag named `name` (checked when written).
    pub fn new(name: impl Into<String>) -> Self {
        TagBuilder {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The tag's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the graph.
    pub fn graph(mut self, enc: GraphFormat, bytes: impl Into<Vec<u8>>) -> Self {
        self.graph = Some((enc, bytes.into()));
        self
    }

    /// Adds a parameter.
    pub fn param(mut self, name: impl Into<String>, t: Tensor) -> Self {
        self.params.push((name.into(), t));
        self
    }

    /// Adds the updater state arrays of a parameter.
    pub fn updater(mut self, name: impl Into<String>, arrays: Vec<Tensor>) -> Self {
        self.updater.push((name.into(), arrays));
        self
    }

    /// Sets trainingConfig.fb.
    pub fn training_config(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.training_config = Some(bytes.into());
        self
    }

    /// Sets metadata.json (a JSON object).
    pub fn metadata(mut self, json: impl Into<Vec<u8>>) -> Self {
        self.metadata = Some(json.into());
        self
    }

    /// Adds an entry of the caller's own under the tag directory.
    pub fn extra_entry(mut self, rel_name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        self.extra.push((rel_name.into(), bytes.into()));
        self
    }

    /// Writes everything through `w` and finishes the tag.
    pub(crate) fn write_to(&self, mut w: TagWriter<'_>) -> Result<()> {
        if let Some((enc, g)) = &self.graph {
            w.graph(*enc, g)?;
        }
        for (n, t) in &self.params {
            w.param(n, &t.view())?;
        }
        for (n, ts) in &self.updater {
            let views: Vec<TensorView<'_>> = ts.iter().map(Tensor::view).collect();
            w.updater(n, &views)?;
        }
        if let Some(c) = &self.training_config {
            w.training_config(c)?;
        }
        if let Some(m) = &self.metadata {
            w.metadata(m)?;
        }
        for (n, b) in &self.extra {
            w.extra_entry(n, b)?;
        }
        w.finish()
    }
}

/// Writes a new archive to a temp file beside `path` and renames it into place on
/// [`ArchiveWriter::finish`]; dropped unfinished, it removes the temp file.
///
/// # Examples
///
/// ```
/// use modelzip::{ArchiveWriter, TagBuilder, Tensor};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.zip");
/// let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0])?;
/// let mut writer = ArchiveWriter::create(&path)?;
/// writer.add_tag(TagBuilder::new("fp32").param("fc.w", w.clone()))?;
/// // Or stream a tag, one tensor at a time:
/// let mut tag = writer.begin_tag("int8")?;
/// tag.param("fc.w", &w.view())?; // identical to fp32's: stored once, referenced
/// tag.finish()?;
/// writer.finish()?; // temp file fsynced and renamed over `path`
/// assert_eq!(modelzip::Archive::open(&path)?.tags(), &["fp32", "int8"]);
/// # Ok::<(), modelzip::Error>(())
/// ```
pub struct ArchiveWriter {
    session: Session,
    temp: TempTarget,
    path: ArchivePath,
    _lock: WriteLock,
}

impl std::fmt::Debug for ArchiveWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveWriter")
            .field("path", &self.path.shown)
            .field("resolved", &self.path.real)
            .finish()
    }
}

/// Settles what belongs to the file at `path` (resolved through symlinks) before a new
/// file is renamed over it; the caller holds its write lock. A journal belongs to the file
/// being replaced: it is rolled back (or removed) now, so it can never be replayed onto
/// the new file, which may start with the same bytes. A sharded save staged for the old
/// file is discarded.
pub(crate) fn settle_before_replace(path: &Path) -> Result<()> {
    if path.exists() {
        match super::journal::recover(path) {
            // A journal of some other file: this one is replaced anyway. (A journal
            // that is not a regular file is an error: it is not ours to remove.)
            Err(e) if matches!(e.kind(), ErrorKind::ForeignJournal { .. }) => {
                super::journal::remove(path)?
            }
            other => {
                other?;
            }
        }
    } else {
        super::journal::remove(path)?;
    }
    super::sharded::discard_staged(path)
}

impl ArchiveWriter {
    /// Starts a new archive at `path` (replacing any file there when finished).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        Self::create_with(path, &WriteOptions::default())
    }

    /// [`ArchiveWriter::create`] with options. A symlinked `path` writes the file it
    /// points at, also when that file does not exist yet (the link stays); a link into a
    /// directory that does not exist is refused.
    pub fn create_with(path: impl AsRef<Path>, opts: &WriteOptions) -> Result<Self> {
        let ap = ArchivePath::resolve(path.as_ref())?;
        Self::create_resolved(ap.clone(), opts).map_err(|e| ap.located(e))
    }

    fn create_resolved(ap: ArchivePath, opts: &WriteOptions) -> Result<Self> {
        let path = ap.real.as_path();
        let lock = WriteLock::acquire_resolved(path, opts.wait_for_lock)?;
        super::durable::remove_stale_temps(path);
        // An append to the file there that was cut short is rolled back now, as any writer
        // does. The rest of settling it (a foreign journal removed, a staged sharded save
        // discarded) waits for `finish`, right before the rename: a writer dropped
        // unfinished leaves the file as another writer would find it (a caller that finds
        // under this lock that the archive was created meanwhile appends to it instead).
        if path.exists() {
            match super::journal::recover(path) {
                Err(e) if matches!(e.kind(), ErrorKind::ForeignJournal { .. }) => {}
                other => {
                    other?;
                }
            }
        } else {
            super::journal::remove(path)?;
        }
        let temp = TempTarget::create(path)?;
        let sink: Box<dyn Write> = Box::new(temp.writer(opts.fsync)?);
        Ok(ArchiveWriter {
            session: Session::new(sink, 0, opts.clone()),
            temp,
            path: ap,
            _lock: lock,
        })
    }

    /// Starts writing a tag; tensors go to the file as they are added.
    pub fn begin_tag(&mut self, name: &str) -> Result<TagWriter<'_>> {
        self.session.begin_tag(name)
    }

    /// Writes a whole tag held in memory.
    pub fn add_tag(&mut self, tag: TagBuilder) -> Result<()> {
        let w = self.session.begin_tag(&tag.name)?;
        tag.write_to(w)
    }

    /// Writes tags.txt and the central directory, then fsyncs and renames into place.
    pub fn finish(self) -> Result<()> {
        let path = self.path;
        let fsync = self.session.opts.fsync;
        let (sink, _) = self.session.finish(None).map_err(|e| path.located(e))?;
        drop(sink);
        settle_before_replace(&path.real).map_err(|e| path.located(e))?;
        self.temp.commit(fsync).map_err(|e| path.located(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_is_merged_into_caller_metadata() {
        let m = with_created(Some(b" { } ")).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
        assert!(v["created"].is_string());
        let m = with_created(Some(br#"{"b": 1, "a": 2}"#)).unwrap();
        let text = String::from_utf8(m).unwrap();
        assert!(text.starts_with("{\"created\":\"") && text.ends_with(r#""b": 1, "a": 2}"#));
        assert_eq!(
            with_created(Some(br#"{"created":"x"}"#)).unwrap(),
            br#"{"created":"x"}"#
        );
        assert!(with_created(Some(b"[1]")).is_err());
        assert!(with_created(Some(b"{")).is_err());
    }
}

#[cfg(test)]
mod parallel_hash_tests {
    use crate::archive::{Archive, ArchiveWriter, WriteOptions};
    use crate::tensor::{DType, Tensor};

    /// Each way a tensor is hashed (inline below POOL_HASH_MIN, by the pool, beside its
    /// write above the pool's in-flight bound): manifest hashes must be right, an
    /// identical tensor must still be stored once, and `tensor_owned` must read back the
    /// same bytes as the zero-copy view.
    #[test]
    fn large_tensors_hash_dedup_and_read_owned() {
        for n in [
            super::POOL_HASH_MIN - 8,
            super::POOL_HASH_MIN + 64,
            super::IN_FLIGHT_LIMIT + 64,
        ] {
            hash_dedup_and_read_owned(n);
        }
    }

    fn hash_dedup_and_read_owned(n: usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.mz");
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
        let big = Tensor::from_bytes(DType::Uint8, vec![n as u64], data).unwrap();
        let opts = WriteOptions {
            fsync: false,
            ..WriteOptions::default()
        };
        let mut w = ArchiveWriter::create_with(&path, &opts).unwrap();
        for tag in ["a", "b"] {
            let mut t = w.begin_tag(tag).unwrap();
            t.param("w", &big.view()).unwrap();
            t.param("w2", &big.view()).unwrap();
            t.finish().unwrap();
        }
        w.finish().unwrap();
        let a = Archive::open(&path).unwrap();
        assert!(a.verify().is_ok(), "{:?}", a.verify());
        let tensors = a.entry_names().filter(|e| e.ends_with(".lodtensor"));
        assert_eq!(tensors.count(), 1);
        let tag = a.tag("b").unwrap();
        for p in tag.params() {
            assert!(p.location.shared);
            let owned = tag.tensor_owned(&p.location).unwrap();
            assert_eq!(owned, tag.tensor(&p.location).unwrap().view().to_owned());
            assert_eq!(owned, big);
        }
    }
}
