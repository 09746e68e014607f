//! Reading a large range of a file into fresh memory on several threads.
//!
//! Reading a tensor into a new allocation is bound by the kernel faulting in (and
//! zeroing) the allocation's pages, one 4 KiB page at a time, not by the copy out of the
//! page cache. Pages of one allocation fault in independently, so the range is cut into
//! page-aligned pieces that the calling thread and helper threads (one per other core, at
//! most [`MAX_THREADS`] in all) take one at a time and read with `pread`. The calling
//! thread never waits for a helper that has not been scheduled: it goes on taking pieces,
//! so on a busy machine the read costs at most about what one thread's read costs.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Below this, one `pread` on the calling thread (starting a thread costs more).
const SPLIT_MIN: usize = 2 << 20;
/// Threads at most (including the calling one).
const MAX_THREADS: usize = 4;
/// Bytes a thread takes at a time (whole pages).
const PIECE: usize = 256 << 10;

/// Fills `buf` from `file` at `offset`, like [`FileExt::read_exact_at`]. On error,
/// returns the file offset of the piece that failed with the error.
pub(crate) fn read_exact_at_split(
    file: &File,
    buf: &mut [u8],
    offset: u64,
) -> Result<(), (io::Error, u64)> {
    let n = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    if n == 1 || buf.len() < SPLIT_MIN {
        return file.read_exact_at(buf, offset).map_err(|e| (e, offset));
    }
    let pieces = Mutex::new(buf.chunks_mut(PIECE).enumerate());
    let failed: Mutex<Option<(io::Error, u64)>> = Mutex::new(None);
    let work = || {
        loop {
            // A helper never panics while holding either lock, so poison is ignored.
            let next = pieces.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((i, chunk)) = next else { return };
            let at = offset + (i * PIECE) as u64;
            if let Err(e) = file.read_exact_at(chunk, at) {
                let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
                if f.as_ref().is_none_or(|(_, first)| at < *first) {
                    *f = Some((e, at));
                }
                return;
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..n {
            // A helper that cannot be started leaves its share to the others.
            let _ = std::thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(err) => Err(err),
        None => Ok(()),
    }
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
