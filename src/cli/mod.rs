//! Argument parsing, dispatch, exit codes and error rendering for the `modelzip` binary.
//!
//! Every command lives in its own module, returns a report, and renders it as a
//! table or as one JSON document. Exit codes: 0 success, 1 a negative answer
//! (e.g. `verify` found problems), 2 an error (bad input, I/O, usage).

mod cast;
mod cat;
mod common;
mod compact;
mod convert;
mod cp;
mod diff;
mod export;
mod export_paddle;
mod extract;
mod graph;
mod import;
mod import_paddle;
mod output;
mod pack;
mod progress;
mod prune;
mod quantize;
mod rm;
mod show;
mod tag_meta;
mod tags;
mod tensor;
mod verify;
mod view;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// Zip-based, multi-tag model archives with Paddle-compatible tensors.
#[derive(Parser, Debug)]
#[command(name = "modelzip", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Tags(tags::Args),
    Show(show::Args),
    Cat(cat::Args),
    Pack(pack::Args),
    Rm(rm::Args),
    Prune(prune::Args),
    Compact(compact::Args),
    Verify(verify::Args),
    Extract(extract::Args),
    Tensor(tensor::Args),
    Graph(graph::Args),
    Convert(convert::Args),
    Import(import::Args),
    Export(export::Args),
    ImportPaddle(import_paddle::Args),
    ExportPaddle(export_paddle::Args),
    Quantize(quantize::Args),
    Cast(cast::Args),
    Diff(diff::Args),
    Cp(cp::Args),
    View(view::Args),
}

/// What a command ended with, short of an error.
pub enum Outcome {
    /// Everything is fine: exit 0.
    Success,
    /// A negative answer (problems found, differences found): exit 1.
    Negative,
}

/// Why a command stopped short.
#[derive(Debug)]
pub enum CliError {
    /// A failure: one line for stderr, exit code 2.
    Failed(String),
    /// Stdout was closed (e.g. `| head`): the command ends quietly, exit code 0.
    BrokenPipe,
}

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Failed(e.to_string())
    }
}

/// Parses arguments, runs the command, prints the error if any, and returns the exit code.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                // --help, --version, or no command at all: the full text. A closed pipe
                // (`--help | head`) ends quietly; any other failure to print is an error.
                if let Err(err) = e.print()
                    && err.kind() != std::io::ErrorKind::BrokenPipe
                {
                    error_to_stderr(&format!("cannot write to stdout: {err}"));
                    return ExitCode::from(2);
                }
                return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
            }
            let command = std::env::args()
                .skip(1)
                .find(|a| !a.starts_with('-'))
                .filter(|c| Cli::command().find_subcommand(c).is_some());
            error_to_stderr(&usage_line(&e.render().to_string(), command.as_deref()));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        // Reading commands print only after reading: one whose remote archive was
        // replaced while it read runs once more on the new version (docs/REMOTE.md).
        Command::Tags(a) => common::reopen_once_if_changed(|| tags::run(a.clone())),
        Command::Show(a) => common::reopen_once_if_changed(|| show::run(a.clone())),
        Command::Cat(a) => common::reopen_once_if_changed(|| cat::run(a.clone())),
        Command::Pack(a) => pack::run(a),
        Command::Rm(a) => rm::run(a),
        Command::Prune(a) => prune::run(a),
        Command::Compact(a) => compact::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Extract(a) => extract::run(a),
        Command::Tensor(a) => tensor::run(a),
        Command::Graph(a) => common::reopen_once_if_changed(|| graph::run(a.clone())),
        Command::Convert(a) => convert::run(a),
        Command::Import(a) => import::run(a),
        Command::Export(a) => export::run(a),
        Command::ImportPaddle(a) => import_paddle::run(a),
        Command::ExportPaddle(a) => export_paddle::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::Cast(a) => cast::run(a),
        Command::Diff(a) => common::reopen_once_if_changed(|| diff::run(a.clone())),
        Command::Cp(a) => cp::run(a),
        Command::View(a) => view::run(a),
    };
    #[cfg(feature = "test-internals")]
    report_work();
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Negative) => ExitCode::from(1),
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(CliError::Failed(msg)) => {
            error_to_stderr(&output::error_line(&with_cli_hints(&msg)));
            ExitCode::from(2)
        }
    }
}

/// With `MODELZIP_TEST_WORK` set (test builds only): one stderr line with the work the
/// archives it read did (entries inflated, hashed, graphs decoded), for the tests
/// that check a command's work follows the archive's distinct entries.
#[cfg(feature = "test-internals")]
fn report_work() {
    if std::env::var_os("MODELZIP_TEST_WORK").is_none() {
        return;
    }
    {
        let w = modelzip::internals::dropped_work_counts();
        eprintln!(
            "modelzip-test-work inflated={} head_inflated={} heads_decoded={} hashed={} graphs_decoded={} graph_checks={}",
            w.inflated,
            w.head_inflated,
            w.heads_decoded,
            w.hashed,
            w.graphs_decoded,
            w.graph_checks
        );
    }
}

/// The library's "archive is locked" says to "wait for it"; on the command line that
/// is `--wait`, which every writing command takes.
fn with_cli_hints(msg: &str) -> String {
    let locked = modelzip::ErrorKind::Locked.to_string();
    match locked.strip_suffix("retry later or wait for it") {
        Some(head) if msg.contains(&locked) => msg.replace(
            &locked,
            &format!("{head}retry later, or pass --wait to wait for it"),
        ),
        _ => msg.to_string(),
    }
}

/// Writes `modelzip: LINE` to stderr. A stderr that cannot be written (closed, a full
/// disk) loses the line but not the exit code: `eprintln!` panicked there (exit 101).
fn error_to_stderr(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "modelzip: {line}");
}

/// A usage error as one line: clap's message and its indented details (e.g. the possible
/// values), without the usage block, then where to look for help.
fn usage_line(rendered: &str, command: Option<&str>) -> String {
    let mut parts = Vec::new();
    for line in rendered.lines() {
        if line.is_empty() {
            break;
        }
        parts.push(line.trim());
    }
    let msg = parts.join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    match command {
        Some(c) => format!("usage: {msg} (see 'modelzip {c} --help')"),
        None => format!("usage: {msg} (see 'modelzip --help')"),
    }
}
