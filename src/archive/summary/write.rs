//! The writer's side of the summary: what a write session notes as it writes, and the
//! summary it renders at commit from those notes and the archive it started from.

use super::{Record, VERSION, fingerprint, metadata_fields, render};
use crate::archive::container::ZipEntry;
use crate::archive::reader::Archive;
use crate::archive::tag::{MAX_METADATA_BYTES, SHARED_TXT};
use crate::archive::text;
use crate::graph::GraphFormat;
use crate::tensor::DType;
use std::collections::{BTreeSet, HashMap, HashSet};

/// What a write session learns for the summary as it writes: the text files that feed
/// it, and the dtypes of each new tag's tensors.
#[derive(Debug, Default)]
pub(crate) struct SummaryInputs {
    /// Bytes of the params.txt, updater.txt, shared.txt and metadata.json written.
    tables: HashMap<String, Vec<u8>>,
    /// Dtypes of the tensors of tags written in this session (by their writers).
    dtypes: HashMap<String, BTreeSet<DType>>,
}

/// The files of a tag whose bytes the summary is made from.
const FED_BY: [&str; 6] = [
    "params.txt",
    "updater.txt",
    SHARED_TXT,
    "metadata.json",
    "graph.fb",
    "graph.pdmodel",
];

impl SummaryInputs {
    /// Notes a text entry written (kept if the summary is made from it).
    pub(crate) fn note_text(&mut self, name: &str, bytes: &[u8]) {
        if let Some((_, rel)) = name.split_once('/')
            && FED_BY[..4].contains(&rel)
        {
            self.tables.insert(name.to_string(), bytes.to_vec());
        }
    }

    /// Notes a finished new tag and its tensors' dtypes.
    pub(crate) fn note_tag(&mut self, tag: &str, dtypes: BTreeSet<DType>) {
        self.dtypes.insert(tag.to_string(), dtypes);
    }

    /// The summary of the archive about to be committed: `entries` is its central
    /// directory (every entry but the summary), `tags` its tag list, `base` the archive
    /// the session started from. `None` when a tag cannot be described (its tables do
    /// not parse, a ref names nothing): readers then read the tables, and report what
    /// is wrong with them as they always have.
    pub(crate) fn render_for(
        &self,
        entries: &[ZipEntry],
        tags: &[String],
        base: Option<&Archive>,
    ) -> Option<String> {
        let fed: HashMap<&str, &ZipEntry> = entries
            .iter()
            .filter(|e| {
                e.name
                    .split_once('/')
                    .is_some_and(|(_, rel)| FED_BY.contains(&rel))
            })
            .map(|e| (&*e.name, e))
            .collect();
        let base_records: Option<HashMap<String, Record>> = base
            .and_then(|b| b.summary_records().ok())
            .map(|rs| rs.into_iter().map(|r| (r.name.clone(), r)).collect());
        let canon: HashMap<String, &str> = tags
            .iter()
            .map(|t| (t.to_ascii_lowercase(), t.as_str()))
            .collect();
        let mut records = Vec::with_capacity(tags.len());
        // Entries whose stored size a record needs (files used from other tags).
        let mut sized: Vec<(usize, Vec<String>)> = Vec::new();
        for t in tags {
            let base_record = base_records.as_ref().and_then(|m| m.get(t));
            if let (Some(b), Some(rec)) = (base, base_record)
                && !self.dtypes.contains_key(t)
                && FED_BY.iter().all(|f| {
                    let name = format!("{t}/{f}");
                    same_entry(fed.get(name.as_str()).copied(), b.entry(&name))
                })
            {
                // The tag's files are as they were; the files it uses from other tags
                // are never changed under the same name by modelzip (a removal rewrites
                // the tables of the tags that used the removed files).
                records.push(rec.clone());
                continue;
            }
            let (rec, used) = self.describe(t, &fed, &canon, base, base_record)?;
            sized.push((records.len(), used));
            records.push(rec);
        }
        if !sized.is_empty() {
            let wanted: HashSet<&str> = sized
                .iter()
                .flat_map(|(_, u)| u.iter().map(String::as_str))
                .collect();
            let sizes: HashMap<&str, u64> = entries
                .iter()
                .filter(|e| wanted.contains(&*e.name))
                .map(|e| (&*e.name, e.compressed_size))
                .collect();
            for (i, used) in &sized {
                let mut total = 0u64;
                for u in used {
                    total = total.saturating_add(*sizes.get(u.as_str())?);
                }
                records.get_mut(*i)?.shared_bytes = total;
            }
        }
        let (count, fp) = fingerprint(entries.iter(), VERSION);
        Some(render(count, &fp, &records))
    }

    /// A tag's record from its files as committed (shared_bytes left 0) and the entries
    /// it uses from other tags.
    fn describe(
        &self,
        t: &str,
        fed: &HashMap<&str, &ZipEntry>,
        canon: &HashMap<String, &str>,
        base: Option<&Archive>,
        base_record: Option<&Record>,
    ) -> Option<(Record, Vec<String>)> {
        let file = |rel: &str| -> Option<Option<Vec<u8>>> {
            let name = format!("{t}/{rel}");
            let Some(e) = fed.get(name.as_str()) else {
                return Some(None);
            };
            if let Some(b) = self.tables.get(&name) {
                return Some(Some(b.clone()));
            }
            let b = base?;
            // Copied from the base unchanged (same CRC-32 and sizes).
            if !same_entry(Some(*e), b.entry(&name)) {
                return None;
            }
            b.entry_bytes(&name).ok().map(|c| Some(c.into_owned()))
        };
        let owner = |r: &text::ParamRef| -> Option<&str> {
            match &r.tag {
                None => Some(t),
                Some(o) => canon.get(&o.to_ascii_lowercase()).copied(),
            }
        };
        // Files of other tags the tables point at, each once however many lines point at
        // it (a name built per distinct file, not per line).
        let mut refs_used: std::collections::HashSet<(&str, &str, u64)> =
            std::collections::HashSet::new();
        let mut used: Vec<String> = Vec::new();
        let mut params = 0u64;
        let mut arrays = 0u64;
        for (rel, kind_dir, updater) in [
            ("params.txt", "params", false),
            ("updater.txt", "updater", true),
        ] {
            let Some(bytes) = file(rel)? else {
                continue;
            };
            let entry = format!("{t}/{rel}");
            let mut fail = false;
            text::for_each_table_line(&bytes, &entry, updater, |_, refs, _| {
                if updater {
                    arrays += refs.len() as u64;
                } else {
                    params += 1;
                }
                for r in refs {
                    match owner(r) {
                        Some(o) if o == t => {}
                        Some(o) => {
                            refs_used.insert((o, kind_dir, r.index));
                        }
                        None => fail = true,
                    }
                }
                Ok(())
            })
            .ok()?;
            if fail {
                return None;
            }
        }
        used.extend(
            refs_used
                .into_iter()
                .map(|(o, kind_dir, i)| format!("{o}/{kind_dir}/{i}.lodtensor")),
        );
        let mut graph_files: Vec<&str> = ["graph.fb", "graph.pdmodel"]
            .into_iter()
            .filter(|g| fed.contains_key(format!("{t}/{g}").as_str()))
            .collect();
        if let Some(bytes) = file(SHARED_TXT)? {
            let rows = text::parse_shared(&bytes, &format!("{t}/{SHARED_TXT}")).ok()?;
            for (f, o, _) in rows {
                let o = canon.get(&o.to_ascii_lowercase()).copied()?;
                used.push(format!("{o}/{f}"));
                if f.starts_with("graph.") {
                    graph_files.push(f);
                }
            }
        }
        let graph = match graph_files[..] {
            [] => None,
            ["graph.fb"] => Some(GraphFormat::FlatBuffers),
            ["graph.pdmodel"] => Some(GraphFormat::ProgramDesc),
            _ => return None,
        };
        let (created, sharded) = match file("metadata.json")? {
            Some(m) if m.len() as u64 > MAX_METADATA_BYTES => return None,
            Some(m) => metadata_fields(&m),
            None => (None, None),
        };
        let dtypes: Vec<DType> = match (self.dtypes.get(t), base_record) {
            (Some(d), _) => d.iter().copied().collect(),
            (None, Some(r)) => r.dtypes.clone(),
            // A tag of an archive without a current summary (written before format 1.2):
            // its tensors are the base's, under the same names.
            (None, None) => base?.tag_summary_from_tables(t).ok()?.dtypes,
        };
        used.sort_unstable();
        used.dedup();
        Some((
            Record {
                name: t.to_string(),
                params,
                updater_arrays: arrays,
                shared_bytes: 0,
                graph,
                dtypes,
                created,
                sharded,
            },
            used,
        ))
    }
}

/// True when both are absent, or both present with the same CRC-32, sizes and method.
fn same_entry(a: Option<&ZipEntry>, b: Option<&ZipEntry>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.crc32 == b.crc32
                && a.compressed_size == b.compressed_size
                && a.uncompressed_size == b.uncompressed_size
                && a.method == b.method
        }
        _ => false,
    }
}
