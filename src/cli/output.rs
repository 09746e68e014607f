//! Output helpers shared by the commands: stdout writing, JSON, human sizes.

use super::CliError;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once anything is written to stdout: a command that failed after that cannot be
/// run again without printing twice.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Stdout, noting that output has started.
pub fn stdout() -> std::io::StdoutLock<'static> {
    STARTED.store(true, Ordering::SeqCst);
    std::io::stdout().lock()
}

/// True once anything was written to stdout.
pub fn started() -> bool {
    STARTED.load(Ordering::SeqCst)
}

/// Writes `text` to stdout; a closed pipe becomes [`CliError::BrokenPipe`].
pub fn print(text: &str) -> Result<(), CliError> {
    let mut out = stdout();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(io_error)
}

/// Writes raw bytes to stdout.
pub fn print_bytes(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = stdout();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(io_error)
}

/// Prints one JSON document followed by a newline, written as it is serialized (a
/// document streamed from the data, like `cat --json`'s values, is never held whole).
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout());
    serde_json::to_writer_pretty(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
        .and_then(|()| out.flush())
        .map_err(io_error)
}

/// A stdout write error; a closed pipe is [`CliError::BrokenPipe`], which ends quietly.
pub fn io_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::BrokenPipe
    } else {
        CliError::Failed(format!("cannot write to stdout: {e}"))
    }
}

/// A byte count for people: `812 B`, `1.5 KiB`, `3.2 GiB`; exact when `exact`.
pub fn human_bytes(n: u64, exact: bool) -> String {
    if exact || n < 1024 {
        return format!("{n} B");
    }
    let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

/// A name from an archive made safe for human output (JSON output escapes on its own).
pub use modelzip::graph::dump::clean;

/// An error line for stderr: one line (line breaks become spaces, as library messages
/// may wrap), every other control or invisible format character escaped as by [`clean`].
pub fn error_line(msg: &str) -> String {
    clean(&msg.replace(['\n', '\r'], " ")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_escapes_controls_and_invisible_format_characters_only() {
        assert_eq!(clean("fc_0.w_0"), "fc_0.w_0");
        assert_eq!(clean("naïve 名前 a\\b"), "naïve 名前 a\\b");
        assert_eq!(
            clean("evil\u{1b}[31mRED\u{1b}[0m\nfake_row\t\r\0\u{7f}\u{9b}"),
            "evil\\u{1b}[31mRED\\u{1b}[0m\\nfake_row\\t\\r\\0\\u{7f}\\u{9b}"
        );
        assert_eq!(
            clean("a\u{202e}b\u{200b}c\u{2028}"),
            "a\\u{202e}b\\u{200b}c\\u{2028}"
        );
        assert_eq!(error_line("x\ny\u{1b}"), "x y\\u{1b}");
    }
}
