//! `modelzip rm`: remove a tag.

use super::common::refuse_directory;
use super::output::{print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::archive::{self, RemoveReport, WriteOptions};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Remove a tag. Files of the removed tag that a kept tag references are moved
/// into a kept tag and the references rewritten: nothing a kept tag uses is lost.
/// The archive is rewritten to a new file and renamed over the old one; with
/// --in-place, only the changes are appended (crash-safe, like an in-place append) and
/// the removed tag's bytes stay as dead bytes until `modelzip compact`.
///
/// Example:
///   modelzip rm model.zip step-1000
///   modelzip rm model.zip step-1000 --in-place --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The tag to remove (ignoring case).
    tag: String,
    /// Remove without rewriting the archive: append the changes in place; the
    /// removed tag's bytes become dead bytes until `compact`.
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
        &format!("cannot remove {} from {}", args.tag, args.archive.display()),
    )?;
    let progress = Progress::new(args.quiet || args.json, "removing");
    let opts = WriteOptions {
        wait_for_lock: args.wait,
        progress: progress.hook(),
        ..WriteOptions::default()
    };
    let result = if args.in_place {
        archive::remove_tags_in_place(&args.archive, &opts, |a| {
            a.canonical_tag(&args.tag)
                .map(|t| vec![t.to_string()])
                .ok_or_else(|| modelzip::ErrorKind::tag_not_found(&args.tag, a.tags()).into())
        })
    } else {
        archive::remove_tag_report(&args.archive, &args.tag, &opts)
    };
    let report = result.map_err(|e| {
        CliError(format!(
            "cannot remove {} from {}: {e}",
            args.tag,
            args.archive.display()
        ))
    })?;
    progress.finish();
    if args.json {
        print_json(&removal_json(&args.archive, &report))?;
    } else if !args.quiet {
        let name = report.removed.first().unwrap_or(&args.tag);
        print(&format!("removed tag {name}{}\n", rehomed_note(&report)))?;
    }
    Ok(Outcome::Success)
}

/// The JSON document of `rm --json` and `prune --json` (documented in docs/CLI.md).
pub fn removal_json(archive: &Path, r: &RemoveReport) -> Value {
    json!({
        "archive": archive.display().to_string(),
        "removed": r.removed,
        "kept": r.kept,
        "rehomed": r.rehomed,
        "before_bytes": r.before,
        "after_bytes": r.after,
    })
}

/// `" (N file(s) moved into kept tags)"`, or nothing when none moved.
pub fn rehomed_note(r: &RemoveReport) -> String {
    if r.rehomed == 0 {
        String::new()
    } else {
        format!(" ({} file(s) moved into kept tags)", r.rehomed)
    }
}
