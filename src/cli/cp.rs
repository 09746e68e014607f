//! `modelzip cp`: copy an archive between a local path and a URL.

use super::common::{is_url, refuse_directory};
use super::output::{print, print_json};
use super::{CliError, Outcome};
use indicatif::{ProgressBar, ProgressStyle};
use modelzip::ErrorKind;
use modelzip::remote::{self, RemoteOptions, UploadMode};
use serde_json::json;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Copy an archive between a local path and a URL (s3://, gs://, az://, http(s)://,
/// file://), in either direction. Store settings come from the environment
/// (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, AWS_ACCESS_KEY_ID, GOOGLE_SERVICE_ACCOUNT,
/// AZURE_STORAGE_ACCOUNT_NAME, ...; docs/REMOTE.md).
///
/// Upload: the local file must open as an archive, and the bytes checked are the
/// bytes uploaded (a file replaced or changed meanwhile is refused). Without --force
/// it only creates: an object already at the URL is an error, and of two concurrent
/// uploads to one URL exactly one wins. With --if-match ETAG it replaces the object
/// only if it is still that version. Files over 64 MiB go up in parts.
///
/// Download: written to a temporary file beside DST, verified (CRC-32s, tables,
/// tensors, manifests), then renamed over DST: DST is never a partial file. An
/// existing DST is replaced only with --force.
///
/// Example:
///   modelzip cp model.zip s3://models/resnet.zip
///   modelzip cp s3://models/resnet.zip copy.zip
///   modelzip cp model.zip s3://models/resnet.zip --if-match '"9b2cf535f27731c974343645a3985328"'
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Where to copy from: a local archive or a URL.
    src: PathBuf,
    /// Where to copy to: a URL or a local path.
    dst: PathBuf,
    /// Replace whatever is at DST.
    #[arg(long, conflicts_with = "if_match")]
    force: bool,
    /// Upload only if the object at DST is still this version (its ETag); refused for a
    /// download.
    #[arg(long, value_name = "ETAG")]
    if_match: Option<String>,
    /// No progress bar.
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
    /// Print one JSON document instead of a summary.
    #[arg(long)]
    json: bool,
}

/// A byte progress bar on stderr, only on a terminal.
fn bar(hidden: bool, what: &str) -> Option<ProgressBar> {
    if hidden || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    Some(bar)
}

fn text(p: &Path) -> Result<&str, CliError> {
    p.to_str()
        .ok_or_else(|| CliError::Failed(format!("{} is not UTF-8", p.display())))
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let opts = RemoteOptions::default();
    let (src, dst) = (text(&args.src)?, text(&args.dst)?);
    let progress = bar(
        args.quiet || args.json,
        if is_url(&args.dst) {
            "uploading"
        } else {
            "downloading"
        },
    );
    let report = |done: u64, total: u64| {
        if let Some(b) = &progress {
            b.set_length(total);
            b.set_position(done);
        }
    };
    let (direction, version) = match (is_url(&args.src), is_url(&args.dst)) {
        (false, true) => {
            let mode = match (&args.if_match, args.force) {
                (Some(tag), _) => UploadMode::ReplaceVersion(tag.clone()),
                (None, true) => UploadMode::Replace,
                (None, false) => UploadMode::Create,
            };
            refuse_directory(&args.src, &format!("cannot upload {src} to {dst}"))?;
            // The library names no way to replace; the CLI's is a flag.
            let hint = match &mode {
                UploadMode::Create => "; pass --force to replace it",
                UploadMode::ReplaceVersion(_) => {
                    "; pass --force instead of --if-match to replace whatever is there"
                }
                UploadMode::Replace => "",
            };
            let v = remote::upload(&args.src, dst, mode, &opts, &report).map_err(|e| {
                let hint = match e.kind() {
                    ErrorKind::RemoteConflict(_) => hint,
                    _ => "",
                };
                CliError::Failed(format!("cannot upload {src} to {dst}: {e}{hint}"))
            })?;
            ("upload", v)
        }
        (true, false) => {
            if args.if_match.is_some() {
                return Err(CliError::Failed(
                    "--if-match applies to uploads (LOCAL to URL), not to a download".into(),
                ));
            }
            // A directory first: --force would not help.
            if args.dst.is_dir() {
                return Err(CliError::Failed(format!(
                    "cannot download to {dst}: it is a directory, not a file"
                )));
            }
            if args.dst.exists() && !args.force {
                return Err(CliError::Failed(format!(
                    "cannot download to {dst}: it exists; pass --force to replace it"
                )));
            }
            let v = remote::download(src, &args.dst, args.force, &opts, &report)
                .map_err(|e| CliError::Failed(format!("cannot download {src} to {dst}: {e}")))?;
            ("download", v)
        }
        (true, true) => {
            return Err(CliError::Failed(
                "cannot copy from a URL to a URL: download to a local file first".into(),
            ));
        }
        (false, false) => {
            return Err(CliError::Failed(
                "one of SRC and DST must be a URL (s3://, gs://, az://, http(s)://, file://)"
                    .into(),
            ));
        }
    };
    if let Some(b) = &progress {
        b.finish_and_clear();
    }
    if args.json {
        print_json(&json!({
            "src": src,
            "dst": dst,
            "direction": direction,
            "version": version,
        }))?;
    } else {
        let v = version
            .map(|v| format!(" (version {v})"))
            .unwrap_or_default();
        print(&format!("copied {src} to {dst}{v}\n"))?;
    }
    Ok(Outcome::Success)
}
