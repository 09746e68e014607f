//! The `modelzip` command-line tool.

fn main() -> std::process::ExitCode {
    modelzip_cli::run()
}

#[path = "cli/mod.rs"]
mod modelzip_cli;
