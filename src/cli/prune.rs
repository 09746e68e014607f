//! `modelzip prune`: keep only the newest N tags.

use super::output::print;
use super::{CliError, Outcome};
use modelzip::archive::{self, WriteOptions};
use std::path::PathBuf;

/// Remove all but the newest N tags. Files the kept tags reference are kept
/// (moved into a kept tag where needed).
///
/// Example:
///   modelzip prune checkpoints.zip --keep 3
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// How many of the newest tags to keep (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
    /// Wait for another writer to finish instead of failing.
    #[arg(long)]
    wait: bool,
    /// Print nothing on success.
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let opts = WriteOptions {
        wait_for_lock: args.wait,
        ..WriteOptions::default()
    };
    let keep = usize::try_from(args.keep).unwrap_or(usize::MAX);
    let removed = archive::prune_with(&args.archive, keep, &opts)
        .map_err(|e| CliError(format!("cannot prune {}: {e}", args.archive.display())))?;
    if !args.quiet {
        if removed.is_empty() {
            print("nothing to remove\n")?;
        } else {
            print(&format!(
                "removed {} tag(s): {}\n",
                removed.len(),
                removed.join(", ")
            ))?;
        }
    }
    Ok(Outcome::Success)
}
