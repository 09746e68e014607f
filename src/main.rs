//! The `modelzip` command-line tool.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    modelzip_cli::run()
}

#[path = "cli/mod.rs"]
mod modelzip_cli;
