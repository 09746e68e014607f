//! Replacing one tag's graph entry (e.g. converting graph.pdmodel to graph.fb): an atomic
//! rewrite of the whole archive, like compaction, with the tag's sha256sums.txt updated.

use super::append::{finish_rewrite, open_locked};
use super::archive_path::ArchivePath;
use super::durable::TempTarget;
use super::hashing::sha256_hex;
use super::reader::{Archive, GraphFormat};
use super::session::{Session, WriteOptions};
use super::summary::written_by_commit;
use super::tag::SHARED_TXT;
use super::text;
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use std::collections::HashMap;
use std::path::Path;

/// What [`convert_graph`] (or [`replace_graph`]) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphRewrite {
    /// The tag, spelled as in tags.txt.
    pub tag: String,
    /// The encoding before.
    pub from: GraphFormat,
    /// The encoding after.
    pub to: GraphFormat,
    /// Size of the old graph entry.
    pub old_bytes: u64,
    /// Size of the new graph entry.
    pub new_bytes: u64,
    /// False when the tag already held the graph in the target encoding (nothing written).
    pub changed: bool,
    /// For an `s3://` or `az://` archive that changed: the remote write's versions and costs.
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

/// Converts tag `tag`'s graph to encoding `to` (decode, re-encode, atomic rewrite of the
/// archive). A tag whose graph already has that encoding is left alone (`changed` false);
/// a tag without a graph is an error.
pub fn convert_graph(
    path: impl AsRef<Path>,
    tag: &str,
    to: GraphFormat,
    opts: &WriteOptions,
) -> Result<GraphRewrite> {
    rewrite_graph(path.as_ref(), tag, opts, |from, bytes| {
        if from == to {
            return Ok(None);
        }
        if from == GraphFormat::ProgramDesc
            && let Some(path) = crate::graph::programdesc::unknown_field(bytes)?
        {
            return Err(ErrorKind::Graph(format!(
                "{path} is not in framework.proto (written by another Paddle version?); \
                 converting would lose it, so the graph stays a ProgramDesc"
            ))
            .into());
        }
        let g = Graph::decode(from, bytes)?;
        Ok(Some((to, g.encode(to)?)))
    })
}

/// Replaces tag `tag`'s graph with `bytes` in encoding `enc` (atomic rewrite). The bytes
/// are stored as given once they decode (else [`ErrorKind::Graph`]); the tag must already
/// have a graph.
pub fn replace_graph(
    path: impl AsRef<Path>,
    tag: &str,
    enc: GraphFormat,
    bytes: &[u8],
    opts: &WriteOptions,
) -> Result<GraphRewrite> {
    rewrite_graph(path.as_ref(), tag, opts, |_, _| {
        super::writer::check_graph(tag, enc, bytes)?;
        Ok(Some((enc, bytes.to_vec())))
    })
}

/// Rewrites the archive with tag `tag`'s graph replaced by what `make` returns for the
/// current one (`None`: keep it, write nothing). An `s3://` or `az://` URL (feature `remote`) gets
/// the change as a remote removal does: the store copies the old object up to its
/// central directory, the new graph and tables are uploaded, the old graph entry stays
/// as dead bytes until a compaction.
fn rewrite_graph(
    path: &Path,
    tag: &str,
    opts: &WriteOptions,
    make: impl FnOnce(GraphFormat, &[u8]) -> Result<Option<(GraphFormat, Vec<u8>)>>,
) -> Result<GraphRewrite> {
    #[cfg(feature = "remote")]
    if let Some(url) = super::append::url_of(path) {
        let remote = crate::remote::RemoteOptions::default();
        return crate::remote::continue_remote(url, &remote, |sink, base| {
            Ok(match plan(base, tag, make)? {
                Regraph::Unchanged(report) => (report, None),
                Regraph::Change(change) => {
                    let keep = |e: &super::container::ZipEntry| {
                        !written_by_commit(&e.name)
                            && *e.name != *change.old_name
                            && !change.dropped.contains(&*e.name)
                            && !change.replaced.contains_key(&*e.name)
                    };
                    let mut s = Session::in_place(sink, base, opts.clone(), keep)?;
                    let mut replaced: Vec<_> = change.replaced.iter().collect();
                    replaced.sort();
                    for (name, bytes) in replaced {
                        s.write_text(name, bytes)?;
                    }
                    change.write_graph_and_copies(&mut s, base)?;
                    (change.report, Some(s))
                }
            })
        })
        .map(|(mut report, done)| {
            report.remote = done.map(|(w, _)| w);
            report
        })
        .map_err(|e| e.in_file(url));
    }
    let ap = ArchivePath::resolve(path)?;
    let path = ap.real.as_path();
    let run = || -> Result<GraphRewrite> {
        let (_lock, base) = open_locked(&ap, opts)?;
        let change = match plan(&base, tag, make)? {
            Regraph::Unchanged(report) => return Ok(report),
            Regraph::Change(change) => change,
        };
        let temp = TempTarget::create(path)?;
        let mut s = Session::new(Box::new(temp.writer(opts.fsync)?), 0, opts.clone());
        let skip = |e: &super::container::ZipEntry| {
            written_by_commit(&e.name)
                || *e.name == *change.old_name
                || change.dropped.contains(&*e.name)
        };
        s.copy_archive(&base, skip, &change.replaced, &mut || {})?;
        change.write_graph_and_copies(&mut s, &base)?;
        let mut added: Vec<&String> = change
            .replaced
            .keys()
            .filter(|n| !base.has_entry(n))
            .collect();
        added.sort();
        for name in added {
            s.write_text(name, &change.replaced[name])?;
        }
        s.keep_tags_of(&base);
        finish_rewrite(s, temp, Some(base))?;
        Ok(change.report)
    };
    run().map_err(|e| ap.located(e))
}

/// What replacing a tag's graph changes, or that it changes nothing.
enum Regraph {
    Unchanged(GraphRewrite),
    Change(Change),
}

/// The entries a graph replacement writes and drops.
struct Change {
    report: GraphRewrite,
    /// The tag's old graph entry (dropped) and new one.
    old_name: String,
    new_name: String,
    new_bytes: Vec<u8>,
    /// New content of text entries (shared.txt, sha256sums.txt), existing or added.
    replaced: HashMap<String, Vec<u8>>,
    /// Entries left out (a shared.txt whose every line went).
    dropped: std::collections::HashSet<String>,
    /// (source entry, new entry): the old graph moved into the oldest tag that shared it.
    copies: Vec<(String, String)>,
}

impl Change {
    /// Writes the new graph entry, then the moved old graph.
    fn write_graph_and_copies(&self, s: &mut Session, base: &Archive) -> Result<()> {
        // Deflated like every graph modelzip writes (WriteOptions::deflate_text).
        s.write_text(&self.new_name, &self.new_bytes)
            .map_err(|err| err.in_entry(self.new_name.clone()))?;
        s.copy_entries(base, &self.copies, &mut || {})
    }
}

/// What replacing tag `tag`'s graph of `base` with what `make` returns changes.
fn plan(
    base: &Archive,
    tag: &str,
    make: impl FnOnce(GraphFormat, &[u8]) -> Result<Option<(GraphFormat, Vec<u8>)>>,
) -> Result<Regraph> {
    let canon = base
        .canonical_tag(tag)
        .ok_or_else(|| Error::new(ErrorKind::tag_not_found(tag, base.tags())))?
        .to_string();
    let (from, old_bytes, new) = {
        let t = base.tag(&canon)?;
        let Some((from, old)) = t.graph()? else {
            let what = if crate::interop::tf::saved_model::is_saved_model_tag(&t) {
                "holds a TensorFlow SavedModel, whose saved_model/saved_model.pb is \
                 kept undecoded and not converted (no graph.pdmodel or graph.fb)"
            } else {
                "has no graph (no graph.pdmodel or graph.fb)"
            };
            return Err(ErrorKind::InvalidInput(format!("tag {canon:?} {what}")).into());
        };
        let new =
            make(from, &old).map_err(|e| e.in_entry(format!("{canon}/{}", from.file_name())))?;
        (from, old.len() as u64, new.map(|n| (n, old.into_owned())))
    };
    let Some(((to, new_bytes), old)) = new else {
        return Ok(Regraph::Unchanged(GraphRewrite {
            tag: canon,
            from,
            to: from,
            old_bytes,
            new_bytes: old_bytes,
            changed: false,
            #[cfg(feature = "remote")]
            remote: None,
        }));
    };
    let old_name = format!("{canon}/{}", from.file_name());
    let new_name = format!("{canon}/{}", to.file_name());
    // Shared graphs (shared.txt): a tag that takes its graph from another gets its
    // own; tags that take theirs from this one keep the old graph, moved into the
    // oldest of them (the others then point at that one).
    let mut edits: HashMap<String, TagEdit> = HashMap::new();
    let mut copies: Vec<(String, String)> = Vec::new();
    let own_graph = base.has_entry(&old_name);
    {
        let t = base.tag(&canon)?;
        let edit = edits.entry(canon.clone()).or_default();
        edit.shared = Some(
            t.shared_files()
                .iter()
                .filter(|(f, _)| *f != from.file_name())
                .map(|(f, o)| (*f, o.to_string()))
                .collect(),
        );
        edit.sums
            .push((sha256_hex(&new_bytes), to.file_name().to_string()));
        if own_graph {
            edit.unlisted.push(from.file_name().to_string());
        }
    }
    if own_graph {
        let mut home: Option<String> = None;
        for name in base.tags() {
            if *name == canon {
                continue;
            }
            let t = base.tag(name)?;
            if !t
                .shared_files()
                .iter()
                .any(|(f, o)| *f == from.file_name() && *o == canon)
            {
                continue;
            }
            let edit = edits.entry(name.clone()).or_default();
            let mut rows: Vec<(&'static str, String)> = Vec::new();
            for &(f, o) in t.shared_files() {
                if f == from.file_name() && o == canon {
                    match &home {
                        Some(h) => rows.push((f, h.clone())),
                        None => {
                            copies.push((old_name.clone(), format!("{name}/{f}")));
                            edit.sums.push((sha256_hex(&old), f.to_string()));
                            home = Some(name.clone());
                        }
                    }
                } else {
                    rows.push((f, o.to_string()));
                }
            }
            edit.shared = Some(rows);
        }
    }
    let mut replaced: HashMap<String, Vec<u8>> = HashMap::new();
    let mut dropped: std::collections::HashSet<String> = Default::default();
    for (name, edit) in &edits {
        edit.apply(base, name, &mut replaced, &mut dropped)?;
    }
    Ok(Regraph::Change(Change {
        report: GraphRewrite {
            tag: canon,
            from,
            to,
            old_bytes,
            new_bytes: new_bytes.len() as u64,
            changed: true,
            #[cfg(feature = "remote")]
            remote: None,
        },
        old_name,
        new_name,
        new_bytes,
        replaced,
        dropped,
        copies,
    }))
}

/// What changes in one tag's text files when graphs move: its new shared.txt rows (if
/// they change), files added (hash, name) and files no longer its own.
#[derive(Default)]
struct TagEdit {
    shared: Option<Vec<(&'static str, String)>>,
    sums: Vec<(String, String)>,
    unlisted: Vec<String>,
}

impl TagEdit {
    /// Adds the tag's new shared.txt (or its removal) and sha256sums.txt to
    /// `replaced` / `dropped`.
    fn apply(
        &self,
        base: &Archive,
        tag: &str,
        replaced: &mut HashMap<String, Vec<u8>>,
        dropped: &mut std::collections::HashSet<String>,
    ) -> Result<()> {
        let shared_name = format!("{tag}/{SHARED_TXT}");
        let mut unlisted = self.unlisted.clone();
        let mut sums_add = self.sums.clone();
        if let Some(rows) = &self.shared {
            if rows.is_empty() {
                if base.has_entry(&shared_name) {
                    dropped.insert(shared_name.clone());
                }
                unlisted.push(SHARED_TXT.to_string());
            } else {
                let txt = text::render_shared(rows.iter().map(|(f, t)| (*f, t.as_str())));
                sums_add.push((sha256_hex(txt.as_bytes()), SHARED_TXT.to_string()));
                replaced.insert(shared_name, txt.into_bytes());
            }
        }
        let sums_name = format!("{tag}/sha256sums.txt");
        if base.has_entry(&sums_name) {
            let mut rows = text::parse_sums(&base.entry_bytes(&sums_name)?, &sums_name)?;
            rows.retain(|(_, p)| !unlisted.contains(p));
            for (h, rel) in sums_add {
                match rows.iter_mut().find(|(_, p)| *p == rel) {
                    Some(row) => row.0 = h,
                    None => rows.push((h, rel)),
                }
            }
            replaced.insert(sums_name, text::render_sums(&rows).into_bytes());
        }
        Ok(())
    }
}
