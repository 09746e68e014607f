//! `modelzip compact`: rewrite without dead bytes.

use super::output::{human_bytes, print};
use super::{CliError, Outcome};
use modelzip::archive::{self, WriteOptions};
use std::path::PathBuf;

/// Rewrite the archive without the dead bytes that in-place appends leave behind
/// (old central directories and old tags.txt files). Atomic: a new file is written
/// and renamed over the old one.
///
/// Example:
///   modelzip compact checkpoints.zip
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
    /// Print nothing on success.
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let opts = WriteOptions {
        wait_for_lock: args.wait,
        ..WriteOptions::default()
    };
    let report = archive::compact_with(&args.archive, &opts)
        .map_err(|e| CliError(format!("cannot compact {}: {e}", args.archive.display())))?;
    if !args.quiet {
        print(&format!(
            "{}: {} -> {}\n",
            args.archive.display(),
            human_bytes(report.before, args.bytes),
            human_bytes(report.after, args.bytes)
        ))?;
    }
    Ok(Outcome::Success)
}
