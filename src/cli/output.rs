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

/// How a table column lines up its cells.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Align {
    Left,
    Right,
}

/// A table for people whose columns fit their widest cell (the header's included), as
/// `ls -l` and `docker ps` do: a name longer than usual widens its column instead of
/// pushing the rest of its row out of line. Widths are terminal columns (a CJK character
/// takes two). Fed every row twice, once to [`Table::fit`] and once to
/// [`Table::write_row`], so a table of many rows is not held in memory.
pub struct Table {
    align: Vec<Align>,
    widths: Vec<usize>,
}

/// The terminal columns `s` takes.
pub fn display_width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

impl Table {
    /// A table with these columns; the header row counts toward the widths.
    pub fn new(align: &[Align]) -> Table {
        Table {
            align: align.to_vec(),
            widths: vec![0; align.len()],
        }
    }

    /// Widens the columns to fit the cells of one row.
    pub fn fit<S: AsRef<str>>(&mut self, cells: &[S]) {
        for (w, c) in self.widths.iter_mut().zip(cells) {
            *w = (*w).max(display_width(c.as_ref()));
        }
    }

    /// Writes one row, its cells one space apart, after `prefix`; the last column is not
    /// padded (no trailing spaces).
    pub fn write_row<S: AsRef<str>>(
        &self,
        out: &mut impl Write,
        prefix: &str,
        cells: &[S],
    ) -> std::io::Result<()> {
        out.write_all(prefix.as_bytes())?;
        let last = cells.len().saturating_sub(1);
        for (i, c) in cells.iter().enumerate() {
            let c = c.as_ref();
            let pad = " ".repeat(
                self.widths
                    .get(i)
                    .map_or(0, |w| w.saturating_sub(display_width(c))),
            );
            if i > 0 {
                out.write_all(b" ")?;
            }
            match self.align.get(i) {
                Some(Align::Right) => write!(out, "{pad}{c}")?,
                _ if i == last => out.write_all(c.as_bytes())?,
                _ => write!(out, "{c}{pad}")?,
            }
        }
        writeln!(out)
    }
}

/// A name from an archive made safe for human output (JSON output escapes on its own).
pub use modelzip::dump::clean;

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

    #[test]
    fn table_columns_fit_their_widest_cell() {
        let mut t = Table::new(&[Align::Left, Align::Right, Align::Left]);
        let rows = [
            ["name", "n", "last"],
            ["a", "12345", "x"],
            ["名前が長い", "1", "y"],
        ];
        for r in &rows {
            t.fit(r);
        }
        let mut out = Vec::new();
        for r in &rows {
            t.write_row(&mut out, "> ", r).unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "> name           n last\n> a          12345 x\n> 名前が長い     1 y\n"
        );
    }
}
