//! One tag of an archive: [`Tag`], its params.txt / updater.txt / shared.txt tables
//! resolved to tensor locations, and its files.

#[cfg(unix)]
use super::container::METHOD_STORED;
use super::reader::{
    Archive, Backing, CachedHead, ParamEntry, TagTables, TensorData, TensorKind, TensorLocation,
    UpdaterEntry,
};
use super::shared_str::SharedStr;
use super::text::{self, ParamRef};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::GraphFormat;
#[cfg(unix)]
use crate::tensor::codec::decode_tensor_record;
use crate::tensor::{Tensor, TensorView};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

impl Archive {
    /// The tag named `name` (ASCII case ignored), with its params.txt and updater.txt parsed.
    /// The tables are read and checked once per archive; later calls share them.
    pub fn tag(&self, name: &str) -> Result<Tag<'_>> {
        self.tag_cached(name, true)
    }

    /// [`Tag::metadata`] of the tag spelled `canon` (as tags.txt spells it), without
    /// loading its tables: what a caller that reads only metadata (the checkpoints'
    /// steps and metrics) pays per tag.
    pub(crate) fn metadata_of(&self, canon: &str) -> Result<Option<Cow<'_, [u8]>>> {
        let name = format!("{canon}/metadata.json");
        match self.entry(&name) {
            None => Ok(None),
            Some(e) if e.uncompressed_size > MAX_METADATA_BYTES => Err(self.located(
                Error::new(ErrorKind::LimitExceeded {
                    what: "metadata.json size",
                    size: e.uncompressed_size,
                    limit: MAX_METADATA_BYTES,
                })
                .in_entry(name),
            )),
            Some(_) => self.entry_bytes(&name).map(Some),
        }
    }

    /// [`Archive::tag`]; with `keep` false, tables not cached yet are not kept (a
    /// caller visiting every tag once, as verify does, needs one tag's at a time).
    pub(super) fn tag_cached(&self, name: &str, keep: bool) -> Result<Tag<'_>> {
        let i = self
            .tag_position(name)
            .ok_or_else(|| self.located(ErrorKind::tag_not_found(name, &self.tags).into()))?;
        let canon = self.tags[i].as_str();
        let slot = &self.tables[i];
        let tables = match slot.get() {
            Some(t) => Arc::clone(t),
            None => {
                let t = Arc::new(TagTables::load(self, canon).map_err(|e| self.located(e))?);
                if keep {
                    Arc::clone(slot.get_or_init(|| t))
                } else {
                    t
                }
            }
        };
        let shared = tables
            .shared
            .iter()
            .map(|&(file, owner)| (file, self.tags[owner].as_str()))
            .collect();
        Ok(Tag {
            archive: self,
            name: canon,
            tables,
            shared,
        })
    }

    /// The default (newest) tag.
    pub fn latest(&self) -> Result<Tag<'_>> {
        match self.default_tag() {
            Some(t) => self.tag(t),
            None => Err(self.located(Error::new(ErrorKind::InvalidInput(
                "the archive has no tags".into(),
            )))),
        }
    }
    /// Resolves one ref of the table `table_entry` (line `line`) of tag `own`.
    fn resolve(
        &self,
        own: &SharedStr,
        r: &ParamRef,
        kind: TensorKind,
        at: (&str, usize),
        cursor: &mut ResolveCursor,
    ) -> Result<TensorLocation> {
        let file = self.resolve_file(own, r, kind, at, cursor)?;
        Ok(TensorLocation {
            // The tag's own name is one string for all its locations.
            tag: if file.shared {
                SharedStr::from(file.tag)
            } else {
                own.clone()
            },
            kind,
            index: r.index,
            entry: SharedStr::from(cursor.name.as_str()),
            shared: file.shared,
            entry_hint: file.entry,
        })
    }

    /// The entry ref `r` of the table `table_entry` (line `line`) of tag `own` names,
    /// found as [`Archive::resolve`] finds it (the entry's name is left in `cursor`),
    /// without building its location's strings.
    fn resolve_file<'s>(
        &'s self,
        own: &'s str,
        r: &ParamRef,
        kind: TensorKind,
        (table_entry, line): (&str, usize),
        cursor: &mut ResolveCursor,
    ) -> Result<FileRef<'s>> {
        let tag = match &r.tag {
            None => None,
            Some(t) => Some(self.canonical_tag(t).ok_or_else(|| {
                Error::new(ErrorKind::Syntax(format!(
                    "reference {r} names tag {t:?}, which tags.txt does not list"
                )))
                .in_entry(table_entry)
                .at_line(line)
            })?),
        };
        let name_tag = tag.unwrap_or(own);
        // Built by hand in the caller's buffer: this runs once per params.txt line, and
        // format! (or a String for the number and one for the name) costs 3x more.
        let entry = &mut cursor.name;
        entry.clear();
        for part in [name_tag, "/", kind.dir(), "/"] {
            entry.push_str(part);
        }
        entry.push_str(itoa::Buffer::new().format(r.index));
        entry.push_str(".lodtensor");
        let entry = entry.as_str();
        // Writers store a tag's files in the order of its table: the entry after the
        // previous line's is checked first, and the name index asked only when it is
        // not that one (names are unique: the same position either way).
        let guess = cursor.next;
        let at_guess = self
            .dir
            .entries
            .get(guess)
            .is_some_and(|e| *e.name == *entry);
        let found = match at_guess {
            true => Some(guess),
            false => self.dir.index.get(&self.dir.entries, entry),
        };
        let Some(position) = found else {
            return Err(Error::new(ErrorKind::MissingEntry(entry.to_string()))
                .in_entry(table_entry)
                .at_line(line));
        };
        cursor.next = position + 1;
        let shared = name_tag != own;
        Ok(FileRef {
            entry: position,
            tag: name_tag,
            kind,
            index: r.index,
            shared,
        })
    }
}

/// A tensor file a table refers to, as [`Archive::resolve_file`] found it: what a
/// listing needs of it, with no string of its own ([`FileRef::location`] builds them).
#[derive(Clone, Copy, Debug)]
pub(super) struct FileRef<'a> {
    /// The entry's position in the central directory.
    pub(super) entry: usize,
    /// The owning tag, spelled as in tags.txt.
    pub(super) tag: &'a str,
    pub(super) kind: TensorKind,
    /// The file number.
    pub(super) index: u64,
    /// True when the file is owned by a tag other than the one that lists it.
    pub(super) shared: bool,
}

impl FileRef<'_> {
    /// The file's location, with its strings.
    pub(super) fn location(&self, archive: &Archive) -> TensorLocation {
        TensorLocation {
            tag: SharedStr::from(self.tag),
            kind: self.kind,
            index: self.index,
            entry: SharedStr::from(&*archive.dir.entries[self.entry].name),
            shared: self.shared,
            entry_hint: self.entry,
        }
    }
}

/// What resolving one table's refs carries from one to the next.
struct ResolveCursor {
    /// The entry after the previous ref's: writers store a tag's files in the order of
    /// its table, so the next ref's is checked there before the name index is asked.
    next: usize,
    /// The entry name being built (one buffer for every ref).
    name: String,
}

/// The largest metadata.json a reader accepts (created time, description, quantization
/// records, user keys: kilobytes in practice). Its parsed form costs several times its
/// size, so the bound keeps a hostile one from costing gigabytes.
pub const MAX_METADATA_BYTES: u64 = 4 << 20;
/// Reads `<tag>/shared.txt` (FORMAT.md): `FILE TAG` lines, FILE one of
/// [`SHAREABLE_FILES`](text::SHAREABLE_FILES) at most once, TAG another listed tag that
/// holds `TAG/FILE` itself, and the tag not holding FILE too.
fn load_shared<'a>(archive: &'a Archive, tag: &str) -> Result<Vec<(&'static str, &'a str)>> {
    let entry = format!("{tag}/{SHARED_TXT}");
    if !archive.has_entry(&entry) {
        return Ok(Vec::new());
    }
    let e = archive
        .entry(&entry)
        .map(|e| e.uncompressed_size)
        .unwrap_or(0);
    if e > MAX_SHARED_TXT {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "shared.txt size",
            size: e,
            limit: MAX_SHARED_TXT,
        })
        .in_entry(entry));
    }
    let bytes = archive.entry_bytes(&entry)?;
    let mut out: Vec<(&'static str, &'a str)> = Vec::new();
    for (file, owner, line) in text::parse_shared(&bytes, &entry)? {
        let bad = |why: String| {
            Error::new(ErrorKind::Syntax(why))
                .in_entry(entry.clone())
                .at_line(line)
        };
        let owner = archive.canonical_tag(&owner).ok_or_else(|| {
            bad(format!(
                "{file} is shared from tag {owner:?}, which tags.txt does not list"
            ))
        })?;
        if owner == tag {
            return Err(bad(format!("{file} is shared from the tag itself")));
        }
        let held = format!("{owner}/{file}");
        if !archive.has_entry(&held) {
            return Err(Error::new(ErrorKind::MissingEntry(held))
                .in_entry(entry.clone())
                .at_line(line));
        }
        if archive.has_entry(&format!("{tag}/{file}")) {
            return Err(bad(format!(
                "the tag has its own {file} and shares one from tag {owner:?}"
            )));
        }
        if out.iter().any(|(f, _)| *f == file) {
            return Err(bad(format!("{file} is listed twice")));
        }
        out.push((file, owner));
    }
    Ok(out)
}

/// Whether `tag` takes `file` from another tag.
pub(super) fn is_shared(tag: &Tag<'_>, file: &str) -> bool {
    tag.shared_files().iter().any(|(f, _)| *f == file)
}

/// Name of a tag's shared-files table (FORMAT.md): files it uses from another tag.
pub const SHARED_TXT: &str = "shared.txt";

/// Largest shared.txt read (three short lines in practice).
const MAX_SHARED_TXT: u64 = 64 << 10;

/// Parses one table of a tag (params.txt, or updater.txt when `updater`) line by line:
/// `resolve` turns a line's refs into locations, `build` makes the row. Sized once from
/// the line count (growing by doubling would hold the old and the new buffer at once).
/// Errors come in the order of the checks, not of the lines: syntax anywhere, then
/// duplicate names, then refs (a ref that does not resolve is kept until the rest of the
/// file has been read for the other two).
fn load_table<'t, T, R>(
    bytes: &'t [u8],
    entry: &str,
    updater: bool,
    name_of: impl Fn(&T) -> &str,
    mut resolve: impl FnMut(&[ParamRef], usize) -> Result<R>,
    mut build: impl FnMut(Cow<'t, str>, R) -> T,
) -> Result<Vec<T>> {
    let n = line_count(bytes);
    let mut rows = Vec::new();
    rows.reserve_exact(n);
    let mut lines = Vec::with_capacity(n);
    let mut unresolved: Option<Error> = None;
    let mut rest: Vec<(Cow<'t, str>, usize)> = Vec::new();
    text::for_each_table_line(bytes, entry, updater, |name, refs, line| {
        if unresolved.is_none() {
            match resolve(refs, line) {
                Ok(r) => {
                    rows.push(build(name, r));
                    lines.push(line);
                    return Ok(());
                }
                Err(e) => unresolved = Some(e),
            }
        }
        rest.push((name, line));
        Ok(())
    })?;
    text::check_unique_names(
        rows.iter()
            .zip(&lines)
            .map(|(row, &l)| (name_of(row), l))
            .chain(rest.iter().map(|(n, l)| (n.as_ref(), *l))),
        entry,
    )?;
    match unresolved {
        Some(e) => Err(e),
        None => Ok(rows),
    }
}

/// Lines in a table (an upper bound on its rows: blank lines are skipped).
fn line_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count() + 1
}

type ResolvedMap = crate::keyed::KeyedMap<(TensorKind, ParamRef), (TensorLocation, u32)>;

thread_local! {
    /// The map of each distinct ref to its location that loading a tag's tables fills,
    /// kept (empty) between loads on this thread: loading many tags grows one map instead
    /// of a fresh one per tag, whose pages the kernel zeroed each time (a fifth of `tags`'
    /// time when it loaded every tag; docs/BENCHMARKS.md, P5). Counting a tag's tables
    /// ([`TagTables::count`]) resolves refs to entry positions without it.
    static RESOLVED: std::cell::Cell<Option<ResolvedMap>> = const { std::cell::Cell::new(None) };
}

/// The largest map (in distinct refs) [`RESOLVED`] keeps between loads: a huge table's
/// is freed rather than held by the thread (this one is under 2 MiB).
const RESOLVED_KEPT: usize = 1 << 13;

/// One tag of an open archive, with its tables parsed (once per archive: every `Tag` of
/// one tag shares them).
#[derive(Debug)]
pub struct Tag<'a> {
    archive: &'a Archive,
    name: &'a str,
    tables: Arc<TagTables>,
    /// The files shared.txt says the tag uses from other tags: (file, owning tag).
    shared: Vec<(&'static str, &'a str)>,
}

/// Reads one tag's tables: prefetches them, resolves each distinct ref once to its
/// location (through the thread's reused map, [`RESOLVED`]; [`TableReader::resolve`]) or
/// each ref to its entry's position ([`TableReader::resolve_file`]), and hands the map
/// back when dropped. What [`TagTables::load`] and [`TagTables::count`] share: the same
/// checks either way.
struct TableReader<'a> {
    archive: &'a Archive,
    /// The tag, spelled as tags.txt spells it.
    own_name: &'a str,
    own: SharedStr,
    resolved: ResolvedMap,
    cursor: ResolveCursor,
    /// `<tag>/params.txt` and `<tag>/updater.txt`.
    params_txt: String,
    updater_txt: String,
}

impl<'a> TableReader<'a> {
    fn new(archive: &'a Archive, name: &'a str) -> Result<TableReader<'a>> {
        let mut resolved = RESOLVED.with(|c| c.take()).unwrap_or_default();
        resolved.clear();
        let params_txt = format!("{name}/params.txt");
        let updater_txt = format!("{name}/updater.txt");
        let meta = format!("{name}/metadata.json");
        // A remote archive fetches the tag's tables in one batched request; metadata.json
        // only within the limit `metadata` holds it to.
        let meta_ok = archive.entry(&meta).is_some_and(|e| {
            e.uncompressed_size <= MAX_METADATA_BYTES && e.compressed_size <= MAX_METADATA_BYTES
        });
        let mut ahead = vec![params_txt.as_str(), updater_txt.as_str()];
        if meta_ok {
            ahead.push(&meta);
        }
        archive.prefetch(&ahead)?;
        Ok(TableReader {
            archive,
            own_name: name,
            own: SharedStr::from(name),
            resolved,
            cursor: ResolveCursor {
                next: usize::MAX,
                name: String::new(),
            },
            params_txt,
            updater_txt,
        })
    }

    /// The location of ref `r` of a table of this tag, and the ref's number: distinct
    /// refs are numbered in the order met (a parameter's is its slot in the header cache:
    /// params are read first, so theirs are 0..the count of distinct ones). Many names
    /// may refer to one file (that is what sharing is): each distinct ref is resolved
    /// once, and every name that uses it shares its location's strings.
    fn resolve(
        &mut self,
        r: &ParamRef,
        kind: TensorKind,
        line: usize,
    ) -> Result<(TensorLocation, u32)> {
        if let Some(found) = self.resolved.get(&(kind, r.clone())) {
            return Ok(found.clone());
        }
        let table = match kind {
            TensorKind::Params => &self.params_txt,
            TensorKind::Updater => &self.updater_txt,
        };
        let loc = self
            .archive
            .resolve(&self.own, r, kind, (table, line), &mut self.cursor)?;
        // At most one per line of a table held in memory: fits u32 on 64-bit targets
        // for any table under 4 G lines; saturating keeps a larger one correct.
        let id = u32::try_from(self.resolved.len()).unwrap_or(u32::MAX);
        self.resolved.insert((kind, r.clone()), (loc.clone(), id));
        Ok((loc, id))
    }

    /// The file ref `r` of a table of this tag names, without its location's strings:
    /// what counting the tag's files needs ([`TagTables::count`]). Not remembered: a
    /// ref met again is found again (the name built, the entry after the previous one
    /// compared), which costs less than a map's lookup when refs are distinct, as they
    /// are in every table a writer here makes.
    fn resolve_file(&mut self, r: &ParamRef, kind: TensorKind, line: usize) -> Result<FileRef<'a>> {
        let table = match kind {
            TensorKind::Params => &self.params_txt,
            TensorKind::Updater => &self.updater_txt,
        };
        self.archive
            .resolve_file(self.own_name, r, kind, (table, line), &mut self.cursor)
    }

    /// The bytes of `entry` (one of this tag's tables), if the tag has it.
    fn table(&self, entry: &str) -> Result<Option<Cow<'a, [u8]>>> {
        if !self.archive.has_entry(entry) {
            return Ok(None);
        }
        self.archive.entry_bytes(entry).map(Some)
    }
}

impl Drop for TableReader<'_> {
    fn drop(&mut self) {
        if self.resolved.capacity() <= RESOLVED_KEPT {
            self.resolved.clear();
            let map = std::mem::take(&mut self.resolved);
            RESOLVED.with(|c| c.set(Some(map)));
        }
    }
}

/// What a tag's summary needs of its tables ([`TagTables::count`]).
pub(super) struct TableCounts<'a> {
    pub(super) params: u64,
    pub(super) updater_arrays: u64,
    /// Each distinct tensor file the tables refer to, in the order first met.
    pub(super) files: Vec<FileRef<'a>>,
    /// The files shared.txt says the tag uses from other tags: (file, owning tag's
    /// position in tags.txt).
    pub(super) shared: Vec<(&'static str, usize)>,
}

impl TagTables {
    fn load(archive: &Archive, name: &str) -> Result<TagTables> {
        let mut reader = TableReader::new(archive, name)?;
        let mut param_slot = Vec::new();
        let mut params = Vec::new();
        let (pname, uname) = (reader.params_txt.clone(), reader.updater_txt.clone());
        if let Some(bytes) = reader.table(&pname)? {
            params = load_table(
                &bytes,
                &pname,
                false,
                |p: &ParamEntry| p.name.as_str(),
                |refs, line| reader.resolve(&refs[0], TensorKind::Params, line),
                |name, (location, slot)| {
                    param_slot.push(slot);
                    ParamEntry {
                        name: name.into_owned(),
                        location,
                    }
                },
            )?;
        }
        let header_slots = param_slot.iter().max().map_or(0, |&m| m as usize + 1);
        let mut updater = Vec::new();
        if let Some(bytes) = reader.table(&uname)? {
            updater = load_table(
                &bytes,
                &uname,
                true,
                |u: &UpdaterEntry| u.name.as_str(),
                |refs, line| {
                    refs.iter()
                        .map(|r| reader.resolve(r, TensorKind::Updater, line).map(|(l, _)| l))
                        .collect::<Result<Vec<_>>>()
                },
                |name, arrays| UpdaterEntry {
                    name: name.into_owned(),
                    arrays,
                },
            )?;
        }
        drop(reader);
        params.shrink_to_fit();
        updater.shrink_to_fit();
        let shared = load_shared(archive, name)?
            .into_iter()
            .filter_map(|(file, owner)| Some((file, archive.tag_position(owner)?)))
            .collect();
        Ok(TagTables {
            params,
            param_slot: param_slot.into_boxed_slice(),
            header_slots,
            heads: OnceLock::new(),
            updater,
            by_name: OnceLock::new(),
            shared,
        })
    }

    /// Tag `name`'s tables checked exactly as [`TagTables::load`] checks them, keeping
    /// only what its summary needs: no row is built, and a name without an escape is not
    /// copied (a `Tag` of 1,000 params holds 1,000 names and locations; listing 100 tags
    /// built and dropped them all: BENCHMARKS.md, P5).
    pub(super) fn count<'a>(archive: &'a Archive, name: &'a str) -> Result<TableCounts<'a>> {
        let mut reader = TableReader::new(archive, name)?;
        let (pname, uname) = (reader.params_txt.clone(), reader.updater_txt.clone());
        let mut met = DistinctFiles::default();
        let (mut params, mut updater_arrays) = (0u64, 0u64);
        // Both tables alike: a params.txt line has one ref, an updater.txt line one or more.
        for (table, updater, kind) in [
            (&pname, false, TensorKind::Params),
            (&uname, true, TensorKind::Updater),
        ] {
            let Some(bytes) = reader.table(table)? else {
                continue;
            };
            let mut arrays = 0u64;
            let names = load_table(
                &bytes,
                table,
                updater,
                |n: &Cow<'_, str>| n.as_ref(),
                |refs, line| {
                    for r in refs {
                        met.push(reader.resolve_file(r, kind, line)?);
                    }
                    Ok(refs.len() as u64)
                },
                |name, n| {
                    arrays += n;
                    name
                },
            )?;
            match kind {
                TensorKind::Params => params = names.len() as u64,
                TensorKind::Updater => updater_arrays = arrays,
            }
        }
        drop(reader);
        let files = met.files;
        let shared = load_shared(archive, name)?
            .into_iter()
            .filter_map(|(file, owner)| Some((file, archive.tag_position(owner)?)))
            .collect();
        Ok(TableCounts {
            params,
            updater_arrays,
            files,
            shared,
        })
    }
}

/// Each file a tag's tables refer to once, in the order first met (many refs may name
/// one file: `5` and `own/5`, or many names sharing it), holding one item per distinct
/// file however many refs name each.
#[derive(Default)]
struct DistinctFiles<'a> {
    files: Vec<FileRef<'a>>,
    /// The entries of `files`, once a file was met out of ascending entry order: until
    /// then (a writer here stores a tag's files in the order of its tables) each file
    /// met after the last is new, and no set is kept.
    seen: Option<crate::keyed::KeyedSet<usize>>,
}

impl<'a> DistinctFiles<'a> {
    fn push(&mut self, f: FileRef<'a>) {
        let seen = match (&mut self.seen, self.files.last()) {
            (None, None) => return self.files.push(f),
            (None, Some(last)) if last.entry < f.entry => return self.files.push(f),
            (None, Some(_)) => self
                .seen
                .insert(self.files.iter().map(|f| f.entry).collect()),
            (Some(seen), _) => seen,
        };
        if seen.insert(f.entry) {
            self.files.push(f);
        }
    }
}

/// [`Tag::file_entry`] of tag `name` of `archive`, whose shared.txt says `shared`.
fn file_entry(
    archive: &Archive,
    name: &str,
    shared: &[(&str, &str)],
    file: &str,
) -> Option<String> {
    let own = format!("{name}/{file}");
    if archive.has_entry(&own) {
        return Some(own);
    }
    shared
        .iter()
        .find(|(f, _)| *f == file)
        .map(|(f, owner)| format!("{owner}/{f}"))
}

/// [`Tag::graph_entry`] of tag `name` of `archive`, whose shared.txt says `shared`.
pub(super) fn graph_entry(
    archive: &Archive,
    name: &str,
    shared: &[(&str, &str)],
) -> Result<Option<(GraphFormat, String)>> {
    let fb = file_entry(archive, name, shared, "graph.fb");
    let pd = file_entry(archive, name, shared, "graph.pdmodel");
    match (fb, pd) {
        (Some(_), Some(pd)) => Err(archive.located(
            Error::new(ErrorKind::InvalidInput(format!(
                "tag {name:?} has both graph.fb and graph.pdmodel; at most one is allowed"
            )))
            .in_entry(pd),
        )),
        (Some(fb), None) => Ok(Some((GraphFormat::FlatBuffers, fb))),
        (None, Some(pd)) => Ok(Some((GraphFormat::ProgramDesc, pd))),
        (None, None) => Ok(None),
    }
}

impl<'a> Tag<'a> {
    /// The files of this tag stored once in another tag (shared.txt): (file, owning tag),
    /// e.g. `("graph.pdmodel", "step-1")`.
    pub fn shared_files(&self) -> &[(&'static str, &'a str)] {
        &self.shared
    }

    /// The entry holding the tag's file `file` (`graph.fb`, `graph.pdmodel`,
    /// `trainingConfig.fb`): its own, or the owner's that shared.txt names; `None` when
    /// the tag has neither.
    pub(crate) fn file_entry(&self, file: &str) -> Option<String> {
        file_entry(self.archive, self.name, &self.shared, file)
    }

    /// The tag's name, spelled as in tags.txt.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The archive this tag belongs to.
    pub fn archive(&self) -> &'a Archive {
        self.archive
    }

    /// The graph and its encoding, if the tag has one (its own, or the one shared.txt
    /// points at); both encodings present is an error.
    pub fn graph(&self) -> Result<Option<(GraphFormat, Cow<'a, [u8]>)>> {
        match self.graph_entry()? {
            Some((format, entry)) => Ok(Some((format, self.archive.entry_bytes(&entry)?))),
            None => Ok(None),
        }
    }

    /// The graph's encoding and the entry that holds it (the tag's own, or the owner's
    /// that shared.txt names), without reading it; both encodings present is an error.
    pub(crate) fn graph_entry(&self) -> Result<Option<(GraphFormat, String)>> {
        graph_entry(self.archive, self.name, &self.shared)
    }

    /// The parameters, in params.txt order.
    pub fn params(&self) -> &[ParamEntry] {
        &self.tables.params
    }

    /// The parameter `name`'s tensor. The first read of a stored tensor file decodes and
    /// checks its record header; later reads of it (under any name, through any [`Tag`]
    /// of this archive) reuse the decoded header.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("model.zip");
    /// # let w = modelzip::Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
    /// # let mut writer = modelzip::ArchiveWriter::create(&path)?;
    /// # writer.add_tag(modelzip::TagBuilder::new("fp32").param("fc.w", w))?;
    /// # writer.finish()?;
    /// let archive = modelzip::Archive::open(&path)?;
    /// let tag = archive.latest()?;
    /// let data = tag.param("fc.w")?;
    /// assert!(data.is_mapped()); // stored entries are views of the memory map
    /// let view = data.view();
    /// assert_eq!(view.dims(), &[2, 2]);
    /// assert_eq!(view.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
    /// assert!(tag.param("missing").is_err());
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn param(&self, name: &str) -> Result<TensorData<'a>> {
        let i = &self.param_index(name)?;
        let loc = &self.tables.params[*i].location;
        // A stored entry of a local archive: the header decoded by the first call is
        // reused (the bytes cannot change while the archive is open).
        let slot = self.tables.param_slot.get(*i).and_then(|&s| {
            self.tables
                .heads
                .get_or_init(|| {
                    (0..self.tables.header_slots)
                        .map(|_| OnceLock::new())
                        .collect()
                })
                .get(s as usize)
        });
        if let Some(head) = slot.and_then(OnceLock::get)
            && let Some(bytes) = self.archive.mapped_stored(loc)
            && let Some(data) = bytes.get(head.header_len..)
        {
            return Ok(TensorData::Mapped(TensorView::from_checked_parts(
                head.dtype,
                head.dims.clone(),
                head.lod.clone(),
                data,
            )));
        }
        let t = self.tensor(loc)?;
        if let (Some(slot), TensorData::Mapped(v)) = (slot, &t)
            && let Some(bytes) = self.archive.mapped_stored(loc)
        {
            let _ = slot.set(CachedHead {
                dtype: v.dtype(),
                dims: v.dims().to_vec(),
                lod: v.lod().clone(),
                header_len: bytes.len().saturating_sub(v.data().len()),
            });
        }
        Ok(t)
    }

    /// The rows or the box of parameter `name` that `ranges` selects (one range per
    /// leading dimension, the rest whole: `&[a..b]` is rows `a..b`), reading only what it
    /// needs: a zero-copy view of the map for rows of a local archive, one range request
    /// for rows of a remote one; [`Archive::tensor_slice`] says what each case reads.
    /// Errors name the parameter and the dimension of a bad range.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("model.zip");
    /// # let w = modelzip::Tensor::from_slice(vec![4, 2], &[0f32, 1., 2., 3., 4., 5., 6., 7.])?;
    /// # let mut writer = modelzip::ArchiveWriter::create(&path)?;
    /// # writer.add_tag(modelzip::TagBuilder::new("fp32").param("fc.w", w))?;
    /// # writer.finish()?;
    /// let archive = modelzip::Archive::open(&path)?;
    /// let tag = archive.latest()?;
    /// let rows = tag.param_slice("fc.w", &[1..3])?; // rows 1 and 2
    /// assert!(rows.is_mapped());
    /// assert_eq!(rows.view().as_slice::<f32>()?, &[2., 3., 4., 5.]);
    /// let column = tag.param_slice("fc.w", &[0..4, 1..2])?;
    /// assert_eq!(column.view().to_vec::<f32>()?, [1., 3., 5., 7.]);
    /// assert!(tag.param_slice("fc.w", &[3..5]).is_err()); // dimension 0 has 4
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn param_slice(&self, name: &str, ranges: &[Range<u64>]) -> Result<TensorData<'a>> {
        let i = self.param_index(name)?;
        let loc = &self.tables.params[i].location;
        self.archive.slice_at(
            loc,
            ranges,
            &format!("param {name:?} of tag {:?}", self.name),
        )
    }

    /// The position of parameter `name` in params.txt.
    pub(crate) fn param_index(&self, name: &str) -> Result<usize> {
        let by_name = self.tables.by_name.get_or_init(|| {
            self.tables
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name.clone(), i))
                .collect()
        });
        by_name.get(name).copied().ok_or_else(|| {
            self.archive.located(Error::new(ErrorKind::ParamNotFound(
                name.to_string(),
                self.name.to_string(),
            )))
        })
    }

    /// The updater state, in updater.txt order.
    pub fn updater(&self) -> &[UpdaterEntry] {
        &self.tables.updater
    }

    /// Every tensor location the tag's names refer to: the parameters' in params.txt
    /// order, then the updater arrays'. A file that several names share appears once
    /// per name; callers that read each file once keep a set of `entry`s.
    pub fn locations(&self) -> impl Iterator<Item = &TensorLocation> {
        self.tables
            .params
            .iter()
            .map(|p| &p.location)
            .chain(self.tables.updater.iter().flat_map(|u| u.arrays.iter()))
    }

    /// Reads the tensor at `loc`: zero-copy when the entry is stored in a local archive
    /// ([`Archive::tensor`]).
    pub fn tensor(&self, loc: &TensorLocation) -> Result<TensorData<'a>> {
        self.archive.tensor(loc)
    }

    /// Reads the tensor at `loc` into owned memory. From a memory-mapped archive the data
    /// is read from the file (`pread`) rather than copied out of the map, so loading a whole
    /// tag costs its tensor bytes once in resident memory, not twice (copy + mapped pages).
    /// Data of 2 MiB or more is read in page-aligned pieces on up to 4 threads (one per
    /// core), which fault the new memory in parallel.
    pub fn tensor_owned(&self, loc: &TensorLocation) -> Result<Tensor> {
        let archive = self.archive;
        #[cfg(unix)]
        if let Backing::Map(_, file) = &archive.backing
            && let Some(e) = archive.location_entry(loc)
            && e.method == METHOD_STORED
        {
            let located = |err: Error| archive.located(err.in_entry(loc.entry.clone()));
            let raw = archive.raw_data(e).map_err(located)?;
            // Decoding touches only the record header; the data lies in the file at the
            // entry's data offset plus the record's. Large data is read on several
            // threads (faulting in the new allocation is the cost; see `pread`).
            let rec = decode_tensor_record(&raw).map_err(located)?;
            let view = rec.tensor;
            let offset = archive.data_start(e).map_err(located)? + rec.data_offset;
            let mut data = vec![0u8; view.data().len()];
            super::pread::read_exact_at_split(file, &mut data, offset).map_err(|(e, at)| {
                archive.located(Error::from(e).in_entry(loc.entry.clone()).at_offset(at))
            })?;
            let t = Tensor::from_bytes(view.dtype(), view.dims().to_vec(), data)?;
            return if view.lod().is_empty() {
                Ok(t)
            } else {
                t.with_lod(view.lod().clone())
            };
        }
        match self.tensor(loc)? {
            TensorData::Owned(t) => Ok(t),
            TensorData::Mapped(v) => Ok(v.to_owned()),
        }
    }

    /// `<tag>/trainingConfig.fb` (or the owner's, when shared.txt points at it), raw.
    pub fn training_config(&self) -> Result<Option<Cow<'a, [u8]>>> {
        match self.file_entry("trainingConfig.fb") {
            Some(e) => self.archive.entry_bytes(&e).map(Some),
            None => Ok(None),
        }
    }

    /// `<tag>/metadata.json`, raw; at most [`MAX_METADATA_BYTES`] (checked before it is
    /// read or inflated).
    pub fn metadata(&self) -> Result<Option<Cow<'a, [u8]>>> {
        self.archive.metadata_of(self.name)
    }

    /// Bytes the file at `loc` takes in the archive as stored (0 if it has none).
    pub fn stored_size(&self, loc: &TensorLocation) -> u64 {
        self.archive
            .location_entry(loc)
            .map_or(0, |e| e.compressed_size)
    }

    /// Every zip entry under `<tag>/`.
    pub fn own_entries(&self) -> Vec<&'a str> {
        self.archive
            .entries_under(self.name)
            .map(|e| &*e.name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Archive, ArchiveWriter, TagBuilder, Tensor};

    fn two_tags() -> (tempfile::TempDir, Archive) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.mz");
        let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
        let mut writer = ArchiveWriter::create(&path).unwrap();
        for t in ["a", "b"] {
            writer
                .add_tag(TagBuilder::new(t).param("w", w.clone()))
                .unwrap();
        }
        writer.finish().unwrap();
        let archive = Archive::open(&path).unwrap();
        (dir, archive)
    }

    #[test]
    fn a_tags_tables_are_parsed_once_and_shared() {
        let (_dir, archive) = two_tags();
        let first = archive.tag("a").unwrap();
        let again = archive.tag("A").unwrap();
        assert!(std::ptr::eq(first.params(), again.params()));
        let other = archive.tag("b").unwrap();
        assert!(!std::ptr::eq(first.params(), other.params()));
        assert_eq!(
            again.param("w").unwrap().view().as_slice::<f32>().unwrap(),
            &[1.0, 2.0]
        );
    }

    #[test]
    fn a_params_header_is_decoded_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.mz");
        let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
        let seq = Tensor::from_slice(vec![3, 1], &[1i64, 2, 3])
            .unwrap()
            .with_lod(vec![vec![0, 1, 3]])
            .unwrap();
        let tag = TagBuilder::new("a")
            .param("w", w.clone())
            .param("alias", w)
            .param("seq", seq.clone());
        let mut writer = ArchiveWriter::create(&path).unwrap();
        writer.add_tag(tag).unwrap();
        writer.finish().unwrap();
        let archive = Archive::open(&path).unwrap();
        let tag = archive.tag("a").unwrap();
        // Aliases of one file share its slot.
        assert_eq!(tag.tables.param_slot[..], [0, 0, 1]);
        assert_eq!(tag.tables.header_slots, 2);
        let first = tag.param("seq").unwrap();
        let heads = tag.tables.heads.get().unwrap();
        assert!(heads[1].get().is_some() && heads[0].get().is_none());
        let again = tag.param("seq").unwrap();
        assert!(again.is_mapped());
        assert_eq!(again, first);
        assert_eq!(again.view().data().as_ptr(), first.view().data().as_ptr());
        assert_eq!(again.view().to_owned(), seq);
        tag.param("w").unwrap();
        assert!(heads[0].get().is_some());
        let alias = tag.param("alias").unwrap();
        assert_eq!(alias.view().as_slice::<f32>().unwrap(), &[1.0, 2.0]);
    }

    #[test]
    fn distinct_files_keep_the_first_of_each_in_the_order_met() {
        use super::{DistinctFiles, FileRef};
        use crate::archive::reader::TensorKind;
        let file = |entry| FileRef {
            entry,
            tag: "a",
            kind: TensorKind::Params,
            index: entry as u64,
            shared: false,
        };
        let order = |d: &DistinctFiles<'_>| d.files.iter().map(|f| f.entry).collect::<Vec<_>>();
        // Ascending: no set is made.
        let mut d = DistinctFiles::default();
        for e in [1, 4, 9] {
            d.push(file(e));
        }
        assert_eq!(order(&d), [1, 4, 9]);
        assert!(d.seen.is_none());
        // Out of order, with repeats of files met before and after the turn.
        for e in [4, 2, 9, 2, 1, 7, 7] {
            d.push(file(e));
        }
        assert_eq!(order(&d), [1, 4, 9, 2, 7]);
    }

    #[test]
    fn counting_a_tags_tables_names_each_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.mz");
        let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
        let v = Tensor::from_slice(vec![1], &[3.0f32]).unwrap();
        let mut writer = ArchiveWriter::create(&path).unwrap();
        writer
            .add_tag(TagBuilder::new("a").param("w", w.clone()))
            .unwrap();
        // b's x and z are a's file (stored once), y its own.
        let b = TagBuilder::new("b")
            .param("x", w.clone())
            .param("y", v)
            .param("z", w)
            .updater("y", vec![Tensor::from_slice(vec![1], &[0.0f32]).unwrap()]);
        writer.add_tag(b).unwrap();
        writer.finish().unwrap();
        let archive = Archive::open(&path).unwrap();
        let counts = super::TagTables::count(&archive, "b").unwrap();
        assert_eq!((counts.params, counts.updater_arrays), (3, 1));
        let files: Vec<(String, bool)> = counts
            .files
            .iter()
            .map(|f| (archive.dir.entries[f.entry].name.to_string(), f.shared))
            .collect();
        let tag = archive.tag("b").unwrap();
        let mut expected: Vec<(String, bool)> = Vec::new();
        for loc in tag.locations() {
            let item = (loc.entry().to_string(), loc.shared);
            if !expected.contains(&item) {
                expected.push(item);
            }
        }
        assert_eq!(files, expected);
        assert_eq!(files.len(), 3);
        assert!(files[0].1 && files[0].0.starts_with("a/"));
        let located = counts.files[0].location(&archive);
        assert_eq!((located.tag(), located.entry()), ("a", files[0].0.as_str()));
    }

    #[test]
    fn verify_leaves_the_table_cache_as_it_was() {
        let (_dir, archive) = two_tags();
        archive.tag("b").unwrap();
        assert!(archive.verify().is_ok());
        let kept: Vec<bool> = archive.tables.iter().map(|s| s.get().is_some()).collect();
        assert_eq!(kept, [false, true]);
    }
}
