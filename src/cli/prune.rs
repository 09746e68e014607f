//! `modelzip prune`: keep only the newest N tags.

use super::rm::{RemovalArgs, rehomed_note};
use super::{CliError, Outcome};
use modelzip::Removal;
use std::path::PathBuf;

/// Remove all but the newest N tags. Files the kept tags reference are kept
/// (moved into a kept tag where needed). The archive is rewritten; with --in-place,
/// only the changes are appended and the removed tags' bytes stay as dead bytes until
/// `modelzip compact`. Nothing to remove writes nothing with --in-place.
///
/// ARCHIVE may be an s3:// or az:// URL: the removal is composed by the store as `rm` does
/// (the removed tags' bytes stay as dead bytes; nothing to remove writes nothing).
///
/// Example:
///   modelzip prune checkpoints.zip --keep 3
///   modelzip prune checkpoints.zip --keep 3 --in-place --json
///   modelzip prune s3://bucket/run.zip --keep 3
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive (a path, or an s3:// or az:// URL).
    archive: PathBuf,
    /// How many of the newest tags to keep (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    keep: u64,
    #[command(flatten)]
    removal: RemovalArgs,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let keep = usize::try_from(args.keep).unwrap_or(usize::MAX);
    let failed = format!("cannot prune {}", args.archive.display());
    args.removal.run(
        &args.archive,
        &failed,
        "pruning",
        Removal::keep_newest(keep),
        |report| {
            if report.removed.is_empty() {
                "nothing to remove\n".to_string()
            } else {
                format!(
                    "removed {} tag(s): {}{}\n",
                    report.removed.len(),
                    report.removed.join(", "),
                    rehomed_note(report)
                )
            }
        },
    )
}
