//! Early writeback for writes that end in an fsync.

use super::fault::Budgeted;
use std::fs::File;
use std::io::Write;

/// Bytes written between two writeback requests.
const EARLY_WRITEBACK: u64 = 8 << 20;

/// A writer on a file that will be fsynced when it is complete: every [`EARLY_WRITEBACK`]
/// bytes it asks the kernel to start writing what came before to the disk
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux, which does not wait for it), so that
/// the disk works while the writer goes on (and the hash workers finish) instead of all of
/// it waiting for the final fsync. The fsync is still what makes the file durable: this is
/// only a head start, and a failed request is ignored. Elsewhere, and when `on` is false,
/// it only writes. Writes go through [`Budgeted`] (fault injection in tests).
///
/// Measured (docs/BENCHMARKS-history.md P3): saving L (1 GiB) with fsync, medians of 5 in three
/// alternating pairs of processes: 893 / 1,302 / 1,076 ms without, 716 / 951 / 865 ms with
/// (fastest repetition 743 → 490 ms).
pub(crate) struct EarlyWriteback {
    inner: Budgeted<File>,
    on: bool,
    /// File offset of the first byte not yet handed to writeback.
    from: u64,
    /// File offset of the next byte written.
    pos: u64,
}

impl EarlyWriteback {
    /// Writes `file` from offset `start` (where it is positioned).
    pub(crate) fn new(file: File, start: u64, on: bool) -> EarlyWriteback {
        EarlyWriteback {
            inner: Budgeted(file),
            on: on && cfg!(target_os = "linux"),
            from: start,
            pos: start,
        }
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self) {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(len)) = (
            i64::try_from(self.from),
            i64::try_from(self.pos - self.from),
        ) else {
            return;
        };
        // Safety: the descriptor belongs to the `File` this value owns and stays open
        // for the call; sync_file_range reads and writes no memory of this process.
        // Its result is ignored: a request that fails only loses the head start.
        unsafe {
            libc::sync_file_range(
                self.inner.0.as_raw_fd(),
                off,
                len,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        self.from = self.pos;
    }

    #[cfg(not(target_os = "linux"))]
    fn start_writeback(&mut self) {}
}

impl Write for EarlyWriteback {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.pos += n as u64;
        if self.on && self.pos - self.from >= EARLY_WRITEBACK {
            self.start_writeback();
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_byte_and_hands_each_8_mib_to_writeback() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(20u32 << 20)).map(|i| (i % 251) as u8).collect();
        let mut w = EarlyWriteback::new(File::create(&path).unwrap(), 0, true);
        let mut handed = vec![];
        for chunk in data.chunks(3 << 20) {
            w.write_all(chunk).unwrap();
            handed.push(w.from);
        }
        w.flush().unwrap();
        assert_eq!(w.pos, data.len() as u64);
        if cfg!(target_os = "linux") {
            // After 9 MiB the first 9 MiB were handed over, after 18 MiB all 18.
            assert_eq!(
                handed,
                [0, 0, 9 << 20, 9 << 20, 9 << 20, 18 << 20, 18 << 20]
            );
        }
        drop(w);
        assert_eq!(std::fs::read(&path).unwrap(), data);

        let mut off = EarlyWriteback::new(File::create(&path).unwrap(), 0, false);
        off.write_all(&data).unwrap();
        assert_eq!(off.from, 0, "off: nothing handed over");
    }
}
