//! Byte-range sources under the archive reader: an archive whose bytes are fetched by
//! range (a remote object) rather than mapped whole. The same container code checks both
//! (end records, central directory, local headers, CRC-32); a ranged archive checks an
//! entry's local header when the entry is read, since that needs the bytes fetched anyway.

use super::container::read::END_RECORDS_MAX;
use super::container::{self, At, Directory, METHOD_STORED, ZipEntry};
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

/// Where the bytes of an archive come from, by range. Every read after the first is of
/// the same version of the object (the source refuses to mix versions).
pub(crate) trait RangeSource: Send + Sync {
    /// Length of the object in bytes.
    fn len(&self) -> u64;
    /// The version (ETag) of the object read, if the store reports one.
    fn version(&self) -> Option<&str>;
    /// Fetches each range (adjacent ones merged, in parallel where the source can), in
    /// order. Ranges lie inside `0..len()`.
    fn read_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u8>>>;
}

/// Limits of a ranged open.
#[derive(Debug, Clone)]
pub(crate) struct RangedLimits {
    /// Largest central directory read (a hostile end record could name gigabytes).
    pub max_directory_size: u64,
    /// Bytes before the central directory fetched with it (tags.txt is written just
    /// before the directory, so one request usually brings both).
    pub directory_slack: u64,
}

/// A ranged archive's bytes: windows fetched at open (the tail, the central directory),
/// entries fetched in batches ahead of use, and the source for everything else.
pub(crate) struct Ranged {
    source: Box<dyn RangeSource>,
    /// (start, bytes) of the windows read at open.
    windows: Vec<(u64, Vec<u8>)>,
    /// Entries fetched ahead (by header offset): their local headers and data.
    prefetched: Mutex<HashMap<u64, Vec<u8>>>,
    /// Sorted header offsets of all entries, then the central directory's offset: an
    /// entry's bytes end before the next start.
    starts: Vec<u64>,
    /// Where the data of entries whose local header has been checked starts (by header
    /// offset): a slice read fetches only its bytes after that.
    data_starts: Mutex<HashMap<u64, u64>>,
}

impl std::fmt::Debug for Ranged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranged")
            .field("len", &self.source.len())
            .field("version", &self.source.version())
            .finish()
    }
}

impl Ranged {
    /// Parses the end records from `tail` (the last bytes of the object, as the first
    /// request returned them) and the central directory (from `tail` when it holds it,
    /// else with one more request).
    pub(crate) fn open(
        source: Box<dyn RangeSource>,
        tail: Vec<u8>,
        limits: &RangedLimits,
    ) -> Result<(Ranged, Directory)> {
        let len = source.len();
        let tail_start = len.saturating_sub(tail.len() as u64);
        if (tail.len() as u64) < len.min(END_RECORDS_MAX) {
            return Err(Error::new(ErrorKind::InvalidInput(format!(
                "the first read of the object returned {} bytes; at least {} are needed",
                tail.len(),
                len.min(END_RECORDS_MAX)
            ))));
        }
        let fetch_one = |offset: u64, n: u64| -> Result<Vec<u8>> {
            let mut v = source.read_ranges(std::slice::from_ref(&(offset..offset + n)))?;
            Ok(v.pop().unwrap_or_default())
        };
        let end = {
            let at = At::window(&tail, tail_start, len);
            container::read::parse_end(&at, &mut |o, n| fetch_one(o, n))?
        };
        if end.cd_size > limits.max_directory_size {
            return Err(Error::new(ErrorKind::LimitExceeded {
                what: "central directory size",
                size: end.cd_size,
                limit: limits.max_directory_size,
            })
            .at_offset(end.cd_offset));
        }
        let mut windows = vec![(tail_start, tail)];
        let (entries, index, dirs) = if end.cd_offset >= tail_start {
            let (start, bytes) = &windows[0];
            let from = (end.cd_offset - start) as usize;
            let cd = bytes
                .get(from..from + end.cd_size as usize)
                .unwrap_or_default();
            container::read::parse_entries(cd, &end)?
        } else {
            // parse_end checked cd_offset + cd_size is the end record's offset (< len).
            let from = end.cd_offset.saturating_sub(limits.directory_slack);
            let to = end.cd_offset + end.cd_size;
            let bytes = fetch_one(from, to - from)?;
            let parsed = {
                let skip = (end.cd_offset - from) as usize;
                let cd = bytes.get(skip..).unwrap_or_default();
                container::read::parse_entries(cd, &end)?
            };
            windows.push((from, bytes));
            parsed
        };
        let dir = container::read::directory_unchecked(entries, index, dirs, end)?;
        let mut starts: Vec<u64> = dir.entries.iter().map(|e| e.header_offset).collect();
        starts.push(dir.cd_offset);
        starts.sort_unstable();
        Ok((
            Ranged {
                source,
                windows,
                prefetched: Mutex::new(HashMap::new()),
                starts,
                data_starts: Mutex::new(HashMap::new()),
            },
            dir,
        ))
    }

    /// Length of the object.
    pub(crate) fn len(&self) -> u64 {
        self.source.len()
    }

    /// The version read (ETag), if known.
    pub(crate) fn version(&self) -> Option<&str> {
        self.source.version()
    }

    /// The bytes an entry occupies from its local header on: up to the next entry's
    /// header (or the central directory), and at most the header with the longest extra
    /// field plus the data.
    fn span(&self, e: &ZipEntry) -> Range<u64> {
        let next = match self.starts.binary_search(&(e.header_offset + 1)) {
            Ok(i) | Err(i) => self.starts.get(i).copied().unwrap_or(self.len()),
        };
        let most = e
            .header_offset
            .saturating_add(30 + e.name.len() as u64 + 0xffff)
            .saturating_add(e.compressed_size);
        e.header_offset..next.min(most).max(e.header_offset)
    }

    /// The already-read bytes of `span`, if any window holds them.
    fn cached(&self, span: &Range<u64>) -> Option<Vec<u8>> {
        for (start, bytes) in &self.windows {
            let end = start + bytes.len() as u64;
            if span.start >= *start && span.end <= end {
                let from = (span.start - start) as usize;
                let to = (span.end - start) as usize;
                return bytes.get(from..to).map(<[u8]>::to_vec);
            }
        }
        let mut pre = self.prefetched.lock().unwrap_or_else(|p| p.into_inner());
        pre.remove(&span.start)
    }

    /// Fetches `entries` (those not already read) in one batched request, for reads that
    /// follow (a tag's tables).
    pub(crate) fn prefetch(&self, entries: &[&ZipEntry]) -> Result<()> {
        let spans: Vec<Range<u64>> = entries
            .iter()
            .map(|e| self.span(e))
            .filter(|s| {
                !self
                    .windows
                    .iter()
                    .any(|(st, b)| s.start >= *st && s.end <= st + b.len() as u64)
            })
            .collect();
        if spans.is_empty() {
            return Ok(());
        }
        let got = self.source.read_ranges(&spans)?;
        let mut pre = self.prefetched.lock().unwrap_or_else(|p| p.into_inner());
        for (s, b) in spans.iter().zip(got) {
            pre.insert(s.start, b);
        }
        Ok(())
    }

    /// The first bytes of each entry: its local header and up to `probe` bytes of data
    /// (fewer when the entry is smaller), fetched in one batched request.
    pub(crate) fn probe(&self, entries: &[&ZipEntry], probe: u64) -> Result<Vec<Vec<u8>>> {
        let spans: Vec<Range<u64>> = entries
            .iter()
            .map(|e| {
                let span = self.span(e);
                let end = span.end.min(
                    e.header_offset
                        .saturating_add(30 + e.name.len() as u64 + probe),
                );
                span.start..end
            })
            .collect();
        let mut out: Vec<Option<Vec<u8>>> = spans.iter().map(|s| self.window_bytes(s)).collect();
        let missing: Vec<Range<u64>> = spans
            .iter()
            .zip(&out)
            .filter(|(_, o)| o.is_none())
            .map(|(s, _)| s.clone())
            .collect();
        let mut got = if missing.is_empty() {
            Vec::new()
        } else {
            self.source.read_ranges(&missing)?
        }
        .into_iter();
        for o in &mut out {
            if o.is_none() {
                *o = got.next();
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// The bytes of `span` from a window read at open, if one holds them.
    fn window_bytes(&self, span: &Range<u64>) -> Option<Vec<u8>> {
        self.windows.iter().find_map(|(start, bytes)| {
            let end = start + bytes.len() as u64;
            (span.start >= *start && span.end <= end).then(|| {
                bytes
                    .get((span.start - start) as usize..(span.end - start) as usize)
                    .unwrap_or_default()
                    .to_vec()
            })
        })
    }

    /// Notes that entry `e`'s data starts at `at` (its local header checked there).
    pub(crate) fn note_data_start(&self, e: &ZipEntry, at: u64) {
        let mut starts = self.data_starts.lock().unwrap_or_else(|p| p.into_inner());
        starts.insert(e.header_offset, at);
    }

    /// Where entry `e`'s data starts, its local header checked against the directory:
    /// known when its header was probed before (a tensor header read), else read now
    /// (one request of the local header and the first bytes).
    pub(crate) fn data_start(&self, e: &ZipEntry, cd_offset: u64) -> Result<u64> {
        if let Some(&at) = self
            .data_starts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&e.header_offset)
        {
            return Ok(at);
        }
        // The local header's extra field is at most 64 KiB; modelzip's are a few bytes,
        // so a short probe settles it and a longer one is read only if it did not.
        let mut last = None;
        for probe in [64, 0x10000] {
            let window = self.probe(&[e], probe)?.pop().unwrap_or_default();
            match container::read::check_local_prefix(&window, self.len(), e, cd_offset) {
                Ok(data) => {
                    let at = e.header_offset
                        + (data.as_ptr() as usize - window.as_ptr() as usize) as u64;
                    self.note_data_start(e, at);
                    return Ok(at);
                }
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| Error::new(ErrorKind::Zip("no local header".into()))))
    }

    /// The bytes of `ranges` (inside the object), in one batched read: near ranges are
    /// merged into one request by the source.
    pub(crate) fn read(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u8>>> {
        self.source.read_ranges(ranges)
    }

    /// Entry `e`'s stored bytes, in one request (local header and data together): the
    /// local header checked against the directory as for a local file, and for a stored
    /// entry its CRC-32 (a deflated one is checked as it is inflated).
    pub(crate) fn entry_data(&self, e: &ZipEntry, cd_offset: u64) -> Result<Vec<u8>> {
        let span = self.span(e);
        let window = match self.cached(&span) {
            Some(w) => w,
            None => {
                let mut v = self.source.read_ranges(std::slice::from_ref(&span))?;
                v.pop().unwrap_or_default()
            }
        };
        let mut window = window;
        let data = container::read::check_local_in(&window, self.len(), e, cd_offset)?;
        // Where the data sits in the window: moved to the front below, not copied anew.
        let (from, n) = (
            data.as_ptr() as usize - window.as_ptr() as usize,
            data.len(),
        );
        if e.method == METHOD_STORED {
            let crc = crc32fast::hash(data);
            if crc != e.crc32 {
                return Err(Error::new(ErrorKind::Checksum(format!(
                    "CRC-32 is {crc:08x}, the directory says {:08x}",
                    e.crc32
                )))
                .at_offset(e.header_offset));
            }
        }
        window.truncate(from + n);
        window.drain(..from);
        Ok(window)
    }
}

/// A local file read by `pread` (no map): a read of bytes a concurrent truncation took
/// away fails with an error rather than faulting (SIGBUS), so a file another process
/// may roll back under it can be read safely (a sharded save's ranks read the archive
/// while rank 0 may be undoing its staging).
pub(crate) struct FileSource {
    file: std::fs::File,
    len: u64,
}

impl FileSource {
    /// Opens `path` and reads its last bytes (what [`Ranged::open`] needs first).
    pub(crate) fn open(path: &std::path::Path) -> Result<(FileSource, Vec<u8>)> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let src = FileSource { file, len };
        let n = len.min(END_RECORDS_MAX);
        let tail = src.read_ranges(std::slice::from_ref(&(len - n..len)))?;
        Ok((src, tail.into_iter().next().unwrap_or_default()))
    }
}

impl RangeSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn version(&self) -> Option<&str> {
        None
    }

    fn read_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u8>>> {
        ranges
            .iter()
            .map(|r| {
                // The ranges lie inside 0..len (the caller's contract), which bounds them.
                let n = usize::try_from(r.end.saturating_sub(r.start)).map_err(|_| {
                    Error::new(ErrorKind::InvalidInput(format!(
                        "range {r:?} too large to read"
                    )))
                })?;
                let mut buf = vec![0u8; n];
                super::pread::read_exact_at_split(&self.file, &mut buf, r.start)
                    .map_err(|(e, _)| Error::from(e))?;
                Ok(buf)
            })
            .collect()
    }
}
