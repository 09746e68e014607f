//! Progress bars on stderr: only on a terminal, never with `--json` or `-q`.

use indicatif::{ProgressBar, ProgressStyle};
use modelzip::progress::ProgressHook;
use std::io::IsTerminal;

/// A progress bar that is hidden unless stderr is a terminal and the user wants it.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar labelled `what`; hidden when `quiet` or stderr is not a TTY.
    pub fn new(quiet: bool, what: &str) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_message(what.to_string());
        Progress(Some(bar))
    }

    /// Sets the total.
    pub fn set_length(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.set_length(n);
        }
    }

    /// Advances by `n`.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }

    /// A library progress hook driving the bar (`None` when the bar is hidden).
    pub fn hook(&self) -> Option<ProgressHook> {
        let bar = self.0.clone()?;
        Some(ProgressHook::new(move |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        }))
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// Clears the bar also when the command fails, so the error line stands alone.
    fn drop(&mut self) {
        self.finish();
    }
}
