//! `modelzip compact`: rewrite without dead bytes.

use super::common::{WriteArgs, is_url, remote_write_fields, require_archive};
use super::output::{human_bytes, print, print_json};
use super::{CliError, Outcome};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Rewrite the archive without the dead bytes that in-place appends and removals leave
/// behind (old central directories and tags.txt files, removed tags' entries). Atomic: a
/// new file is written and renamed over the old one.
///
/// ARCHIVE may be an s3:// or az:// URL: the store composes the new version from the live
/// entries only (runs of 5 MiB and more copied server-side, shorter ones read and
/// uploaded; the dead bytes neither copied nor read), then a new tags.txt, summary and
/// central directory uploaded from here, committed only if the object is still the
/// version read. Each run of entries moves by a multiple of 64 bytes (tensors stay
/// aligned): under 64 bytes of padding per removed gap stay. An object with no dead
/// bytes is left as it is (docs/REMOTE.md).
///
/// Example:
///   modelzip compact checkpoints.zip
///   modelzip compact checkpoints.zip --json
///   modelzip compact s3://bucket/run.zip
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document: {"archive", "before_bytes", "after_bytes"}; for an s3:// or az:// ARCHIVE it wrote (it had dead bytes) also "padding_bytes", "headers_read", "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
pub struct Args {
    /// The archive (a path, or an s3:// or az:// URL).
    archive: PathBuf,
    /// Exact byte counts.
    #[arg(long)]
    bytes: bool,
    #[command(flatten)]
    write: WriteArgs,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let failed = format!("cannot compact {}", args.archive.display());
    let remote = is_url(&args.archive);
    if !remote {
        require_archive(&args.archive, &failed)?;
    }
    let progress = args.write.output.progress("compacting");
    let opts = args.write.options_reporting(&progress);
    let fail = |e: modelzip::Error| CliError::Failed(format!("{failed}: {e}"));
    let report = match args.archive.to_str().filter(|_| remote) {
        Some(url) => {
            modelzip::remote::compact(url, &modelzip::remote::RemoteOptions::default(), &opts)
                .map_err(fail)?
        }
        None => modelzip::compact(&args.archive, &opts).map_err(fail)?,
    };
    progress.finish();
    if args.write.output.json {
        let mut doc = json!({
            "archive": args.archive.display().to_string(),
            "before_bytes": report.before,
            "after_bytes": report.after,
        });
        if let (Value::Object(m), Some(done)) = (&mut doc, &report.remote) {
            m.insert("padding_bytes".into(), json!(done.padding));
            m.insert("headers_read".into(), json!(done.headers_read));
            m.extend(remote_write_fields(done));
        }
        print_json(&doc)?;
    } else if !args.write.output.quiet {
        let mut line = format!(
            "{}: {} -> {}",
            args.archive.display(),
            human_bytes(report.before, args.bytes),
            human_bytes(report.after, args.bytes)
        );
        match &report.remote {
            Some(done) => line.push_str(&format!(
                "; {} bytes uploaded, {} copied by the store, {} re-read, {} requests",
                done.bytes_uploaded, done.bytes_copied, done.bytes_reread, done.requests
            )),
            None if remote => line.push_str("; no dead bytes, nothing written"),
            None => {}
        }
        line.push('\n');
        print(&line)?;
    }
    Ok(Outcome::Success)
}
