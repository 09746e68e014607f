//! Argument parsing, dispatch, exit codes and error rendering for the `modelzip` binary.
//!
//! Every command lives in its own module, returns a report, and renders it as a
//! table or as one JSON document. Exit codes: 0 success, 1 a negative answer
//! (e.g. `verify` found problems), 2 an error (bad input, I/O, usage).

mod output;
mod tensor;

use clap::{Parser, Subcommand};
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
    Tensor(tensor::Args),
}

/// What a command ended with, short of an error.
pub enum Outcome {
    /// Everything is fine: exit 0.
    Success,
    #[allow(dead_code)]
    /// A negative answer (problems found, differences found): exit 1.
    Negative,
}

/// A failed command: one line for stderr, exit code 2.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// Parses arguments, runs the command, prints the error if any, and returns the exit code.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Tensor(a) => tensor::run(a),
    };
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Negative) => ExitCode::from(1),
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(CliError(msg)) => {
            eprintln!("modelzip: {}", msg.replace('\n', " "));
            ExitCode::from(2)
        }
    }
}
