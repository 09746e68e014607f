//! `modelzip convert`: re-encode a tag's graph (graph.pdmodel <-> graph.fb) in place.

use super::common::{WriteArgs, is_url, require_archive};
use super::graph::encoding_name;
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::GraphFormat;
use serde_json::json;
use std::path::PathBuf;

/// Convert a tag's graph between Paddle ProgramDesc (graph.pdmodel) and modelzip's
/// FlatBuffers schema (graph.fb). The conversion is lossless: converting back gives
/// the original ProgramDesc. A ProgramDesc holding a protobuf field framework.proto does
/// not declare (from another Paddle version) is refused rather than converted without
/// it. The archive is rewritten to a new file and renamed over
/// the old one (crash-safe; this also drops dead bytes, like compact). A tag already
/// in the target encoding is left alone.
///
/// ARCHIVE may be an s3:// or az:// URL: the store copies the object up to its central
/// directory, the new graph and the changed tables are uploaded, committed only if the
/// object is still the version read; the old graph stays as dead bytes until
/// `modelzip compact` (docs/REMOTE.md).
///
/// Example:
///   modelzip convert model.zip --tag fp32 --to flatbuffers
///   modelzip convert model.zip --tag fp32 --to programdesc --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document instead of a line; for an s3:// or az:// ARCHIVE that changed also "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
#[command(mut_arg("quiet", |a| a.help("Print nothing on success")))]
pub struct Args {
    /// The archive (a path, or an s3:// or az:// URL).
    archive: PathBuf,
    /// The tag whose graph to convert (ignoring case).
    #[arg(long)]
    tag: String,
    /// The target encoding.
    #[arg(long, value_enum, ignore_case = true)]
    to: Target,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// graph.fb (schemas/graph.fbs).
    Flatbuffers,
    /// graph.pdmodel (Paddle ProgramDesc).
    Programdesc,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    // A URL is the library's to check (an s3:// archive is changed where it lies).
    if !is_url(&args.archive) {
        require_archive(
            &args.archive,
            &format!(
                "cannot convert the graph of tag {:?} in {}",
                args.tag,
                args.archive.display()
            ),
        )?;
    }
    let to = match args.to {
        Target::Flatbuffers => GraphFormat::FlatBuffers,
        Target::Programdesc => GraphFormat::ProgramDesc,
    };
    let opts = args.write.options();
    let r = modelzip::convert_graph(&args.archive, &args.tag, to, &opts).map_err(|e| {
        CliError::Failed(format!(
            "cannot convert the graph of tag {:?}: {e}",
            args.tag
        ))
    })?;
    if args.write.output.json {
        let doc = json!({
            "tag": r.tag,
            "from": encoding_name(r.from),
            "to": encoding_name(r.to),
            "old_bytes": r.old_bytes,
            "new_bytes": r.new_bytes,
            "changed": r.changed,
        });
        return print_json(&super::common::with_remote(doc, r.remote.as_ref()))
            .map(|_| Outcome::Success);
    }
    if !args.write.output.quiet {
        let line = if r.changed {
            format!(
                "tag {}: {} ({} bytes) -> {} ({} bytes){}\n",
                r.tag,
                r.from.file_name(),
                r.old_bytes,
                r.to.file_name(),
                r.new_bytes,
                super::common::remote_cost(r.remote.as_ref()),
            )
        } else {
            format!(
                "tag {}: already {} ({} bytes); nothing to do\n",
                r.tag,
                r.to.file_name(),
                r.new_bytes
            )
        };
        print(&line)?;
    }
    Ok(Outcome::Success)
}
