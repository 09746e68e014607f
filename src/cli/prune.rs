//! `modelzip prune`: keep only the newest N tags.

use super::common::refuse_directory;
use super::output::{print, print_json};
use super::progress::Progress;
use super::rm::{rehomed_note, removal_json};
use super::{CliError, Outcome};
use modelzip::archive::{self, WriteOptions};
use std::path::PathBuf;

/// Remove all but the newest N tags. Files the kept tags reference are kept
/// (moved into a kept tag where needed). The archive is rewritten; with --in-place,
/// only the changes are appended and the removed tags' bytes stay as dead bytes until
/// `modelzip compact`. Nothing to remove writes nothing with --in-place.
///
/// Example:
///   modelzip prune checkpoints.zip --keep 3
///   modelzip prune checkpoints.zip --keep 3 --in-place --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// How many of the newest tags to keep (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
    /// Remove without rewriting the archive: append the changes in place; the
    /// removed tags' bytes become dead bytes until `compact`.
    #[arg(long)]
    in_place: bool,
    /// Wait for another writer to finish instead of failing.
    #[arg(long)]
    wait: bool,
    /// Print one JSON document: {"archive", "removed", "kept", "rehomed",
    /// "before_bytes", "after_bytes"}.
    #[arg(long)]
    json: bool,
    /// Print nothing on success (and no progress bar).
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    refuse_directory(
        &args.archive,
        &format!("cannot prune {}", args.archive.display()),
    )?;
    let progress = Progress::new(args.quiet || args.json, "pruning");
    let opts = WriteOptions {
        wait_for_lock: args.wait,
        progress: progress.hook(),
        ..WriteOptions::default()
    };
    let keep = usize::try_from(args.keep).unwrap_or(usize::MAX);
    let result = if args.in_place {
        archive::remove_tags_in_place(&args.archive, &opts, |a| {
            let n = a.tags().len().saturating_sub(keep);
            Ok(a.tags()[..n].to_vec())
        })
    } else {
        archive::prune_report(&args.archive, keep, &opts)
    };
    let report =
        result.map_err(|e| CliError(format!("cannot prune {}: {e}", args.archive.display())))?;
    progress.finish();
    if args.json {
        print_json(&removal_json(&args.archive, &report))?;
    } else if !args.quiet {
        if report.removed.is_empty() {
            print("nothing to remove\n")?;
        } else {
            print(&format!(
                "removed {} tag(s): {}{}\n",
                report.removed.len(),
                report.removed.join(", "),
                rehomed_note(&report)
            ))?;
        }
    }
    Ok(Outcome::Success)
}
