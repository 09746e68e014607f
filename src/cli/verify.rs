//! `modelzip verify`: check everything.

use super::common::ReportArgs;
use super::common::open;
use super::output::{clean, print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use serde_json::json;

/// Check an archive: structure, references, CRC32, SHA-256 manifests, that every
/// tensor decodes with a byte count matching dtype × dims, that every graph decodes,
/// and that a TensorFlow graph's constants are parameters of its tag with the declared
/// dtype and dims.
///
/// Exit status: 0 clean, 1 problems found (each listed), 2 could not run.
///
/// Example:
///   modelzip verify model.zip
///   modelzip verify model.zip --json
///   modelzip verify -q model.zip && echo sound
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help("Print one JSON document instead of text")))]
pub struct Args {
    #[command(flatten)]
    report: ReportArgs,
    /// Print nothing (and no progress bar): the exit status says it, 0 clean, 1
    /// problems found.
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.report.archive)?;
    let progress = Progress::new(args.report.json || args.quiet, "verifying");
    let report = match progress.hook() {
        Some(hook) => archive.verify_with_progress(&|done, total| hook.report(done, total)),
        None => archive.verify(),
    };
    progress.finish();
    let ok = report.problems.is_empty();
    if args.quiet {
        // Nothing to print.
    } else if args.report.json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| json!({"entry": p.entry, "message": p.message}))
            .collect();
        let doc = json!({
            "archive": args.report.archive.display().to_string(),
            "ok": ok,
            "tags": archive.tags().len(),
            "problems": problems,
        });
        print_json(&doc)?;
    } else if ok {
        print(&format!(
            "{}: ok ({} tags)\n",
            args.report.archive.display(),
            archive.tags().len()
        ))?;
    } else {
        let mut out = format!(
            "{}: {} problem(s)\n",
            args.report.archive.display(),
            report.problems.len()
        );
        for p in &report.problems {
            match &p.entry {
                Some(e) => out.push_str(&format!("  {}: {}\n", clean(e), clean(&p.message))),
                None => out.push_str(&format!("  {}\n", clean(&p.message))),
            }
        }
        print(&out)?;
    }
    Ok(if ok {
        Outcome::Success
    } else {
        Outcome::Negative
    })
}
