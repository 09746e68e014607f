//! The state every write path shares ([`Session`]: the zip output, the tag list, the
//! dedup index of tensors and shareable files) and the [`WriteOptions`] of every write.

use super::container::write::{EntrySpec, ZipOut};
use super::container::{METHOD_STORED, ZipEntry};
use super::hashing::{HashPool, Ticket};
use super::reader::{Archive, TAGS_TXT, TensorKind};
use super::summary::SUMMARY_TXT;
use super::summary::write::SummaryInputs;
use super::text::{self, SHAREABLE_FILES};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::codec::decode_record_at;
use std::collections::HashMap;
use std::io::Write;

/// Options of every write operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// Wait for another writer to finish instead of failing with [`ErrorKind::Locked`](crate::ErrorKind::Locked).
    pub wait_for_lock: bool,
    /// fsync files and directories so a finished write survives power loss (default true).
    pub fsync: bool,
    /// Deflate every entry that is not a tensor: the text files (tags.txt, params.txt,
    /// updater.txt, metadata.json, sha256sums.txt), the graph (graph.pdmodel, graph.fb)
    /// and trainingConfig.fb (default true), each stored instead when deflating would not
    /// make it smaller. Tensors are always stored, 64-byte aligned, so that a memory map
    /// hands them out without copying; entries added with [`TagWriter::extra_entry`](crate::TagWriter::extra_entry) are
    /// stored as given.
    pub deflate_text: bool,
    /// Called as the work proceeds (see [`crate::progress`]), by the operations that
    /// know their total up front: [`remove_tags`](super::remove_tags) by rewrite and
    /// [`compact`](super::compact) count the entries of the old archive plus the tensor
    /// files re-homed, [`remove_tags`](super::remove_tags) in place the files it writes; [`crate::variants::quantize`] and
    /// [`crate::variants::cast`] count each source parameter twice (derived, then
    /// written); the [`crate::interop::paddle`] imports count the parameters written.
    /// [`ArchiveWriter`](crate::ArchiveWriter) and [`Appender`](super::Appender) do not call it: their caller
    /// knows what it adds. Default `None`.
    pub progress: Option<crate::progress::ProgressHook>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            wait_for_lock: false,
            fsync: true,
            deflate_text: true,
            progress: None,
        }
    }
}

/// The SHA-256 of a file written in this session: known, or being computed by the pool.
#[derive(Clone)]
pub(super) enum Sha {
    Ready([u8; 32]),
    Pending(Ticket),
}

impl Sha {
    pub(super) fn get(&self) -> [u8; 32] {
        match self {
            Sha::Ready(d) => *d,
            Sha::Pending(t) => t.digest(),
        }
    }
}

/// A tensor file already in the output (or in the archive being appended to).
pub(super) struct Candidate {
    pub(super) tag: String,
    pub(super) index: u64,
    /// SHA-256 of the record, known for files written in this session.
    pub(super) sha: Option<Sha>,
    /// The entry in the base archive, compared byte for byte on a prefilter match.
    pub(super) base_entry: Option<String>,
}

/// Finds tensors already stored: prefilter by (kind, length, CRC-32), then SHA-256 or bytes.
#[derive(Default)]
pub(super) struct Dedup {
    pub(super) map: HashMap<(TensorKind, u64, u32), Vec<Candidate>>,
}

impl Dedup {
    pub(super) fn find(
        &self,
        base: Option<&Archive>,
        key: (TensorKind, u64, u32),
        sha: &[u8; 32],
        parts: &[&[u8]],
    ) -> Option<(String, u64)> {
        for c in self.map.get(&key)? {
            let same = match (&c.sha, &c.base_entry, base) {
                (Some(s), _, _) => s.get() == *sha,
                (None, Some(entry), Some(base)) => base
                    .entry_bytes(entry)
                    .map(|b| {
                        let mut rest: &[u8] = &b;
                        parts.iter().all(|p| {
                            let ok = rest.len() >= p.len() && &rest[..p.len()] == *p;
                            rest = rest.get(p.len()..).unwrap_or_default();
                            ok
                        }) && rest.is_empty()
                    })
                    .unwrap_or(false),
                _ => false,
            };
            if same {
                return Some((c.tag.clone(), c.index));
            }
        }
        None
    }

    pub(super) fn insert(&mut self, key: (TensorKind, u64, u32), c: Candidate) {
        self.map.entry(key).or_default().push(c);
    }

    pub(super) fn forget_tag(&mut self, tag: &str) {
        for v in self.map.values_mut() {
            v.retain(|c| c.tag != tag);
        }
    }
}

/// A shareable file's prefilter key: (file name, length, CRC-32).
pub(super) type FileKey = (&'static str, u64, u32);

/// A shareable file (graph, training config) already stored: in this session (its
/// SHA-256) or in the base archive (its entry, compared byte for byte).
pub(super) struct FileCandidate {
    pub(super) tag: String,
    pub(super) sha: Option<[u8; 32]>,
    pub(super) base_entry: Option<String>,
}

/// The state every write path shares: the zip output, the tag list, the dedup index.
pub(crate) struct Session {
    /// Written by the session's methods and by the [`TagWriter`](super::TagWriter) of a
    /// tag (tags.txt's list, the directory's entries); other callers use the methods.
    pub(super) out: ZipOut<Box<dyn Write>>,
    pub(super) tags: Vec<String>,
    pub(super) opts: WriteOptions,
    comment: Vec<u8>,
    pub(super) dedup: Dedup,
    /// Graphs and training configs already stored, by (file name, length, CRC-32): an
    /// identical one in a later tag is referenced through its shared.txt instead.
    pub(super) files: HashMap<FileKey, Vec<FileCandidate>>,
    pub(super) base: Option<Archive>,
    /// Background SHA-256 of tensors; started by the first tensor that uses it.
    pub(super) pool: PoolSlot,
    /// What the archive summary (`_summary.txt`) is made from, noted as it is written.
    pub(super) summary: SummaryInputs,
}

/// The session's hash pool, started on first use (or unavailable: no threads).
pub(super) enum PoolSlot {
    NotStarted,
    Running(HashPool),
    Unavailable,
}

impl PoolSlot {
    pub(super) fn get(&mut self) -> Option<&mut HashPool> {
        if let PoolSlot::NotStarted = self {
            *self = HashPool::start().map_or(PoolSlot::Unavailable, PoolSlot::Running);
        }
        match self {
            PoolSlot::Running(p) => Some(p),
            _ => None,
        }
    }
}

impl Session {
    /// A session writing `sink`, whose first byte lands at file offset `start`.
    pub fn new(sink: Box<dyn Write>, start: u64, opts: WriteOptions) -> Session {
        Session {
            out: ZipOut::new(sink, start),
            tags: Vec::new(),
            opts,
            comment: Vec::new(),
            dedup: Dedup::default(),
            files: HashMap::new(),
            base: None,
            pool: PoolSlot::NotStarted,
            summary: SummaryInputs::default(),
        }
    }

    /// A session that continues `base` in place from its central directory (`sink` is
    /// positioned there): the new directory lists the old entries `keep` accepts, then
    /// whatever the session writes; tags.txt lists `base`'s tags until
    /// [`Session::set_tags`].
    pub fn in_place(
        sink: Box<dyn Write>,
        base: &Archive,
        opts: WriteOptions,
        keep: impl Fn(&ZipEntry) -> bool,
    ) -> Result<Session> {
        Session::in_place_at(sink, base.listing().cd_offset, base, opts, keep)
    }

    /// [`Session::in_place`] with `sink`'s first byte at file offset `start` (at or past
    /// `base`'s central directory: a sharded save's staged extension lies between).
    pub fn in_place_at(
        sink: Box<dyn Write>,
        start: u64,
        base: &Archive,
        opts: WriteOptions,
        keep: impl Fn(&ZipEntry) -> bool,
    ) -> Result<Session> {
        let mut s = Session::new(sink, start, opts);
        s.out.entries = base
            .directory()?
            .entries
            .iter()
            .filter(|e| keep(e))
            .cloned()
            .collect();
        s.keep_tags_of(base);
        Ok(s)
    }

    /// Takes `base`'s tag list and archive comment (a rewrite that copies `base`).
    pub fn keep_tags_of(&mut self, base: &Archive) {
        self.tags = base.tags().to_vec();
        self.comment = base.listing().comment.clone();
    }

    /// Sets the tag list tags.txt will hold.
    pub fn set_tags(&mut self, tags: Vec<String>) {
        self.tags = tags;
    }

    /// Copies every entry of `base` in order except those `skip` picks: an entry named
    /// in `replaced` with its new bytes (as a text entry), any other raw. `tick` is called
    /// after each entry of `base`.
    pub fn copy_archive(
        &mut self,
        base: &Archive,
        skip: impl Fn(&ZipEntry) -> bool,
        replaced: &HashMap<String, Vec<u8>>,
        tick: &mut dyn FnMut(),
    ) -> Result<()> {
        for e in &base.directory()?.entries {
            if !skip(e) {
                match replaced.get(&*e.name) {
                    Some(bytes) => {
                        self.write_text(&e.name, bytes)?;
                    }
                    None => self.copy_entry(base, e, &e.name)?,
                }
            }
            tick();
        }
        Ok(())
    }

    /// Copies the entries of `base` that `copies` names (source, new name) raw, calling
    /// `tick` after each.
    pub fn copy_entries(
        &mut self,
        base: &Archive,
        copies: &[(String, String)],
        tick: &mut dyn FnMut(),
    ) -> Result<()> {
        for (from, to) in copies {
            let e = base.entry(from).ok_or_else(|| {
                Error::new(ErrorKind::MissingEntry(from.clone())).in_entry(from.clone())
            })?;
            self.copy_entry(base, e, to)?;
            tick();
        }
        Ok(())
    }

    /// Makes the tensor files of `base`'s listed tags dedup candidates, keeps its tags and
    /// comment, and keeps `base` for byte comparisons.
    pub fn adopt_base(&mut self, base: Archive) {
        self.adopt(base, None);
    }

    /// [`Session::adopt_base`] for a base read by byte ranges (an object store): a
    /// candidate is compared by the SHA-256 its tag's sha256sums.txt records, never by
    /// fetching its bytes; a file no manifest lists is no candidate. Costs one batched
    /// request for the manifests.
    #[cfg(feature = "remote")]
    pub fn adopt_remote_base(&mut self, base: Archive) -> Result<()> {
        let names: Vec<String> = base
            .tags()
            .iter()
            .map(|t| format!("{t}/sha256sums.txt"))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        base.prefetch(&refs)?;
        let mut digests: HashMap<String, [u8; 32]> = HashMap::new();
        for (tag, name) in base.tags().iter().zip(&names) {
            if base.entry(name).is_none() {
                continue;
            }
            let bytes = base.entry_bytes(name)?;
            for (hex, path) in text::parse_sums(&bytes, name)? {
                let mut d = [0u8; 32];
                // parse_sums checked 64 hex digits.
                for (i, b) in d.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
                }
                digests.insert(format!("{tag}/{path}"), d);
            }
        }
        self.adopt(base, Some(&digests));
        Ok(())
    }

    /// Adopts `base`: its files' candidates compared by bytes (`digests` `None`) or by
    /// the digests given (by entry name; a file without one is no candidate).
    fn adopt(&mut self, base: Archive, digests: Option<&HashMap<String, [u8; 32]>>) {
        // (SHA-256, entry to compare with) of an entry; None: not a candidate.
        let compare = |name: &str| -> Option<(Option<[u8; 32]>, Option<String>)> {
            match digests {
                None => Some((None, Some(name.to_string()))),
                Some(d) => d.get(name).map(|d| (Some(*d), None)),
            }
        };
        // One pass over the entries (not one per tag: archives may hold many tags).
        for e in &base.listing().entries {
            let Some((top, rel)) = e.name.split_once('/') else {
                continue;
            };
            let Some(t) = base.canonical_tag(top).filter(|t| *t == top) else {
                continue;
            };
            if let Some(file) = SHAREABLE_FILES.iter().copied().find(|f| *f == rel) {
                if let Some((sha, base_entry)) = compare(&e.name) {
                    self.files
                        .entry((file, e.uncompressed_size, e.crc32))
                        .or_default()
                        .push(FileCandidate {
                            tag: t.to_string(),
                            sha,
                            base_entry,
                        });
                }
                continue;
            }
            for kind in [TensorKind::Params, TensorKind::Updater] {
                let Some(n) = rel
                    .strip_prefix(kind.dir())
                    .and_then(|r| r.strip_prefix('/'))
                    .and_then(|r| r.strip_suffix(".lodtensor"))
                    .and_then(|n| text::parse_index(n).ok())
                else {
                    continue;
                };
                let Some((sha, base_entry)) = compare(&e.name) else {
                    continue;
                };
                self.dedup.insert(
                    (kind, e.uncompressed_size, e.crc32),
                    Candidate {
                        tag: t.to_string(),
                        index: n,
                        sha: sha.map(Sha::Ready),
                        base_entry,
                    },
                );
            }
        }
        self.keep_tags_of(&base);
        self.base = Some(base);
    }

    /// Takes the base archive out (to unmap it before the file is changed).
    pub fn take_base(&mut self) -> Option<Archive> {
        self.base.take()
    }
    /// The tag already holding a file `file` with exactly these bytes, if any.
    pub(super) fn find_file(
        &self,
        file: &'static str,
        bytes: &[u8],
        sha: &[u8; 32],
    ) -> Option<String> {
        let key = (file, bytes.len() as u64, crc32fast::hash(bytes));
        self.files.get(&key)?.iter().find_map(|c| {
            let same = match (&c.sha, &c.base_entry, &self.base) {
                (Some(s), _, _) => s == sha,
                (None, Some(entry), Some(base)) => base
                    .entry_bytes(entry)
                    .map(|b| *b == *bytes)
                    .unwrap_or(false),
                _ => false,
            };
            same.then(|| c.tag.clone())
        })
    }

    /// Writes a text entry, deflated when the options say so.
    pub fn write_text(&mut self, name: &str, bytes: &[u8]) -> Result<ZipEntry> {
        self.summary.note_text(name, bytes);
        let deflate = self.opts.deflate_text;
        self.out.write_bytes(name, bytes, deflate)
    }

    /// Copies `e` of `base` raw (no recompression) as `new_name`, re-aligning stored tensors.
    pub fn copy_entry(&mut self, base: &Archive, e: &ZipEntry, new_name: &str) -> Result<()> {
        let raw = base.raw_data(e)?;
        let raw = &*raw;
        let align = if e.method == METHOD_STORED && new_name.ends_with(".lodtensor") {
            decode_record_at(raw, 0, 0).ok().map(|r| r.data_offset)
        } else {
            None
        };
        self.out
            .write_entry(EntrySpec {
                name: new_name,
                method: e.method,
                crc32: e.crc32,
                uncompressed_size: e.uncompressed_size,
                data: &[raw],
                align_after: align,
                template: Some(e),
            })
            .map_err(|err| err.in_entry(new_name))?;
        Ok(())
    }

    /// Writes tags.txt, the summary, the central directory and the end records. `base`
    /// is the archive the session started from (its tags' files are read for the
    /// summary where it does not already describe them).
    pub fn finish(mut self, base: Option<&Archive>) -> Result<(Box<dyn Write>, u64)> {
        let tags = text::render_tags_txt(&self.tags);
        self.write_text(TAGS_TXT, tags.as_bytes())?;
        // Last before the central directory, fingerprinting it (FORMAT.md, format 1.2);
        // left out when a tag cannot be described (readers then read the tables).
        if let Some(summary) = self.summary.render_for(&self.out.entries, &self.tags, base) {
            self.write_text(SUMMARY_TXT, summary.as_bytes())?;
        }
        let comment = std::mem::take(&mut self.comment);
        self.out.finish(&comment)
    }
}
