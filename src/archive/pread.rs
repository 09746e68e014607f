//! Reading a large range of a file into fresh memory on several threads.
//!
//! Reading a tensor into a new allocation is bound by the kernel faulting in (and
//! zeroing) the allocation's pages, one 4 KiB page at a time, not by the copy out of the
//! page cache. Pages of one allocation fault in independently, so the range is split into
//! page-aligned pieces read by `pread` on scoped threads, one per core (at most
//! [`MAX_THREADS`]), the calling thread reading the first piece.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Below this, one `pread` on the calling thread (starting a thread costs more).
const SPLIT_MIN: usize = 2 << 20;
/// Threads at most (including the calling one).
const MAX_THREADS: usize = 4;
const PAGE: usize = 4096;

/// Fills `buf` from `file` at `offset`, like [`FileExt::read_exact_at`]. On error,
/// returns the file offset of the piece that failed with the error.
pub(crate) fn read_exact_at_split(
    file: &File,
    buf: &mut [u8],
    offset: u64,
) -> Result<(), (io::Error, u64)> {
    let n = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS)
        .min(buf.len() / (SPLIT_MIN / 2).max(1))
        .max(1);
    if n == 1 || buf.len() < SPLIT_MIN {
        return file.read_exact_at(buf, offset).map_err(|e| (e, offset));
    }
    // Pieces of whole pages (of the buffer), the last one taking the rest.
    let piece = buf.len().div_ceil(n).div_ceil(PAGE) * PAGE;
    let mut no_thread = false;
    let result = std::thread::scope(|scope| {
        let mut pieces = buf.chunks_mut(piece).enumerate();
        let first = pieces.next();
        let handles: Vec<_> = pieces
            .map(|(i, chunk)| {
                let at = offset + (i * piece) as u64;
                let h = std::thread::Builder::new()
                    .spawn_scoped(scope, move || file.read_exact_at(chunk, at));
                (h, at)
            })
            .collect();
        let mut result = match first {
            Some((_, chunk)) => file.read_exact_at(chunk, offset).map_err(|e| (e, offset)),
            None => Ok(()),
        };
        for (h, at) in handles {
            let r = match h {
                Err(_) => {
                    no_thread = true;
                    Ok(())
                }
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
                    .map_err(|e| (e, at)),
            };
            if result.is_ok() {
                result = r;
            }
        }
        result
    });
    if no_thread && result.is_ok() {
        // A thread could not be started (resources): the whole range again, here.
        return file.read_exact_at(buf, offset).map_err(|e| (e, offset));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn split_reads_match_one_read_and_report_the_failing_piece() {
        let data: Vec<u8> = (0..(5 << 20) + 1234u32)
            .map(|i| (i * 7 + i / 4099) as u8)
            .collect();
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(&data).expect("write");
        for (off, len) in [
            (0usize, data.len()),
            (17, (3 << 20) + 5),
            (4096, 100),
            (1, 0),
        ] {
            let mut buf = vec![0u8; len];
            read_exact_at_split(&f, &mut buf, off as u64).expect("read");
            assert_eq!(buf, &data[off..off + len], "offset {off}, length {len}");
        }
        // Past the end: the error names a piece whose range is not all in the file.
        let mut buf = vec![0u8; 4 << 20];
        let (e, at) = read_exact_at_split(&f, &mut buf, (3 << 20) as u64).expect_err("short");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(
            at >= 3 << 20 && at < data.len() as u64,
            "failing piece at {at}"
        );
    }
}
