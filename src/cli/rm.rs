//! `modelzip rm`: remove a tag.

use super::output::print;
use super::{CliError, Outcome};
use modelzip::archive::{self, WriteOptions};
use std::path::PathBuf;

/// Remove a tag. Files of the removed tag that a kept tag references are moved
/// into a kept tag and the references rewritten: nothing a kept tag uses is lost.
/// The archive is rewritten to a new file and renamed over the old one.
///
/// Example:
///   modelzip rm model.zip step-1000
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The tag to remove (ignoring case).
    tag: String,
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
    archive::remove_tag_with(&args.archive, &args.tag, &opts).map_err(|e| {
        CliError(format!(
            "cannot remove {} from {}: {e}",
            args.tag,
            args.archive.display()
        ))
    })?;
    if !args.quiet {
        print(&format!("removed tag {}\n", args.tag))?;
    }
    Ok(Outcome::Success)
}
