//! Replacing one tag's graph entry (e.g. converting graph.pdmodel to graph.fb): an atomic
//! rewrite of the whole archive, like compaction, with the tag's sha256sums.txt updated.

use super::append::open_locked;
use super::archive_path::ArchivePath;
use super::durable::TempTarget;
use super::reader::{GraphEncoding, TAGS_TXT, sha256_hex};
use super::text;
use super::writer::{Session, WriteOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use std::path::Path;

/// What [`convert_graph`] (or [`replace_graph`]) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphRewrite {
    /// The tag, spelled as in tags.txt.
    pub tag: String,
    /// The encoding before.
    pub from: GraphEncoding,
    /// The encoding after.
    pub to: GraphEncoding,
    /// Size of the old graph entry.
    pub old_bytes: u64,
    /// Size of the new graph entry.
    pub new_bytes: u64,
    /// False when the tag already held the graph in the target encoding (nothing written).
    pub changed: bool,
}

/// Converts tag `tag`'s graph to encoding `to` (decode, re-encode, atomic rewrite of the
/// archive). A tag whose graph already has that encoding is left alone (`changed` false);
/// a tag without a graph is an error.
pub fn convert_graph(
    path: impl AsRef<Path>,
    tag: &str,
    to: GraphEncoding,
    opts: &WriteOptions,
) -> Result<GraphRewrite> {
    rewrite_graph(path.as_ref(), tag, opts, |from, bytes| {
        if from == to {
            return Ok(None);
        }
        if from == GraphEncoding::ProgramDesc
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
    enc: GraphEncoding,
    bytes: &[u8],
    opts: &WriteOptions,
) -> Result<GraphRewrite> {
    rewrite_graph(path.as_ref(), tag, opts, |_, _| {
        super::writer::check_graph(tag, enc, bytes)?;
        Ok(Some((enc, bytes.to_vec())))
    })
}

/// Rewrites the archive with tag `tag`'s graph replaced by what `make` returns for the
/// current one (`None`: keep it, write nothing).
fn rewrite_graph(
    path: &Path,
    tag: &str,
    opts: &WriteOptions,
    make: impl FnOnce(GraphEncoding, &[u8]) -> Result<Option<(GraphEncoding, Vec<u8>)>>,
) -> Result<GraphRewrite> {
    let ap = ArchivePath::resolve(path)?;
    let path = ap.real.as_path();
    let run = || -> Result<GraphRewrite> {
        let (_lock, base) = open_locked(&ap, opts)?;
        let canon = base
            .canonical_tag(tag)
            .ok_or_else(|| Error::new(ErrorKind::tag_not_found(tag, base.tags())))?
            .to_string();
        let (from, old_bytes, new) = {
            let t = base.tag(&canon)?;
            let Some((from, old)) = t.graph()? else {
                return Err(ErrorKind::InvalidInput(format!(
                    "tag {canon:?} has no graph (no graph.pdmodel or graph.fb)"
                ))
                .into());
            };
            let new = make(from, &old)
                .map_err(|e| e.in_entry(format!("{canon}/{}", from.file_name())))?;
            (from, old.len() as u64, new)
        };
        let Some((to, new_bytes)) = new else {
            return Ok(GraphRewrite {
                tag: canon,
                from,
                to: from,
                old_bytes,
                new_bytes: old_bytes,
                changed: false,
            });
        };
        let old_name = format!("{canon}/{}", from.file_name());
        let new_name = format!("{canon}/{}", to.file_name());
        let sums_name = format!("{canon}/sha256sums.txt");
        let sums = match base.entry(&sums_name) {
            Some(_) => {
                let mut rows = text::parse_sums(&base.entry_bytes(&sums_name)?, &sums_name)?;
                let h = sha256_hex(&new_bytes);
                let rel = to.file_name().to_string();
                match rows.iter_mut().find(|(_, p)| p == from.file_name()) {
                    Some(row) => *row = (h, rel),
                    None => rows.push((h, rel)),
                }
                Some(text::render_sums(&rows))
            }
            None => None,
        };
        let temp = TempTarget::create(path)?;
        let mut s = Session::new(Box::new(temp.writer()?), 0, opts.clone());
        for e in &base.directory().entries {
            if e.name == TAGS_TXT {
                continue;
            }
            if e.name == old_name {
                // Deflated like every graph modelzip writes (WriteOptions::deflate_text).
                s.write_text(&new_name, &new_bytes)
                    .map_err(|err| err.in_entry(new_name.clone()))?;
            } else if let (true, Some(sums)) = (e.name == sums_name, &sums) {
                s.write_text(&e.name, sums.as_bytes())?;
            } else {
                s.copy_entry(&base, e, &e.name)?;
            }
        }
        s.tags = base.tags().to_vec();
        s.comment = base.directory().comment.clone();
        drop(base);
        let (sink, _) = s.finish()?;
        drop(sink);
        temp.commit(opts.fsync)?;
        Ok(GraphRewrite {
            tag: canon,
            from,
            to,
            old_bytes,
            new_bytes: new_bytes.len() as u64,
            changed: true,
        })
    };
    run().map_err(|e| ap.located(e))
}
