//! The archive summary (`_summary.txt`, format 1.2): per tag, what `modelzip tags` lists,
//! written by every commit as the last entry before the central directory, with a
//! fingerprint of that directory so a reader can tell cheaply whether it is current.
//! A listing then needs only the archive's tail (one or two requests for a remote one);
//! a stale, absent or malformed summary is ignored and the tables are read instead.

use super::container::ZipEntry;
use super::hashing::hex_digest;
use super::reader::{Archive, TagTables};
use super::tag::graph_entry;
use super::text;
use super::verify::VerifyReport;
use crate::archive::tag::MAX_METADATA_BYTES;
use crate::error::Result;
use crate::graph::GraphFormat;
use crate::tensor::DType;
use sha2::Digest;
use std::collections::BTreeSet;

pub(crate) mod write;

/// Name of the summary entry. It starts with `_`, which no tag name can, so it never
/// collides with a tag's directory.
pub const SUMMARY_TXT: &str = "_summary.txt";

/// The largest summary a reader reads (about 200 bytes a tag: 80,000 tags).
pub const MAX_SUMMARY_BYTES: u64 = 16 << 20;

/// First word and version of the summary's first line. Version 2 (written) has an
/// XXH3-128 fingerprint and a `sharded` field; version 1 (read, as older modelzips wrote
/// it) a SHA-256 fingerprint and no `sharded` field (read from metadata.json instead).
const MAGIC: &str = "modelzip-summary";
const VERSION: u32 = 2;

/// What `modelzip tags` lists of one tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSummary {
    /// The tag's name, spelled as in tags.txt.
    pub name: String,
    /// Parameters (lines of params.txt).
    pub params: u64,
    /// Updater state arrays (refs in updater.txt).
    pub updater_arrays: u64,
    /// Stored bytes of every entry under the tag's directory.
    pub own_bytes: u64,
    /// Stored bytes of the files the tag uses from other tags (tensors, shared graph or
    /// training config), each file counted once.
    pub shared_bytes: u64,
    /// The graph's encoding (own or shared), if the tag has a graph.
    pub graph: Option<GraphFormat>,
    /// The element types of the tag's tensors (parameters and updater state), sorted.
    pub dtypes: Vec<DType>,
    /// metadata.json's `"created"`, when it is a string.
    pub created: Option<String>,
    /// How many processes wrote the tag, for a tag a sharded save wrote (metadata.json's
    /// `"sharded"` `"world_size"`, docs/SHARDED.md).
    pub sharded: Option<u64>,
}

/// Whether an archive's summary can be used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummaryStatus {
    /// Present and describing exactly this central directory.
    Current,
    /// No `_summary.txt` (written by a modelzip before format 1.2, or another tool).
    Absent,
    /// Present but written for another central directory (the archive was changed by a
    /// tool that does not maintain it) or in a newer summary version: ignored.
    Stale(String),
    /// Present, current, but malformed or implausible: ignored (and a `verify` finding).
    Invalid(String),
}

impl std::fmt::Display for SummaryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SummaryStatus::Current => f.write_str("current"),
            SummaryStatus::Absent => f.write_str("absent"),
            SummaryStatus::Stale(why) => write!(f, "stale: {why}"),
            SummaryStatus::Invalid(why) => write!(f, "invalid: {why}"),
        }
    }
}

/// One tag's line of the summary: [`TagSummary`] without `own_bytes`, which the central
/// directory gives exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub name: String,
    pub params: u64,
    pub updater_arrays: u64,
    pub shared_bytes: u64,
    pub graph: Option<GraphFormat>,
    pub dtypes: Vec<DType>,
    pub created: Option<String>,
    pub sharded: Option<u64>,
}

impl Record {
    fn of(s: &TagSummary) -> Record {
        Record {
            name: s.name.clone(),
            params: s.params,
            updater_arrays: s.updater_arrays,
            shared_bytes: s.shared_bytes,
            graph: s.graph,
            dtypes: s.dtypes.clone(),
            created: s.created.clone(),
            sharded: s.sharded,
        }
    }

    fn with_own(self, own_bytes: u64) -> TagSummary {
        TagSummary {
            name: self.name,
            params: self.params,
            updater_arrays: self.updater_arrays,
            own_bytes,
            shared_bytes: self.shared_bytes,
            graph: self.graph,
            dtypes: self.dtypes,
            created: self.created,
            sharded: self.sharded,
        }
    }
}

/// Bytes of fingerprint input hashed at a time.
const FINGERPRINT_CHUNK: usize = 64 << 10;

/// Count and fingerprint (lowercase hex) of the central-directory records of `entries`
/// other than the summary (name, method, CRC-32, stored and uncompressed size; not
/// offsets), in order: XXH3-128 for summary version 2, SHA-256 for version 1.
pub(crate) fn fingerprint<'e>(
    entries: impl Iterator<Item = &'e ZipEntry>,
    version: u32,
) -> (u64, String) {
    if version == 1 {
        let mut h = sha2::Sha256::new();
        let n = gather(entries, |b| h.update(b));
        (n, hex_digest(&h.finalize().into()))
    } else {
        // XXH3's canonical form of a 128-bit hash: the high half first, big-endian.
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let n = gather(entries, |b| h.update(b));
        (n, format!("{:032x}", h.digest128()))
    }
}

/// Feeds `sink` the fingerprint's input of `entries` (other than the summary); returns
/// how many entries that is.
fn gather<'e>(entries: impl Iterator<Item = &'e ZipEntry>, mut sink: impl FnMut(&[u8])) -> u64 {
    // The same bytes, gathered into a buffer and hashed 64 KiB at a time: six `update`s
    // an entry cost more than the hashing on 100,000 entries (BENCHMARKS.md, P5).
    let mut n = 0u64;
    let mut buf: Vec<u8> = Vec::with_capacity(FINGERPRINT_CHUNK + 256);
    for e in entries.filter(|e| *e.name != *SUMMARY_TXT) {
        n += 1;
        buf.extend_from_slice(&(e.name.len() as u64).to_le_bytes());
        buf.extend_from_slice(e.name.as_bytes());
        buf.extend_from_slice(&e.method.to_le_bytes());
        buf.extend_from_slice(&e.crc32.to_le_bytes());
        buf.extend_from_slice(&e.compressed_size.to_le_bytes());
        buf.extend_from_slice(&e.uncompressed_size.to_le_bytes());
        if buf.len() >= FINGERPRINT_CHUNK {
            sink(&buf);
            buf.clear();
        }
    }
    sink(&buf);
    n
}

fn graph_word(g: Option<GraphFormat>) -> &'static str {
    match g {
        Some(GraphFormat::FlatBuffers) => "flatbuffers",
        Some(GraphFormat::ProgramDesc) => "programdesc",
        None => "-",
    }
}

/// The summary's bytes (version 2) for `records` (in tags.txt order) of a directory with
/// this fingerprint.
pub(crate) fn render(count: u64, fp: &str, records: &[Record]) -> String {
    let mut out = format!("{MAGIC} {VERSION} {count} {fp}\n");
    for r in records {
        let dtypes: Vec<&str> = r.dtypes.iter().map(|d| d.name()).collect();
        let created = match r.created.as_deref() {
            None => "-".to_string(),
            Some("-") => "%2D".to_string(),
            Some(c) => text::escape_name(c),
        };
        let sharded = r.sharded.map_or("-".to_string(), |n| n.to_string());
        out.push_str(&format!(
            "{} {} {} {} {} {} {} {}\n",
            r.name,
            r.params,
            r.updater_arrays,
            r.shared_bytes,
            graph_word(r.graph),
            if dtypes.is_empty() {
                "-".to_string()
            } else {
                dtypes.join(",")
            },
            created,
            sharded
        ));
    }
    out
}

/// Why a summary cannot be used: `Ok(stale reason)` when it is to be ignored quietly,
/// `Err(reason)` when it is malformed.
type Refusal = std::result::Result<String, String>;

/// Parses the first line; checks it against the directory. Returns the version.
fn check_header(first: &str, a: &Archive) -> std::result::Result<u32, Refusal> {
    let mut f = first.split(' ');
    if f.next() != Some(MAGIC) {
        return Err(Err(format!("line 1 does not start with {MAGIC:?}")));
    }
    let version = f
        .next()
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| Err("line 1: the version is not a number".to_string()))?;
    if !(1..=VERSION).contains(&version) {
        return Err(Ok(format!(
            "summary version {version}, which this reader does not know (it reads 1 to {VERSION})"
        )));
    }
    let count = f
        .next()
        .and_then(|v| text::parse_index(v).ok())
        .ok_or_else(|| Err("line 1: the entry count is not a decimal number".to_string()))?;
    let digits = if version == 1 { 64 } else { 32 };
    let fp = f
        .next()
        .filter(|h| h.len() == digits && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .ok_or_else(|| {
            Err(format!(
                "line 1: the fingerprint is not {digits} lowercase hex digits"
            ))
        })?;
    if f.next().is_some() {
        return Err(Err("line 1 has more than 4 fields".to_string()));
    }
    let (n, actual) = fingerprint(a.listing().entries.iter(), version);
    if n != count {
        return Err(Ok(format!(
            "it describes a central directory of {count} other entries; the archive has {n}"
        )));
    }
    if actual != fp {
        return Err(Ok(
            "it describes another central directory (the fingerprint differs): the archive \
             was changed by a tool that does not maintain it"
                .to_string(),
        ));
    }
    Ok(version)
}

/// Parses one record line, checking each number against what the entries it counts
/// could hold (a summary that claims more is refused, whatever its fingerprint).
fn parse_record(
    line: &str,
    n: usize,
    a: &Archive,
    version: u32,
) -> std::result::Result<Record, String> {
    let at = |m: String| format!("line {n}: {m}");
    // Version 1 has no `sharded` field.
    let want = if version == 1 { 7 } else { 8 };
    // At most one field past those wanted is split off: a line of millions of spaces
    // (a few KiB deflated) is not made a list of millions of fields.
    let mut fields: Vec<&str> = line.splitn(want + 1, ' ').collect();
    if fields.len() != want {
        let found = match fields.len() {
            n if n > want => format!("more than {want}"),
            n => n.to_string(),
        };
        return Err(at(format!("expected {want} fields, found {found}")));
    }
    let sharded = if version == 1 {
        "-"
    } else {
        fields.pop().unwrap_or("-")
    };
    let [name, params, updater, shared, graph, dtypes, created] = fields[..] else {
        return Err(at(format!(
            "expected {want} fields, found {}",
            fields.len()
        )));
    };
    let num =
        |what: &str, v: &str| text::parse_index(v).map_err(|m| at(format!("{what} {v:?}: {m}")));
    let params = num("the parameter count", params)?;
    let updater_arrays = num("the updater array count", updater)?;
    let shared_bytes = num("the shared byte count", shared)?;
    let size_of = |file: &str| {
        a.entry(&format!("{name}/{file}"))
            .map_or(0, |e| e.uncompressed_size)
    };
    // A params.txt line is at least `x 0\n`; each updater ref after the name at least
    // ` 0` (the first one's line `x 0\n`).
    let most_params = size_of("params.txt") / 4;
    if params > most_params {
        return Err(at(format!(
            "{params} parameters, more than {name}/params.txt ({} bytes) can list",
            size_of("params.txt")
        )));
    }
    let most_arrays = size_of("updater.txt") / 2;
    if updater_arrays > most_arrays {
        return Err(at(format!(
            "{updater_arrays} updater arrays, more than {name}/updater.txt ({} bytes) can list",
            size_of("updater.txt")
        )));
    }
    if shared_bytes > a.len_bytes() {
        return Err(at(format!(
            "{shared_bytes} shared bytes, more than the archive's {} bytes",
            a.len_bytes()
        )));
    }
    let graph = match graph {
        "flatbuffers" => Some(GraphFormat::FlatBuffers),
        "programdesc" => Some(GraphFormat::ProgramDesc),
        "-" => None,
        g => return Err(at(format!("unknown graph encoding {g:?}"))),
    };
    let mut set = BTreeSet::new();
    if dtypes != "-" {
        for d in dtypes.split(',') {
            let dt = DType::from_name(d).map_err(|_| at(format!("unknown dtype {d:?}")))?;
            if !set.insert(dt) {
                return Err(at(format!("dtype {d} is listed twice")));
            }
        }
    }
    let created = match created {
        "-" => None,
        c => {
            let c = text::unescape_name(c).map_err(|m| at(format!("created: {m}")))?;
            if c.len() as u64 > size_of("metadata.json") {
                return Err(at(format!(
                    "a created time of {} bytes, longer than {name}/metadata.json",
                    c.len()
                )));
            }
            Some(c)
        }
    };
    let sharded = match sharded {
        "-" => None,
        w => {
            let n = num("the sharded world size", w)?;
            // At least `{"sharded":{"world_size":N}}`.
            let least = 27 + w.len() as u64;
            if size_of("metadata.json") < least {
                return Err(at(format!(
                    "a sharded world size of {n}, more than {name}/metadata.json ({} bytes) \
                     can say",
                    size_of("metadata.json")
                )));
            }
            Some(n)
        }
    };
    Ok(Record {
        name: name.to_string(),
        params,
        updater_arrays,
        shared_bytes,
        graph,
        dtypes: set.into_iter().collect(),
        created,
        sharded,
    })
}

impl Archive {
    /// The summary's records when it is current and well formed, else why not.
    fn summary_records(&self) -> std::result::Result<Vec<Record>, SummaryStatus> {
        let Some(e) = self.entry(SUMMARY_TXT) else {
            return Err(SummaryStatus::Absent);
        };
        let invalid = |m: String| SummaryStatus::Invalid(m);
        if e.uncompressed_size > MAX_SUMMARY_BYTES || e.compressed_size > MAX_SUMMARY_BYTES {
            return Err(invalid(format!(
                "{} bytes, over the {MAX_SUMMARY_BYTES}-byte limit",
                e.uncompressed_size.max(e.compressed_size)
            )));
        }
        let bytes = self.read_entry(e).map_err(|e| invalid(e.to_string()))?;
        let s = std::str::from_utf8(&bytes)
            .map_err(|err| invalid(format!("not UTF-8 (byte {})", err.valid_up_to())))?;
        let mut lines = s.split_terminator('\n').enumerate();
        let first = lines.next().map_or("", |(_, l)| l);
        let version = check_header(first, self).map_err(|r| match r {
            Ok(stale) => SummaryStatus::Stale(stale),
            Err(bad) => SummaryStatus::Invalid(bad),
        })?;
        let mut records = Vec::new();
        for (i, line) in lines {
            let n = i + 1;
            let Some(want) = self.tags().get(records.len()) else {
                return Err(invalid(format!(
                    "line {n}: more records than tags.txt has tags ({})",
                    self.tags().len()
                )));
            };
            let r = parse_record(line, n, self, version).map_err(invalid)?;
            if r.name != *want {
                return Err(invalid(format!(
                    "line {n}: record of {:?} where tags.txt has {want:?}",
                    r.name
                )));
            }
            records.push(r);
        }
        if records.len() != self.tags().len() {
            return Err(invalid(format!(
                "{} records for {} tags",
                records.len(),
                self.tags().len()
            )));
        }
        if version == 1 {
            self.fill_sharded(&mut records);
        }
        Ok(records)
    }

    /// A version-1 summary has no `sharded` field: each tag's metadata.json says it (a
    /// remote archive's are fetched in one batched request). One that does not read
    /// says nothing (the tag's own reads report it).
    fn fill_sharded(&self, records: &mut [Record]) {
        let metas: Vec<Option<String>> = records
            .iter()
            .map(|r| {
                let m = format!("{}/metadata.json", r.name);
                self.entry(&m)
                    .filter(|e| e.uncompressed_size <= MAX_METADATA_BYTES)
                    .map(|_| m)
            })
            .collect();
        let wanted: Vec<&str> = metas.iter().flatten().map(String::as_str).collect();
        // A failed batch leaves each entry to be read (and to fail) on its own.
        let _ = self.prefetch(&wanted);
        for (r, m) in records.iter_mut().zip(&metas) {
            r.sharded = m
                .as_deref()
                .and_then(|m| self.entry_bytes(m).ok())
                .and_then(|b| metadata_fields(&b).1);
        }
    }

    /// Every tag's summary from the archive's summary entry (`_summary.txt`, FORMAT.md)
    /// when it is current and well formed (reading nothing but that entry: for a remote
    /// archive, no request beyond the open's; a version-1 summary, which lacks the
    /// sharded saves' world sizes, adds each tag's metadata.json, one batched request);
    /// else why it cannot be used.
    pub fn summary(&self) -> std::result::Result<Vec<TagSummary>, SummaryStatus> {
        let records = self.summary_records()?;
        Ok(records
            .into_iter()
            .map(|r| {
                let own = self.stored_bytes_under(&r.name);
                r.with_own(own)
            })
            .collect())
    }

    /// What `modelzip tags` lists of every tag, in tags.txt order: from the summary when
    /// it is current (no table or tensor is read: a remote archive needs no request
    /// beyond the open's, but for a version-1 summary's, [`Archive::summary`]), else from
    /// each tag's tables and tensor headers.
    pub fn tag_summaries(&self) -> Result<Vec<TagSummary>> {
        if let Ok(summaries) = self.summary() {
            return Ok(summaries);
        }
        // Tags are independent: described on every core (two threads halve the listing
        // of 100 tags x 1,000 params; docs/BENCHMARKS-history.md, P5).
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let chunk = self.tags().len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let workers: Vec<_> = self
                .tags()
                .chunks(chunk)
                .map(|names| {
                    s.spawn(move || {
                        names
                            .iter()
                            .map(|n| self.tag_summary_from_tables(n))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(self.tags().len());
            for w in workers {
                let part = w.join().map_err(|_| {
                    crate::Error::new(crate::ErrorKind::InvalidInput(
                        "a thread describing tags panicked".into(),
                    ))
                })??;
                out.extend(part);
            }
            Ok(out)
        })
    }

    /// One tag's summary from its tables, metadata and tensor headers (not the summary).
    pub(crate) fn tag_summary_from_tables(&self, name: &str) -> Result<TagSummary> {
        let i = self.tag_position(name).ok_or_else(|| {
            self.located(crate::ErrorKind::tag_not_found(name, self.tags()).into())
        })?;
        let canon = self.tags()[i].as_str();
        // The tables checked as a `Tag`'s are, keeping only their counts and distinct
        // files (describing every tag needs one tag's at a time, none of their rows).
        let counts = TagTables::count(self, canon).map_err(|e| self.located(e))?;
        let mut dtypes = BTreeSet::new();
        // Many names may refer to one file, and many tags to one file: each file's
        // header is decoded once per archive (`shared_heads` keeps them), the graph is
        // not read (its entry's name says its encoding).
        // From a remote archive: only each tensor's first bytes, in one batched request.
        let found = self.file_dtypes(&counts.files)?;
        let mut shared_bytes = 0u64;
        for (f, dtype) in counts.files.iter().zip(found) {
            if f.shared {
                shared_bytes += self.dir.entries[f.entry].compressed_size;
            }
            dtypes.insert(dtype);
        }
        let shared: Vec<(&'static str, &str)> = counts
            .shared
            .iter()
            .map(|&(file, owner)| (file, self.tags()[owner].as_str()))
            .collect();
        for (file, owner) in &shared {
            shared_bytes += self
                .entry_stored_size(&format!("{owner}/{file}"))
                .unwrap_or(0);
        }
        let graph = graph_entry(self, canon, &shared)?.map(|(g, _)| g);
        let (created, sharded) = self
            .metadata_of(canon)?
            .map_or((None, None), |m| metadata_fields(&m));
        Ok(TagSummary {
            name: canon.to_string(),
            params: counts.params,
            updater_arrays: counts.updater_arrays,
            own_bytes: self.stored_bytes_under(canon),
            shared_bytes,
            graph,
            dtypes: dtypes.into_iter().collect(),
            created,
            sharded,
        })
    }

    /// `verify`'s check of the summary: a malformed one, or a current one that says
    /// something else than the tables, is a finding; a stale or absent one is not.
    pub(crate) fn verify_summary(&self, r: &mut VerifyReport) {
        let records = match self.summary_records() {
            Ok(records) => records,
            Err(SummaryStatus::Invalid(why)) => {
                // An entry that does not read (a deflate bomb, a bad CRC) was reported by
                // the pass over every entry, in the reader's words: the same problem is
                // not listed again in the summary's (the words differ, so the report's
                // dedup would not catch it).
                let reported = r
                    .problems
                    .iter()
                    .any(|p| p.entry.as_deref() == Some(SUMMARY_TXT));
                if !reported {
                    r.push(Some(SUMMARY_TXT), format!("ignored: {why}"));
                }
                return;
            }
            Err(_) => return,
        };
        for rec in records {
            // A tag that cannot be read is reported by the tag's own checks.
            let Ok(actual) = self.tag_summary_from_tables(&rec.name) else {
                continue;
            };
            let actual = Record::of(&actual);
            if actual != rec {
                r.push(
                    Some(SUMMARY_TXT),
                    format!(
                        "says tag {:?} has {}; its tables say {}",
                        rec.name,
                        describe(&rec),
                        describe(&actual)
                    ),
                );
            }
        }
    }
}

fn describe(r: &Record) -> String {
    let dtypes: Vec<&str> = r.dtypes.iter().map(|d| d.name()).collect();
    format!(
        "{} params, {} updater arrays, {} shared bytes, graph {}, dtypes [{}], created {:?}, \
         sharded world size {}",
        r.params,
        r.updater_arrays,
        r.shared_bytes,
        graph_word(r.graph),
        dtypes.join(","),
        r.created,
        r.sharded.map_or("-".to_string(), |w| w.to_string())
    )
}

/// One tag described from its tables even when the summary is current
/// (`test-internals`: the crate's tests compare the two; users get either from
/// [`Archive::tag_summaries`], and `verify` compares them).
#[cfg(feature = "test-internals")]
pub fn summary_from_tables(archive: &Archive, tag: &str) -> Result<TagSummary> {
    archive.tag_summary_from_tables(tag)
}

/// What the summary records of metadata.json: its `"created"` when it is a string, and
/// `"sharded"`'s `"world_size"` when it is a whole number (a sharded save wrote the
/// tag); the rest is skipped unparsed. Either is `None` when the JSON does not parse.
pub(crate) fn metadata_fields(metadata: &[u8]) -> (Option<String>, Option<u64>) {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Fields<'a> {
        #[serde(borrow, default)]
        created: Option<&'a RawValue>,
        #[serde(borrow, default)]
        sharded: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Sharded {
        world_size: u64,
    }
    let Ok(f) = serde_json::from_slice::<Fields<'_>>(metadata) else {
        return (None, None);
    };
    let created = f.created.and_then(|c| serde_json::from_str(c.get()).ok());
    let sharded = f
        .sharded
        .and_then(|s| serde_json::from_str::<Sharded>(s.get()).ok())
        .map(|s| s.world_size);
    (created, sharded)
}

/// True for the entries every commit writes anew (tags.txt and the summary): a write
/// that keeps or copies an archive's entries leaves these out.
pub(crate) fn written_by_commit(name: &str) -> bool {
    name == super::reader::TAGS_TXT || name == SUMMARY_TXT
}
