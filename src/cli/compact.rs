//! `modelzip compact`: rewrite without dead bytes.

use super::common::refuse_directory;
use super::output::{human_bytes, print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::archive::{self, WriteOptions};
use serde_json::json;
use std::path::PathBuf;

/// Rewrite the archive without the dead bytes that in-place appends leave behind
/// (old central directories and old tags.txt files). Atomic: a new file is written
/// and renamed over the old one.
///
/// Example:
///   modelzip compact checkpoints.zip
///   modelzip compact checkpoints.zip --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// Wait for another writer to finish instead of failing.
    #[arg(long)]
    wait: bool,
    /// Exact byte counts.
    #[arg(long)]
    bytes: bool,
    /// Print one JSON document: {"archive", "before_bytes", "after_bytes"}.
    #[arg(long)]
    json: bool,
    /// Print nothing on success (and no progress bar).
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    refuse_directory(
        &args.archive,
        &format!("cannot compact {}", args.archive.display()),
    )?;
    let progress = Progress::new(args.quiet || args.json, "compacting");
    let opts = WriteOptions {
        wait_for_lock: args.wait,
        progress: progress.hook(),
        ..WriteOptions::default()
    };
    let report = archive::compact_with(&args.archive, &opts)
        .map_err(|e| CliError(format!("cannot compact {}: {e}", args.archive.display())))?;
    progress.finish();
    if args.json {
        print_json(&json!({
            "archive": args.archive.display().to_string(),
            "before_bytes": report.before,
            "after_bytes": report.after,
        }))?;
    } else if !args.quiet {
        print(&format!(
            "{}: {} -> {}\n",
            args.archive.display(),
            human_bytes(report.before, args.bytes),
            human_bytes(report.after, args.bytes)
        ))?;
    }
    Ok(Outcome::Success)
}
