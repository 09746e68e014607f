//! `modelzip tags`: the tag listing.

use super::common::ReportArgs;
use super::common::{free_at_exit, open};
use super::output::{Align, Table, clean, human_bytes, io_error, print_bytes, print_json};
use super::{CliError, Outcome};
use modelzip::{Archive, GraphFormat, TagSummary};
use serde_json::{Value, json};
use std::path::Path;

/// List the tags of an archive, oldest first; the default (newest) is marked.
///
/// Per tag: params, updater arrays, bytes stored in the tag itself, bytes it uses
/// from other tags, graph encoding, dtypes, created time. Read from the archive's
/// summary (_summary.txt) when it is current, else from every tag's tables and
/// tensor headers: the same output either way (for a URL, the summary needs no
/// request beyond the open's). When a tag was written by a sharded save (many
/// processes at once, docs/SHARDED.md), a "ranks" column says by how many (its
/// metadata.json's world size, recorded in the summary).
///
/// Example:
///   modelzip tags model.zip
///   modelzip tags model.zip --json
#[derive(clap::Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    report: ReportArgs,
    /// Exact byte counts instead of human-readable sizes.
    #[arg(long)]
    bytes: bool,
}

/// Every tag described, from the archive's summary when it is current, else from the
/// tags' tables on every core (what `tags` lists; `view` shows the same rows):
/// [`Archive::tag_summaries`].
pub(super) fn summaries(archive: &Archive, shown: &Path) -> Result<Vec<TagSummary>, CliError> {
    archive
        .tag_summaries()
        .map_err(|e| CliError::Failed(format!("cannot list the tags of {}: {e}", shown.display())))
}

/// One row of `tags --json`.
pub(super) fn tag_json(position: usize, r: &TagSummary) -> Value {
    json!({
        "name": r.name,
        "position": position,
        "params": r.params,
        "updater_arrays": r.updater_arrays,
        "own_bytes": r.own_bytes,
        "shared_bytes": r.shared_bytes,
        "graph": graph_word(r.graph),
        "dtypes": r.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>(),
        "created": r.created,
        "sharded": r.sharded.map(|n| json!({"world_size": n})),
    })
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.report.archive)?;
    // From the archive's summary when it is current (a remote archive: no request after
    // the open), else from every tag's tables and tensor headers.
    let rows = summaries(&archive, &args.report.archive)?;
    let default = archive.default_tag().map(str::to_string);
    free_at_exit(archive);
    if args.report.json {
        let tags: Vec<Value> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| tag_json(i, r))
            .collect();
        let doc = json!({
            "archive": args.report.archive.display().to_string(),
            "default": default,
            "tags": tags,
        });
        return print_json(&doc).map(|_| Outcome::Success);
    }
    // Columns as wide as their widest cell: a long tag name widens its column.
    use Align::{Left, Right};
    // The "ranks" column only when a sharded save wrote a tag.
    let sharded = rows.iter().any(|r| r.sharded.is_some());
    let mut aligns = vec![Left, Right, Right, Right, Right, Left, Left, Left];
    let mut header: Vec<String> = [
        "tag", "params", "updater", "own", "shared", "graph", "dtypes", "created",
    ]
    .map(String::from)
    .to_vec();
    if sharded {
        aligns.push(Right);
        header.push("ranks".into());
    }
    let mut table = Table::new(&aligns);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let dtypes: Vec<&str> = r.dtypes.iter().map(|d| d.name()).collect();
            let mut row = vec![
                clean(&r.name).into_owned(),
                r.params.to_string(),
                r.updater_arrays.to_string(),
                human_bytes(r.own_bytes, args.bytes),
                human_bytes(r.shared_bytes, args.bytes),
                graph_word(r.graph).unwrap_or("-").to_string(),
                dtypes.join(","),
                clean(r.created.as_deref().unwrap_or("-")).into_owned(),
            ];
            if sharded {
                row.push(r.sharded.map_or("-".into(), |n| n.to_string()));
            }
            row
        })
        .collect();
    table.fit(&header);
    for c in &cells {
        table.fit(c);
    }
    let mut out = Vec::new();
    let mut write = || -> std::io::Result<()> {
        table.write_row(&mut out, "  ", &header)?;
        for (r, c) in rows.iter().zip(&cells) {
            let mark = if Some(&r.name) == default.as_ref() {
                "* "
            } else {
                "  "
            };
            table.write_row(&mut out, mark, c)?;
        }
        if rows.is_empty() {
            out.extend_from_slice(b"(no tags)\n");
        } else {
            out.extend_from_slice(b"* default (newest) tag\n");
        }
        Ok(())
    };
    write().map_err(io_error)?;
    print_bytes(&out).map(|_| Outcome::Success)
}

fn graph_word(g: Option<GraphFormat>) -> Option<&'static str> {
    g.map(|g| match g {
        GraphFormat::FlatBuffers => "flatbuffers",
        GraphFormat::ProgramDesc => "programdesc",
    })
}
