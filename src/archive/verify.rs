//! [`Archive::verify`]: every check a reader makes, over every entry and tag.

use super::container::{METHOD_STORED, ZipEntry};
use super::hashing::hex_digest;
use super::reader::{Archive, WorkCounters};
use super::tag::is_shared;
use super::text;
use crate::graph::{Graph, GraphFormat};
use crate::tensor::decode_tensor;
use sha2::Digest;
use std::collections::{HashMap, HashSet};

/// One tag's sha256sums.txt as read: (hash, path, line) rows, or why it does not read.
type Manifest = std::result::Result<Vec<(String, String, usize)>, crate::Error>;

/// What verify learned in its pass over the entries, and the graphs it decoded: each
/// entry is read, inflated and hashed once, each graph decoded once, however many tags,
/// names or manifest lines refer to them.
#[derive(Default)]
struct Pass {
    /// SHA-256 of the entries some manifest lists, by position in the central directory
    /// (absent for one that did not read: the pass reported it).
    digests: HashMap<usize, [u8; 32]>,
    /// Why a deflated tensor entry does not decode, by position.
    tensor_errors: HashMap<usize, crate::Error>,
    /// Graph entries decoded so far: whether the graph has parts checked against each
    /// tag's parameters (a TensorFlow, ONNX or PIR graph). A graph that does not
    /// decode was reported once, naming its entry.
    graphs: HashMap<String, bool>,
    /// The last graph decoded that has such parts (tags sharing a graph follow their
    /// owner, so this decodes a shared graph once).
    last_graph: Option<(String, Graph)>,
    /// (graph entry, the tag's tables) pairs whose reference checks passed, as SHA-256
    /// digests: a tag whose tables are another's, sharing its graph, passes them too
    /// (the checks read nothing of a tag but its parameters by name).
    checks_passed: HashSet<[u8; 32]>,
}

/// What the reference checks of the graph in `entry` depend on: the entry and every
/// name of the tag's tables with the entry it refers to.
fn checks_key(entry: &str, tag: &super::Tag<'_>) -> [u8; 32] {
    let mut h = sha2::Sha256::new();
    let mut put = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    put(entry.as_bytes());
    for p in tag.params() {
        put(p.name.as_bytes());
        put(p.location.entry.as_bytes());
    }
    put(b"updater");
    for u in tag.updater() {
        put(u.name.as_bytes());
        for a in &u.arrays {
            put(a.entry.as_bytes());
        }
    }
    h.finalize().into()
}

/// Hashes what is written through it (a deflated entry as it is inflated).
struct ShaWriter(sha2::Sha256);

impl std::io::Write for ShaWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether `name` is a tensor file (`<tag>/params/N.lodtensor`, `<tag>/updater/...`) of
/// a tag listed in `tags`.
fn is_tensor_entry(name: &str, tags: &HashSet<&str>) -> bool {
    let Some((top, rel)) = name.split_once('/') else {
        return false;
    };
    tags.contains(top)
        && (rel.starts_with("params/") || rel.starts_with("updater/"))
        && rel.ends_with(".lodtensor")
}

/// One integrity problem found by [`Archive::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFinding {
    /// The entry concerned, if any.
    pub entry: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Result of [`Archive::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every problem found; empty when the archive is sound.
    pub problems: Vec<VerifyFinding>,
}

impl VerifyReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    pub(crate) fn push(&mut self, entry: Option<&str>, message: impl Into<String>) {
        self.problems.push(VerifyFinding {
            entry: entry.map(str::to_string),
            message: message.into(),
        });
    }

    /// Pushes an error as a finding: the entry its location names (else `entry`), the
    /// message without the archive file and the entry (the report says both already).
    pub(crate) fn push_error(&mut self, entry: Option<&str>, err: &crate::Error) {
        let loc = err.location();
        let rest = crate::error::Location {
            file: None,
            entry: None,
            ..loc.clone()
        };
        let message = if rest == crate::error::Location::default() {
            err.kind().to_string()
        } else {
            format!("{} ({rest})", err.kind())
        };
        self.push(loc.entry.as_deref().or(entry), message);
    }

    /// Drops repeated findings (one bad entry fails the CRC pass, the tag's tables and
    /// its manifest check with the same error; a summary that does not read is also
    /// reported as "ignored: <the same error>"), keeping the first of each.
    fn dedup(&mut self) {
        let mut seen = std::collections::HashSet::new();
        self.problems.retain(|p| {
            let message = p.message.strip_prefix("ignored: ").unwrap_or(&p.message);
            seen.insert((p.entry.clone(), message.to_string()))
        });
    }
}

impl Archive {
    /// Checks everything: CRCs, every listed tag's tables and refs, that every tensor
    /// decodes with dtype × dims bytes, that each graph decodes (ProgramDesc with its
    /// required fields, graph.fb through the FlatBuffers verifier; a TensorFlow graph's
    /// constants refer to parameters of the tag with their dtype and dims), metadata.json,
    /// sha256sums.txt manifests, files under unlisted tag directories and listed tags with
    /// no files, and that a current summary (`_summary.txt`) says what the tables say.
    pub fn verify(&self) -> VerifyReport {
        self.verify_inner(None)
    }

    /// [`Archive::verify`], reporting progress: a unit is one entry's CRC-32 check, then
    /// one tag's checks (tables, tensors, manifest).
    pub fn verify_with_progress(&self, progress: &dyn Fn(u64, u64)) -> VerifyReport {
        self.verify_inner(Some(progress))
    }

    fn verify_inner(&self, progress: Option<&dyn Fn(u64, u64)>) -> VerifyReport {
        let total = (self.dir.entries.len() + self.tags.len()) as u64;
        let mut ticker = crate::progress::Ticker::new(progress, total);
        let mut r = VerifyReport::default();
        // The manifests first, so that the pass over the entries hashes what they list
        // while it reads each entry anyway (once, however many lines list it).
        let manifests: Vec<Option<Manifest>> =
            self.tags.iter().map(|t| self.read_manifest(t)).collect();
        let mut wanted: HashSet<usize> = HashSet::new();
        for (t, m) in self.tags.iter().zip(&manifests) {
            for (_, rel, _) in m.iter().flatten().flatten() {
                if let Some(i) = self.dir.index.get(&self.dir.entries, &format!("{t}/{rel}")) {
                    wanted.insert(i);
                }
            }
        }
        let listed: HashSet<&str> = self.tags.iter().map(String::as_str).collect();
        let mut pass = Pass::default();
        for (i, e) in self.dir.entries.iter().enumerate() {
            // Read whole and checked (length, CRC-32) already: tags.txt by the open, a
            // manifest that parsed just above. Not inflated a second time.
            // (A stored entry's CRC-32 is not checked by a read: it is checked here.)
            let read_before = *e.name == *super::reader::TAGS_TXT
                || e.name.split_once('/').is_some_and(|(t, rest)| {
                    rest == "sha256sums.txt"
                        && self.tag_position(t).is_some_and(|k| {
                            self.tags.get(k).is_some_and(|x| x == t)
                                && matches!(manifests.get(k), Some(Some(Ok(_))))
                        })
                });
            if read_before && e.method != METHOD_STORED && !wanted.contains(&i) {
                ticker.tick();
                continue;
            }
            if let Err(err) = self.check_entry_once(i, e, &wanted, &listed, &mut pass, &mut r) {
                r.push_error(Some(&e.name), &err);
            }
            ticker.tick();
        }
        let mut dirs_seen: HashMap<&str, bool> = HashMap::new();
        for e in &self.dir.entries {
            if let Some((top, _)) = e.name.split_once('/') {
                dirs_seen.entry(top).or_insert(false);
            }
        }
        for t in &self.tags {
            if let Some(seen) = dirs_seen.get_mut(t.as_str()) {
                *seen = true;
            } else {
                r.push(
                    None,
                    format!("tag {t:?} is listed in tags.txt but has no files"),
                );
            }
        }
        let mut unlisted: Vec<&str> = dirs_seen
            .iter()
            .filter(|(_, listed)| !**listed)
            .map(|(d, _)| *d)
            .collect();
        unlisted.sort();
        for d in unlisted {
            r.push(
                Some(d),
                format!("files under {d}/, which is not a tag listed in tags.txt"),
            );
        }
        for (t, manifest) in self.tags.iter().zip(manifests) {
            self.verify_tag(t, manifest, &mut pass, &mut r);
            ticker.tick();
        }
        self.verify_summary(&mut r);
        r.dedup();
        r
    }

    /// Reads entry `i` (`e`) once: checks a stored entry's CRC-32, inflates a deflated
    /// one (checking its length and CRC-32), hashes it when a manifest lists it, and
    /// decodes it when it is a deflated tensor file (stored ones are decoded in the map
    /// by the tag's checks, which costs no read).
    fn check_entry_once(
        &self,
        i: usize,
        e: &ZipEntry,
        wanted: &HashSet<usize>,
        listed: &HashSet<&str>,
        pass: &mut Pass,
        r: &mut VerifyReport,
    ) -> crate::Result<()> {
        let hash = wanted.contains(&i);
        if e.method == METHOD_STORED {
            let raw = self.raw_data(e)?;
            let crc = crc32fast::hash(&raw);
            if hash {
                WorkCounters::add(&self.work.hashed);
                pass.digests.insert(i, sha2::Sha256::digest(&raw).into());
            }
            if crc != e.crc32 {
                r.push(
                    Some(&e.name),
                    format!("CRC-32 is {crc:08x}, the directory says {:08x}", e.crc32),
                );
            }
        } else if is_tensor_entry(&e.name, listed) {
            let bytes = self.read_entry(e)?;
            if hash {
                WorkCounters::add(&self.work.hashed);
                pass.digests.insert(i, sha2::Sha256::digest(&bytes).into());
            }
            if let Err(err) = decode_tensor(&bytes) {
                pass.tensor_errors.insert(i, err);
            }
        } else if hash {
            let mut sink = ShaWriter(sha2::Sha256::new());
            self.inflate_into(e, &self.raw_data(e)?, &mut sink)?;
            WorkCounters::add(&self.work.hashed);
            pass.digests.insert(i, sink.0.finalize().into());
        } else {
            self.check_entry(e)?;
        }
        Ok(())
    }

    /// Tag `t`'s sha256sums.txt, parsed; `None` when it has none.
    fn read_manifest(&self, t: &str) -> Option<Manifest> {
        let name = format!("{t}/sha256sums.txt");
        let e = self.entry(&name)?;
        Some(
            self.read_entry(e)
                .and_then(|b| text::parse_sums_lines(&b, &name)),
        )
    }

    /// Decodes the graph in `entry` unless an earlier tag's check did (a shared graph):
    /// reports one that does not decode, once, naming the entry. Returns the decoded
    /// graph when it has parts checked against each tag's parameters.
    fn decoded_graph<'p>(
        &self,
        format: GraphFormat,
        entry: &str,
        pass: &'p mut Pass,
        r: &mut VerifyReport,
    ) -> Option<&'p Graph> {
        let known = pass.graphs.get(entry).copied();
        if known == Some(false) {
            return None;
        }
        let kept = matches!(&pass.last_graph, Some((name, _)) if name == entry);
        if !kept {
            let bytes = match self.entry_bytes(entry) {
                Ok(b) => b,
                Err(e) => {
                    r.push_error(Some(entry), &e);
                    pass.graphs.insert(entry.to_string(), false);
                    return None;
                }
            };
            WorkCounters::add(&self.work.graphs_decoded);
            // Decoded as every reader does (ProgramDesc with its required fields,
            // graph.fb through the FlatBuffers verifier), not just read.
            match Graph::decode(format, &bytes) {
                Err(e) => {
                    r.push(
                        Some(entry),
                        format!(
                            "the graph does not decode: {}",
                            crate::graph::graph_error_why(&e)
                        ),
                    );
                    pass.graphs.insert(entry.to_string(), false);
                    return None;
                }
                Ok(g) => {
                    let checked = !matches!(g, Graph::Program(_));
                    pass.graphs.insert(entry.to_string(), checked);
                    if !checked {
                        return None;
                    }
                    pass.last_graph = Some((entry.to_string(), g));
                }
            }
        }
        pass.last_graph.as_ref().map(|(_, g)| g)
    }

    fn verify_tag(
        &self,
        t: &str,
        manifest: Option<Manifest>,
        pass: &mut Pass,
        r: &mut VerifyReport,
    ) {
        let prefix = format!("{t}/");
        if self.entry(&format!("{t}/params.txt")).is_none()
            && self.entries_under(t).next().is_some()
        {
            r.push(None, format!("tag {t:?} has no params.txt"));
        }
        match self.tag_cached(t, false) {
            Ok(tag) => {
                match tag.graph_entry() {
                    Err(e) => r.push_error(None, &e),
                    Ok(Some((format, entry))) => {
                        let key = checks_key(&entry, &tag);
                        let done = pass.checks_passed.contains(&key);
                        if !done && let Some(g) = self.decoded_graph(format, &entry, pass, r) {
                            WorkCounters::add(&self.work.graph_checks);
                            let before = r.problems.len();
                            // A foreign graph's parameters must be the tag's: a
                            // TensorFlow graph's constants, an ONNX model's initializers,
                            // a PIR program's parameters with the declared types.
                            let refs = match g {
                                Graph::Program(_) => Ok(()),
                                Graph::Tf(tf) => crate::interop::tf::check_refs(&tag, tf),
                                Graph::Onnx(onnx) => crate::interop::onnx::check_refs(&tag, onnx),
                                Graph::Pir(_) => crate::interop::paddle::check_params(&tag),
                            };
                            if let Err(e) = refs {
                                r.push_error(Some(&entry), &e);
                            }
                            // Failures are checked again for each tag (their messages
                            // may name it); passes are not.
                            if r.problems.len() == before {
                                pass.checks_passed.insert(key);
                            }
                        }
                    }
                    Ok(None) => {}
                }
                // A shared training config is checked where it is stored (its owner's
                // own file), not read again for each tag that uses it.
                if !is_shared(&tag, "trainingConfig.fb") {
                    match tag.training_config() {
                        Ok(Some(b)) => {
                            if let Err(e) =
                                crate::graph::training_config::TrainingConfig::decode(&b)
                            {
                                r.push(
                                    Some(&format!("{t}/trainingConfig.fb")),
                                    format!("the training config does not decode: {}", e.kind()),
                                );
                            }
                        }
                        Err(e) => r.push_error(None, &e),
                        Ok(None) => {}
                    }
                }
                match tag.metadata() {
                    // Checked without building the document (constant memory).
                    Ok(Some(m)) if serde_json::from_slice::<serde::de::IgnoredAny>(&m).is_err() => {
                        r.push(Some(&format!("{t}/metadata.json")), "not valid JSON");
                    }
                    // FORMAT.md: a JSON object. Valid JSON whose first non-blank byte
                    // is not `{` is some other value (an array, a string, a number).
                    Ok(Some(m)) if m.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') => {
                        r.push(
                            Some(&format!("{t}/metadata.json")),
                            "not a JSON object (FORMAT.md: metadata.json is an object)",
                        );
                    }
                    Err(e) => r.push_error(None, &e),
                    _ => {}
                }
            }
            Err(e) => r.push_error(None, &e),
        }
        let own: Vec<&ZipEntry> = self.entries_under(t).collect();
        for e in &own {
            let rel = &e.name[prefix.len()..];
            let is_tensor = (rel.starts_with("params/") || rel.starts_with("updater/"))
                && rel.ends_with(".lodtensor");
            if !is_tensor {
                continue;
            }
            if e.method == METHOD_STORED {
                // In the map: decoding reads the record header, the data is not copied.
                match self.read_entry(e) {
                    Ok(b) => {
                        if let Err(err) = decode_tensor(&b) {
                            r.push_error(Some(&e.name), &err);
                        }
                    }
                    Err(err) => r.push_error(Some(&e.name), &err),
                }
            } else if let Some(i) = self.dir.index.get(&self.dir.entries, &e.name)
                && let Some(err) = pass.tensor_errors.get(&i)
            {
                r.push_error(Some(&e.name), err);
            }
        }
        let sharded = self.verify_shards(t, &prefix, r);
        let sums_name = format!("{t}/sha256sums.txt");
        let sums = match manifest {
            None => return,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                r.push_error(Some(&sums_name), &e);
                return;
            }
        };
        // Path -> the line that first lists it. A path listed again is not hashed again;
        // it is one finding per path, however many lines repeat it.
        let mut listed: HashMap<&str, usize> = HashMap::new();
        // Path -> (the first line repeating it, how many lines list it), in order.
        let mut repeated: Vec<(&str, usize, usize)> = Vec::new();
        let mut repeat_at: HashMap<&str, usize> = HashMap::new();
        for (hex, rel, line) in &sums {
            if listed.contains_key(rel.as_str()) {
                match repeat_at.get(rel.as_str()) {
                    Some(&k) => repeated[k].2 += 1,
                    None => {
                        repeat_at.insert(rel, repeated.len());
                        repeated.push((rel, *line, 2));
                    }
                }
                continue;
            }
            listed.insert(rel, *line);
            let name = format!("{prefix}{rel}");
            match self.dir.index.get(&self.dir.entries, &name) {
                None => r.push(Some(&sums_name), format!("lists {rel:?}, which is missing")),
                Some(i) => {
                    // Not hashed: the entry did not read, which the pass reported.
                    let Some(digest) = pass.digests.get(&i) else {
                        continue;
                    };
                    let got = hex_digest(digest);
                    if &got != hex {
                        r.push(
                            Some(&name),
                            format!("SHA-256 is {got}, sha256sums.txt says {hex}"),
                        );
                    }
                }
            }
        }
        for (rel, again, times) in repeated {
            let first = listed.get(rel).copied().unwrap_or(0);
            r.push(
                Some(&sums_name),
                format!(
                    "lists {rel:?} {times} times (line {first}, again on line {again}{}): a file is listed once",
                    if times > 2 {
                        format!(" and {} more", times - 2)
                    } else {
                        String::new()
                    }
                ),
            );
        }
        for e in own {
            if *e.name != *sums_name
                && !e.name.ends_with('/')
                && !e
                    .name
                    .strip_prefix(&prefix)
                    .is_some_and(|rel| listed.contains_key(rel) || sharded.contains(rel))
            {
                r.push(Some(&e.name), "not listed in the tag's sha256sums.txt");
            }
        }
    }

    /// Checks tag `t`'s shards.txt (a sharded save's per-shard digests), if it has one:
    /// each listed file is a stored entry of the tag whose ranges tile it exactly, and
    /// each range has the SHA-256 listed. Returns the files it lists (relative to the
    /// tag), which sha256sums.txt does not list.
    fn verify_shards(&self, t: &str, prefix: &str, r: &mut VerifyReport) -> HashSet<String> {
        let name = format!("{t}/shards.txt");
        let mut files = HashSet::new();
        if self.entry(&name).is_none() {
            return files;
        }
        let lines = match self
            .entry_bytes(&name)
            .and_then(|b| text::parse_shards(&b, &name))
        {
            Ok(l) => l,
            Err(e) => {
                r.push_error(Some(&name), &e);
                return files;
            }
        };
        let mut by_path: Vec<(&str, Vec<&text::ShardLine>)> = Vec::new();
        for l in &lines {
            match by_path.last_mut() {
                Some((p, v)) if *p == l.path => v.push(l),
                _ => by_path.push((&l.path, vec![l])),
            }
        }
        for (rel, ranges) in by_path {
            if !files.insert(rel.to_string()) {
                r.push(
                    Some(&name),
                    format!(
                        "lists {rel:?} on lines that are not together (line {})",
                        ranges[0].line
                    ),
                );
                continue;
            }
            let full = format!("{prefix}{rel}");
            let Some(e) = self.entry(&full) else {
                r.push(Some(&name), format!("lists {rel:?}, which is missing"));
                continue;
            };
            if e.method != METHOD_STORED {
                r.push(
                    Some(&full),
                    "listed in shards.txt but not stored (deflated)",
                );
                continue;
            }
            let raw = match self.raw_data(e) {
                Ok(b) => b,
                Err(err) => {
                    r.push_error(Some(&full), &err);
                    continue;
                }
            };
            let mut next = 0u64;
            let mut i = 0;
            while i < ranges.len() {
                let l = ranges[i];
                let end = l.offset.checked_add(l.len);
                if l.offset != next || end.is_none_or(|x| x > raw.len() as u64) {
                    r.push(
                        Some(&name),
                        format!(
                            "line {}: bytes {}..{} of {rel:?} do not continue its ranges at byte {next} inside its {} bytes",
                            l.line,
                            l.offset,
                            l.offset.saturating_add(l.len),
                            raw.len()
                        ),
                    );
                    next = u64::MAX;
                    break;
                }
                if l.boxed.is_some() {
                    // The box lines of one tensor's data: every line of the group names
                    // the same bytes.
                    let group: Vec<&text::ShardLine> = ranges[i..]
                        .iter()
                        .take_while(|b| b.boxed.is_some() && b.offset == l.offset && b.len == l.len)
                        .copied()
                        .collect();
                    i += group.len();
                    self.verify_boxes(&raw, &group, &name, &full, rel, r);
                    next = l.offset + l.len;
                    continue;
                }
                let got = hex_digest(
                    &sha2::Sha256::digest(&raw[l.offset as usize..(l.offset + l.len) as usize])
                        .into(),
                );
                WorkCounters::add(&self.work.hashed);
                if got != l.sha256 {
                    let by = l.writer_name();
                    r.push(
                        Some(&full),
                        format!(
                            "bytes {}..{} (written by {by}) have SHA-256 {got}, shards.txt line {} says {}",
                            l.offset,
                            l.offset + l.len,
                            l.line,
                            l.sha256
                        ),
                    );
                }
                next = l.offset + l.len;
                i += 1;
            }
            if next != u64::MAX && next != raw.len() as u64 {
                r.push(
                    Some(&name),
                    format!(
                        "the ranges of {rel:?} end at byte {next}, the file has {}",
                        raw.len()
                    ),
                );
            }
        }
        files
    }

    /// Checks the box lines `group` of one tensor file (`raw`: its bytes): they name the
    /// data after the record header, their boxes tile the tensor's shape, and each box's
    /// bytes (gathered run by run, in the box's row-major order) have the SHA-256 listed.
    fn verify_boxes(
        &self,
        raw: &[u8],
        group: &[&text::ShardLine],
        name: &str,
        full: &str,
        rel: &str,
        r: &mut VerifyReport,
    ) {
        use crate::archive::sharded::boxes;
        let first = group[0];
        let head = match crate::tensor::decode_head(raw, raw.len() as u64) {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(e) => {
                r.push_error(Some(full), &e);
                return;
            }
        };
        if head.header_len != first.offset || first.offset + first.len != raw.len() as u64 {
            r.push(
                Some(name),
                format!(
                    "line {}: the boxes of {rel:?} name bytes {}..{}, its data is bytes {}..{}",
                    first.line,
                    first.offset,
                    first.offset + first.len,
                    head.header_len,
                    raw.len()
                ),
            );
            return;
        }
        let mut shapes = Vec::with_capacity(group.len());
        for l in group {
            let b = l.boxed.clone().unwrap_or_default();
            if b.len() != head.dims.len() || b.iter().zip(&head.dims).any(|(x, &d)| x.end > d) {
                r.push(
                    Some(name),
                    format!(
                        "line {}: box {} is outside {rel:?}'s shape {:?}",
                        l.line,
                        boxes::render(&b),
                        head.dims
                    ),
                );
                return;
            }
            shapes.push(b);
        }
        match boxes::check_tiling(&head.dims, &shapes) {
            Ok(()) => {}
            Err(boxes::Tiling::Overlap { a, b, at }) => {
                r.push(
                    Some(name),
                    format!(
                        "lines {} and {}: the boxes of {rel:?} share element {at:?}",
                        group[a].line, group[b].line
                    ),
                );
                return;
            }
            Err(boxes::Tiling::Gap { covered, total }) => {
                r.push(
                    Some(name),
                    format!("the boxes of {rel:?} cover {covered} of its {total} elements"),
                );
                return;
            }
            Err(boxes::Tiling::TooMany { boxes: n }) => {
                r.push(
                    Some(name),
                    format!(
                        "the {n} boxes of {rel:?} share rows too much to check that they tile it (more than {} pairs to compare)",
                        boxes::MAX_TILING_PAIRS
                    ),
                );
                return;
            }
        }
        let data = &raw[first.offset as usize..];
        for (l, b) in group.iter().zip(&shapes) {
            let Ok(layout) = boxes::layout(head.dtype, &head.dims, b, rel) else {
                continue;
            };
            let mut h = sha2::Sha256::new();
            let run = layout.run_len as usize;
            layout.for_each_run(|at| h.update(&data[at as usize..at as usize + run]));
            let got = hex_digest(&h.finalize().into());
            WorkCounters::add(&self.work.hashed);
            if got != l.sha256 {
                let by = l.writer_name();
                r.push(
                    Some(full),
                    format!(
                        "box {} (written by {by}) has SHA-256 {got}, shards.txt line {} says {}",
                        boxes::render(b),
                        l.line,
                        l.sha256
                    ),
                );
            }
        }
    }
}
