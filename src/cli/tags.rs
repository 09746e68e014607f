//! `modelzip tags`: the tag listing.

use super::common::ReportArgs;
use super::common::{open, tag_err};
use super::output::{clean, human_bytes, print, print_json};
use super::{CliError, Outcome};
use modelzip::DType;
use modelzip::archive::{GraphFormat, Tag, TensorLocation};
use rustc_hash::FxHashSet as HashSet;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// List the tags of an archive, oldest first; the default (newest) is marked.
///
/// Per tag: params, updater arrays, bytes stored in the tag itself, bytes it uses
/// from other tags, graph encoding, dtypes, created time.
///
/// Example:
///   modelzip tags model.zip
///   modelzip tags model.zip --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    report: ReportArgs,
    /// Exact byte counts instead of human-readable sizes.
    #[arg(long)]
    bytes: bool,
}

/// What the listing says of one tag.
struct TagRow {
    name: String,
    params: usize,
    updater_arrays: usize,
    own_bytes: u64,
    shared_bytes: u64,
    graph: Option<&'static str>,
    dtypes: Vec<DType>,
    created: Option<String>,
}

fn row(tag: &Tag<'_>, own_bytes: u64) -> Result<TagRow, CliError> {
    let mut dtypes = BTreeSet::new();
    let locations = tag
        .params()
        .iter()
        .map(|p| &p.location)
        .chain(tag.updater().iter().flat_map(|u| u.arrays.iter()));
    // Many names may refer to one file: decode each file once.
    let mut decoded: HashSet<&str> = HashSet::default();
    let unique: Vec<&TensorLocation> = locations.filter(|l| decoded.insert(&l.entry)).collect();
    // From a remote archive: only each tensor's first bytes, in one batched request.
    let heads = tag
        .archive()
        .tensor_heads(&unique)
        .map_err(tag_err(tag.name()))?;
    let mut shared_bytes = 0;
    for (loc, head) in unique.iter().zip(&heads) {
        if loc.shared {
            shared_bytes += tag.stored_size(loc);
        }
        dtypes.insert(head.dtype);
    }
    // A graph or training config shared from another tag (shared.txt).
    for (file, owner) in tag.shared_files() {
        shared_bytes += tag
            .archive()
            .entry_stored_size(&format!("{owner}/{file}"))
            .unwrap_or(0);
    }
    let graph = tag
        .graph()
        .map_err(tag_err(tag.name()))?
        .map(|(g, _)| match g {
            GraphFormat::FlatBuffers => "flatbuffers",
            GraphFormat::ProgramDesc => "programdesc",
        });
    let created = tag
        .metadata()
        .map_err(tag_err(tag.name()))?
        .and_then(|m| serde_json::from_slice::<Created>(&m).ok())
        .and_then(|c| c.created);
    Ok(TagRow {
        name: tag.name().to_string(),
        params: tag.params().len(),
        updater_arrays: tag.updater().iter().map(|u| u.arrays.len()).sum(),
        own_bytes,
        shared_bytes,
        graph,
        dtypes: dtypes.into_iter().collect(),
        created,
    })
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.report.archive)?;
    // Tags are independent: describe them on every core (two threads halve `tags` on
    // an archive of 100 tags x 1,000 params; docs/BENCHMARKS.md, P5).
    let describe = |names: &[String]| -> Result<Vec<TagRow>, CliError> {
        names
            .iter()
            .map(|name| {
                let tag = archive.tag(name).map_err(tag_err(name))?;
                let own_bytes = archive.stored_bytes_under(tag.name());
                row(&tag, own_bytes)
            })
            .collect()
    };
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk = archive.tags().len().div_ceil(threads).max(1);
    let rows: Vec<TagRow> = std::thread::scope(|s| {
        let workers: Vec<_> = archive
            .tags()
            .chunks(chunk)
            .map(|names| s.spawn(move || describe(names)))
            .collect();
        let mut rows = Vec::new();
        for w in workers {
            let part = w.join().map_err(|_| {
                CliError::Failed(format!(
                    "cannot list the tags of {}: a worker thread panicked",
                    args.report.archive.display()
                ))
            })??;
            rows.extend(part);
        }
        Ok::<_, CliError>(rows)
    })?;
    let default = archive.default_tag().map(str::to_string);
    if args.report.json {
        let tags: Vec<Value> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                json!({
                    "name": r.name,
                    "position": i,
                    "params": r.params,
                    "updater_arrays": r.updater_arrays,
                    "own_bytes": r.own_bytes,
                    "shared_bytes": r.shared_bytes,
                    "graph": r.graph,
                    "dtypes": r.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>(),
                    "created": r.created,
                })
            })
            .collect();
        let doc = json!({
            "archive": args.report.archive.display().to_string(),
            "default": default,
            "tags": tags,
        });
        return print_json(&doc).map(|_| Outcome::Success);
    }
    let mut out = format!(
        "  {:<24} {:>7} {:>8} {:>11} {:>11} {:<12} {:<20} {}\n",
        "tag", "params", "updater", "own", "shared", "graph", "dtypes", "created"
    );
    for r in &rows {
        let mark = if Some(&r.name) == default.as_ref() {
            "*"
        } else {
            " "
        };
        let dtypes: Vec<&str> = r.dtypes.iter().map(|d| d.name()).collect();
        out.push_str(&format!(
            "{mark} {:<24} {:>7} {:>8} {:>11} {:>11} {:<12} {:<20} {}\n",
            clean(&r.name),
            r.params,
            r.updater_arrays,
            human_bytes(r.own_bytes, args.bytes),
            human_bytes(r.shared_bytes, args.bytes),
            r.graph.unwrap_or("-"),
            dtypes.join(","),
            clean(r.created.as_deref().unwrap_or("-")),
        ));
    }
    if rows.is_empty() {
        out.push_str("(no tags)\n");
    } else {
        out.push_str("* default (newest) tag\n");
    }
    print(&out).map(|_| Outcome::Success)
}

/// The one key of metadata.json the listing shows; the rest is skipped unparsed.
#[derive(serde::Deserialize)]
struct Created {
    created: Option<String>,
}
