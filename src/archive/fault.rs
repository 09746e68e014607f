//! Test hook: make this thread's archive writes fail after a byte budget, as a full disk
//! would, so crash safety can be tested at every write offset. The setter and the counter
//! are public (as `modelzip::fault`) only with the `fault-injection` feature, which the
//! crate's own tests enable; without it no budget is ever set and writes pass through.

use std::cell::Cell;
use std::io::{self, Seek, SeekFrom, Write};

thread_local! {
    static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
    static WRITTEN: Cell<u64> = const { Cell::new(0) };
}

/// Sets how many more bytes this thread may write to archive, temp and journal files
/// before writes fail with `StorageFull` (`None`: no limit). Resets the byte counter.
#[cfg(feature = "fault-injection")]
pub fn set_write_budget(budget: Option<u64>) {
    BUDGET.with(|b| b.set(budget));
    WRITTEN.with(|w| w.set(0));
}

/// Bytes this thread has written to archive, temp and journal files since the last
/// [`set_write_budget`].
#[cfg(feature = "fault-injection")]
pub fn bytes_written() -> u64 {
    WRITTEN.with(|w| w.get())
}

/// Charges up to `n` bytes against this thread's budget and returns how many it allows
/// (all of them without a budget): for writes that do not go through a [`Budgeted`]
/// writer (positioned writes, copies into a map).
pub(crate) fn take(n: usize) -> usize {
    let allowed = match BUDGET.with(|b| b.get()) {
        None => n,
        Some(left) => n.min(usize::try_from(left).unwrap_or(usize::MAX)),
    };
    BUDGET.with(|b| {
        if let Some(left) = b.get() {
            b.set(Some(left - allowed as u64));
        }
    });
    WRITTEN.with(|w| w.set(w.get() + allowed as u64));
    allowed
}

/// The error of a write the budget cut short.
pub(crate) fn full() -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        "no space left on device (injected)",
    )
}

/// A writer that charges every byte against this thread's budget.
pub(crate) struct Budgeted<W>(pub W);

impl<W: Write> Write for Budgeted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let allowed = match BUDGET.with(|b| b.get()) {
            None => buf.len(),
            Some(left) => {
                if left == 0 && !buf.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::StorageFull,
                        "no space left on device (injected)",
                    ));
                }
                buf.len().min(usize::try_from(left).unwrap_or(usize::MAX))
            }
        };
        let n = self.0.write(&buf[..allowed])?;
        BUDGET.with(|b| {
            if let Some(left) = b.get() {
                b.set(Some(left - n as u64));
            }
        });
        WRITTEN.with(|w| w.set(w.get() + n as u64));
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Seek> Seek for Budgeted<W> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.0.seek(pos)
    }
}
