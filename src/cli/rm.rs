//! `modelzip rm`: remove a tag.

use super::common::{WriteArgs, is_url, remote_write_fields, require_archive};
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::{Removal, RemoveReport};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Remove a tag. Files of the removed tag that a kept tag references are moved
/// into a kept tag and the references rewritten: nothing a kept tag uses is lost.
/// The archive is rewritten to a new file and renamed over the old one; with
/// --in-place, only the changes are appended (crash-safe, like an in-place append) and
/// the removed tag's bytes stay as dead bytes until `modelzip compact`.
///
/// ARCHIVE may be an s3:// or az:// URL: the store composes the new version from the old
/// object's bytes (copied server-side) and the rewritten tables uploaded from here,
/// committed only if the object is still the version read; the removed tag's bytes stay
/// in the object as dead bytes, as with --in-place (docs/REMOTE.md).
///
/// Example:
///   modelzip rm model.zip step-1000
///   modelzip rm model.zip step-1000 --in-place --json
///   modelzip rm s3://bucket/run.zip step-1000
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive (a path, or an s3:// or az:// URL).
    archive: PathBuf,
    /// The tag to remove (ignoring case).
    tag: String,
    #[command(flatten)]
    removal: RemovalArgs,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let failed = format!("cannot remove {} from {}", args.tag, args.archive.display());
    args.removal.run(
        &args.archive,
        &failed,
        "removing",
        Removal::tags([&args.tag]),
        |report| {
            let name = report.removed.first().unwrap_or(&args.tag);
            format!("removed tag {name}{}\n", rehomed_note(report))
        },
    )
}

/// The switches `rm` and `prune` share: `--in-place` and the write switches.
#[derive(clap::Args, Debug)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document: {"archive", "removed", "kept", "rehomed", "before_bytes", "after_bytes"}; for an s3:// or az:// ARCHIVE that changed, also "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
pub struct RemovalArgs {
    /// Remove without rewriting the archive: append the changes in place; the
    /// removed bytes become dead bytes until `compact`.
    #[arg(long)]
    in_place: bool,
    #[command(flatten)]
    write: WriteArgs,
}

impl RemovalArgs {
    /// Removes the tags `removal` picks from `archive` (in place with `--in-place`),
    /// with a progress bar labelled `label`; then prints the report (`summary` gives the
    /// line of human output). `failed` starts an error line.
    pub fn run(
        &self,
        archive: &Path,
        failed: &str,
        label: &str,
        removal: Removal<'_>,
        summary: impl FnOnce(&RemoveReport) -> String,
    ) -> Result<Outcome, CliError> {
        let remote = is_url(archive);
        if !remote {
            require_archive(archive, failed)?;
        }
        let progress = self.write.output.progress(label);
        let opts = self.write.options_reporting(&progress);
        let fail = |e: modelzip::Error| CliError::Failed(format!("{failed}: {e}"));
        let report = match archive.to_str().filter(|_| remote) {
            Some(url) => modelzip::remote::remove_tags(
                url,
                removal,
                &modelzip::remote::RemoteOptions::default(),
                &opts,
            )
            .map_err(fail)?,
            None => modelzip::remove_tags(archive, removal.in_place(self.in_place), &opts)
                .map_err(fail)?,
        };
        let done = &report.remote;
        progress.finish();
        if self.write.output.json {
            let mut doc = removal_json(archive, &report);
            if let (Value::Object(m), Some(done)) = (&mut doc, done) {
                m.extend(remote_write_fields(done));
            }
            print_json(&doc)?;
        } else if !self.write.output.quiet {
            let mut line = summary(&report);
            if let Some(done) = done {
                line.pop();
                line.push_str(&format!(
                    "; {} bytes uploaded, {} copied by the store, {} requests\n",
                    done.bytes_uploaded, done.bytes_copied, done.requests
                ));
            }
            print(&line)?;
        }
        Ok(Outcome::Success)
    }
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
