//! `modelzip compact`: rewrite without dead bytes.

use super::common::{WriteArgs, require_archive};
use super::output::{human_bytes, print, print_json};
use super::{CliError, Outcome};
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
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document: {"archive", "before_bytes", "after_bytes"}"#)))]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// Exact byte counts.
    #[arg(long)]
    bytes: bool,
    #[command(flatten)]
    write: WriteArgs,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    require_archive(
        &args.archive,
        &format!("cannot compact {}", args.archive.display()),
    )?;
    let progress = args.write.output.progress("compacting");
    let opts = args.write.options_reporting(&progress);
    let report = modelzip::compact(&args.archive, &opts)
        .map_err(|e| CliError::Failed(format!("cannot compact {}: {e}", args.archive.display())))?;
    progress.finish();
    if args.write.output.json {
        print_json(&json!({
            "archive": args.archive.display().to_string(),
            "before_bytes": report.before,
            "after_bytes": report.after,
        }))?;
    } else if !args.write.output.quiet {
        print(&format!(
            "{}: {} -> {}\n",
            args.archive.display(),
            human_bytes(report.before, args.bytes),
            human_bytes(report.after, args.bytes)
        ))?;
    }
    Ok(Outcome::Success)
}
