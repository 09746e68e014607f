//! The table file TensorFlow writes as a checkpoint's `variables.index`: LevelDB's SSTable
//! format (tensorflow/core/lib/io/table_builder.cc, format.cc, block.cc), read and written.
//!
//! A table is data blocks, a metaindex block, an index block and a 48-byte footer. A block
//! is entries (`varint shared`, `varint non_shared`, `varint value_len`, the key's last
//! `non_shared` bytes, the value: each key shares its first `shared` bytes with the one
//! before), then the restart points (u32 offsets of entries with `shared == 0`) and their
//! count (u32); after it, a 5-byte trailer: the compression type (0: none) and the masked
//! CRC-32C of the block and that byte. The index block maps a key at or past each data
//! block's last key to the block's handle (`varint offset`, `varint size`); the footer holds
//! the metaindex and index handles, zero padding to 40 bytes, then the magic number.
//!
//! Hand-written, because no crate fits: the `sstable` crate (0.11.1, from rusty-leveldb,
//! the only maintained standalone reader/writer of this format) skips a block whose
//! checksum fails or that cannot be read while iterating (`TableIterator::advance`: `Err(_)
//! => self.advance()`), where this import must refuse corruption; it allocates each block
//! by the size its handle says before reading (`table_block::read_bytes`: `vec![0;
//! location.size()]`) and unwraps varints inside blocks (`block.rs`), so a hostile index
//! can make it allocate any amount or panic; and it brings snappy and a second CRC crate.
//! The whole-database crates (rusty-leveldb, leveldb bindings) bring a database. What is
//! needed here is ~200 lines: one uncompressed table read whole and written whole.

use crate::error::{Error, ErrorKind, Result};

/// The table magic number, the footer's last 8 bytes (little-endian).
pub const MAGIC: u64 = 0xdb47_7524_8b80_fb57;

/// Size of the footer.
pub const FOOTER_LEN: usize = 48;

/// Longest key accepted (TensorFlow's are tensor names).
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// Most entries a table may hold, index entries included (a checkpoint has one per
/// variable: thousands for the largest models). An entry takes 4 bytes on disk and far
/// more once read.
pub const MAX_ENTRIES: usize = 1_000_000;

/// What the entries read so far may still take: rebuilt key bytes and entries.
struct Budget {
    key_bytes: usize,
    entries: usize,
}

/// Entries between restart points in the blocks written (LevelDB's default).
const RESTART_INTERVAL: usize = 16;

fn fail(msg: impl Into<String>, offset: u64) -> Error {
    Error::new(ErrorKind::InvalidInput(format!(
        "checkpoint index table: {}",
        msg.into()
    )))
    .at_offset(offset)
}

/// The masked form of a CRC-32C that LevelDB and TensorFlow store.
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Reads a varint (at most 10 bytes) at `*pos`, advancing it.
fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[derive(Debug, Clone, Copy)]
struct Handle {
    offset: u64,
    size: u64,
}

fn handle(b: &[u8], pos: &mut usize, base: u64, what: &str) -> Result<Handle> {
    let at = base + *pos as u64;
    let offset = varint(b, pos).ok_or_else(|| fail(format!("{what}: bad block handle"), at))?;
    let size = varint(b, pos).ok_or_else(|| fail(format!("{what}: bad block handle"), at))?;
    Ok(Handle { offset, size })
}

/// The contents of the block `h` points at in `table` (whose blocks end at `end`), its
/// trailer checked: uncompressed, and the checksum matching.
fn block<'t>(table: &'t [u8], end: usize, h: Handle, what: &str) -> Result<&'t [u8]> {
    let fits = h
        .offset
        .checked_add(h.size)
        .and_then(|e| e.checked_add(5))
        .is_some_and(|e| e <= end as u64);
    if !fits {
        return Err(fail(
            format!(
                "{what} at offset {} of {} bytes (and its 5-byte trailer) ends past the table's blocks ({end} bytes)",
                h.offset, h.size
            ),
            h.offset,
        ));
    }
    let (start, len) = (h.offset as usize, h.size as usize);
    let contents = &table[start..start + len];
    let kind = table[start + len];
    let stored = u32::from_le_bytes(
        table[start + len + 1..start + len + 5]
            .try_into()
            .unwrap_or([0; 4]),
    );
    let crc = crc32c::crc32c_append(crc32c::crc32c(contents), &[kind]);
    if mask(crc) != stored {
        return Err(Error::new(ErrorKind::Checksum(format!(
            "checkpoint index table: {what} at offset {start}: stored masked CRC-32C {stored:#010x}, the block's is {:#010x}",
            mask(crc)
        )))
        .at_offset(h.offset));
    }
    if kind != 0 {
        let name = match kind {
            1 => " (snappy)",
            2 => " (zlib)",
            _ => "",
        };
        return Err(fail(
            format!(
                "{what} at offset {start} is compressed, type {kind}{name}; TensorFlow writes checkpoint indexes uncompressed and only those are read"
            ),
            (start + len) as u64,
        ));
    }
    Ok(contents)
}

/// The entries of a block at table offset `base`, keys rebuilt; `budget` is what the
/// rebuilt keys and the entries may still take in all (bounds memory: a shared prefix
/// costs nothing on disk, an entry 4 bytes).
fn entries<'b>(
    b: &'b [u8],
    base: u64,
    what: &str,
    budget: &mut Budget,
) -> Result<Vec<(Vec<u8>, &'b [u8])>> {
    if b.len() < 4 {
        return Err(fail(
            format!(
                "{what} is {} bytes, too short for its restart count",
                b.len()
            ),
            base,
        ));
    }
    let n = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap_or([0; 4])) as usize;
    let data_end = n
        .checked_mul(4)
        .and_then(|r| (b.len() - 4).checked_sub(r))
        .ok_or_else(|| {
            fail(
                format!(
                    "{what} claims {n} restart points, more than its {} bytes hold",
                    b.len()
                ),
                base + b.len() as u64 - 4,
            )
        })?;
    let restarts: Vec<usize> = b[data_end..b.len() - 4]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as usize)
        .collect();
    let mut out = Vec::new();
    let mut starts = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut pos = 0;
    while pos < data_end {
        let at = base + pos as u64;
        let start = pos;
        let bad = || fail(format!("{what}: malformed entry"), at);
        let body = &b[..data_end];
        let shared = varint(body, &mut pos).ok_or_else(bad)?;
        let own = varint(body, &mut pos).ok_or_else(bad)?;
        let vlen = varint(body, &mut pos).ok_or_else(bad)?;
        if shared > key.len() as u64 {
            return Err(fail(
                format!(
                    "{what}: an entry shares {shared} bytes with a previous key of {}",
                    key.len()
                ),
                at,
            ));
        }
        let key_len = shared.saturating_add(own);
        if key_len > MAX_KEY_BYTES as u64 {
            return Err(fail(
                format!("{what}: a key of {key_len} bytes, more than the {MAX_KEY_BYTES} accepted"),
                at,
            ));
        }
        let need = own.saturating_add(vlen);
        if need > (data_end - pos) as u64 {
            return Err(fail(
                format!("{what}: an entry of {need} bytes runs past the block's entries"),
                at,
            ));
        }
        budget.key_bytes = budget
            .key_bytes
            .checked_sub(key_len as usize)
            .ok_or_else(|| {
                fail(
                    "the keys, prefixes rebuilt, take more memory than accepted",
                    at,
                )
            })?;
        budget.entries = budget
            .entries
            .checked_sub(1)
            .ok_or_else(|| fail(format!("more than {MAX_ENTRIES} entries"), at))?;
        key.truncate(shared as usize);
        key.extend_from_slice(&b[pos..pos + own as usize]);
        pos += own as usize;
        let value = &b[pos..pos + vlen as usize];
        pos += vlen as usize;
        if shared == 0 {
            starts.push(start);
        }
        out.push((key.clone(), value));
    }
    for r in restarts {
        if !(starts.binary_search(&r).is_ok() || (out.is_empty() && r == 0)) {
            return Err(fail(
                format!("{what}: restart point {r} is not the start of an unshared entry"),
                base + data_end as u64,
            ));
        }
    }
    Ok(out)
}

/// Every key and value of a table, in order. Refuses a bad footer or magic, blocks
/// outside the table, a checksum mismatch, compression, malformed entries, and keys
/// not in strictly increasing byte order.
pub fn read(table: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if table.len() < FOOTER_LEN {
        return Err(fail(
            format!(
                "is {} bytes, shorter than the {FOOTER_LEN}-byte footer",
                table.len()
            ),
            0,
        ));
    }
    let end = table.len() - FOOTER_LEN;
    let footer = &table[end..];
    let magic = u64::from_le_bytes(footer[40..].try_into().unwrap_or([0; 8]));
    if magic != MAGIC {
        return Err(fail(
            format!(
                "bad magic number {magic:#018x} (expected {MAGIC:#018x}): not a TensorFlow checkpoint index"
            ),
            table.len() as u64 - 8,
        ));
    }
    let mut pos = 0;
    let _meta = handle(footer, &mut pos, end as u64, "footer")?;
    let index_h = handle(footer, &mut pos, end as u64, "footer")?;
    if pos > 40 {
        return Err(fail("footer handles run into the magic number", end as u64));
    }
    let mut budget = Budget {
        key_bytes: table.len().saturating_mul(4).max(1 << 20),
        entries: MAX_ENTRIES,
    };
    let index = block(table, end, index_h, "index block")?;
    let index_entries = entries(index, index_h.offset, "index block", &mut budget)?;
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    // Where the data block before ends, its trailer included: LevelDB writes the data
    // blocks one after another, so each starts at or past it. Holding the index to that
    // reads (and checksums) each byte of the table at most once; many entries naming
    // one block would otherwise read it again for each.
    let mut previous_end = 0u64;
    for (i, (separator, value)) in index_entries.into_iter().enumerate() {
        let mut p = 0;
        let h = handle(value, &mut p, index_h.offset, "index entry")?;
        if h.offset < previous_end {
            return Err(fail(
                format!(
                    "index entry {i} ({:?}) points at a data block at offset {}, before the end \
                     of the previous entry's block at {previous_end}: data blocks are written \
                     one after another, in order, each named once",
                    String::from_utf8_lossy(&separator),
                    h.offset
                ),
                h.offset,
            ));
        }
        let data = block(table, end, h, "data block")?;
        // block() checked that the block and its trailer end within the table.
        previous_end = h.offset + h.size + 5;
        for (key, v) in entries(data, h.offset, "data block", &mut budget)? {
            if let Some((last, _)) = out.last()
                && last.as_slice() >= key.as_slice()
            {
                return Err(fail(
                    format!(
                        "keys out of order: {:?} after {:?}",
                        String::from_utf8_lossy(&key),
                        String::from_utf8_lossy(last)
                    ),
                    h.offset,
                ));
            }
            if key > separator {
                return Err(fail(
                    format!(
                        "key {:?} is past its index entry {:?}",
                        String::from_utf8_lossy(&key),
                        String::from_utf8_lossy(&separator)
                    ),
                    h.offset,
                ));
            }
            out.push((key, v.to_vec()));
        }
    }
    Ok(out)
}

fn put_block(out: &mut Vec<u8>, entries: &[(&[u8], &[u8])], interval: usize) -> (u64, u64) {
    let offset = out.len() as u64;
    let mut restarts = Vec::new();
    let mut last: &[u8] = &[];
    for (i, (k, v)) in entries.iter().enumerate() {
        let shared = if i % interval == 0 {
            restarts.push(out.len() as u64 - offset);
            0
        } else {
            last.iter()
                .zip(k.iter())
                .take_while(|(a, b)| a == b)
                .count()
        };
        put_varint(out, shared as u64);
        put_varint(out, (k.len() - shared) as u64);
        put_varint(out, v.len() as u64);
        out.extend_from_slice(&k[shared..]);
        out.extend_from_slice(v);
        last = k;
    }
    if restarts.is_empty() {
        restarts.push(0);
    }
    for r in &restarts {
        out.extend_from_slice(&(*r as u32).to_le_bytes());
    }
    out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
    let size = out.len() as u64 - offset;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[offset as usize..]), &[0]);
    out.push(0);
    out.extend_from_slice(&mask(crc).to_le_bytes());
    (offset, size)
}

/// A table of `entries` (keys in strictly increasing byte order, which the caller
/// ensures): one data block, an empty metaindex, the index, the footer.
pub fn write(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut index_entry = Vec::new();
    if let Some((last, _)) = entries.last() {
        let (offset, size) = put_block(&mut out, entries, RESTART_INTERVAL);
        let mut h = Vec::new();
        put_varint(&mut h, offset);
        put_varint(&mut h, size);
        index_entry.push((last.to_vec(), h));
    }
    let meta = put_block(&mut out, &[], RESTART_INTERVAL);
    let idx: Vec<(&[u8], &[u8])> = index_entry
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    let index = put_block(&mut out, &idx, 1);
    let mut footer = Vec::with_capacity(FOOTER_LEN);
    put_varint(&mut footer, meta.0);
    put_varint(&mut footer, meta.1);
    put_varint(&mut footer, index.0);
    put_varint(&mut footer, index.1);
    footer.resize(40, 0);
    footer.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&footer);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let keys: Vec<Vec<u8>> = (0..40)
            .map(|i| format!("layer{i:03}/w").into_bytes())
            .collect();
        let e: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), &k[..3])).collect();
        let t = write(&e);
        let back = read(&t).unwrap();
        assert_eq!(back.len(), 40);
        for ((k, v), (k2, v2)) in e.iter().zip(&back) {
            assert_eq!((*k, *v), (k2.as_slice(), v2.as_slice()));
        }
        assert!(read(&write(&[])).unwrap().is_empty());
    }

    #[test]
    fn corruption_is_refused() {
        let t = write(&[(b"a", b"1"), (b"b", b"2")]);
        let mut bad = t.clone();
        bad[3] ^= 1;
        assert!(matches!(
            read(&bad).unwrap_err().kind(),
            ErrorKind::Checksum(_)
        ));
        let mut magic = t.clone();
        let n = magic.len();
        magic[n - 1] = 0;
        assert!(read(&magic).unwrap_err().to_string().contains("bad magic"));
        assert!(read(&t[1..]).is_err());
        assert!(
            read(&t[..20])
                .unwrap_err()
                .to_string()
                .contains("shorter than")
        );
    }

    #[test]
    fn a_shared_prefix_past_the_previous_key_is_refused() {
        // One entry sharing 5 bytes with no previous key.
        let mut block = vec![5, 1, 0, b'x'];
        block.extend(0u32.to_le_bytes());
        block.extend(1u32.to_le_bytes());
        let e = entries(&block, 0, "data block", &mut budget()).unwrap_err();
        assert!(e.to_string().contains("shares 5 bytes"), "{e}");
    }

    /// A table of the given data blocks (contents, each given its trailer) and an index
    /// of `(key, block number)`: the index may name the blocks in any order, any times.
    fn table_of(blocks: &[Vec<u8>], index: &[(&[u8], usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut handles = Vec::new();
        for b in blocks {
            let mut h = Vec::new();
            put_varint(&mut h, out.len() as u64);
            put_varint(&mut h, b.len() as u64);
            handles.push(h);
            out.extend_from_slice(b);
            let crc = crc32c::crc32c_append(crc32c::crc32c(b), &[0]);
            out.push(0);
            out.extend_from_slice(&mask(crc).to_le_bytes());
        }
        let meta = put_block(&mut out, &[], RESTART_INTERVAL);
        let idx: Vec<(&[u8], &[u8])> = index
            .iter()
            .map(|(k, b)| (*k, handles[*b].as_slice()))
            .collect();
        let index = put_block(&mut out, &idx, 1);
        let mut footer = Vec::new();
        for v in [meta.0, meta.1, index.0, index.1] {
            put_varint(&mut footer, v);
        }
        footer.resize(40, 0);
        footer.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&footer);
        out
    }

    /// The contents of a block of `entries` (no trailer).
    fn contents(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        put_block(&mut out, entries, RESTART_INTERVAL);
        out.truncate(out.len() - 5);
        out
    }

    /// Index entries need not have named distinct blocks: one 4 MiB block of no entries
    /// (1 Mi restart points, all 0), named by 10,000 index entries, was checksummed and
    /// its restart points collected once per entry — 40 GiB of work from a 4 MiB table.
    /// Each block must now start past the one before, so the table's bytes are read at
    /// most once; the second entry naming the block is refused, saying which.
    #[test]
    fn index_entries_naming_one_block_again_are_refused() {
        let n = 1usize << 20;
        let mut empty = vec![0u8; 4 * n];
        empty.extend((n as u32).to_le_bytes());
        let keys: Vec<Vec<u8>> = (0..10_000)
            .map(|i| format!("k{i:05}").into_bytes())
            .collect();
        let index: Vec<(&[u8], usize)> = keys.iter().map(|k| (k.as_slice(), 0)).collect();
        let e = read(&table_of(&[empty], &index)).unwrap_err().to_string();
        assert!(
            e.contains("index entry 1 (\"k00001\")")
                && e.contains("data block at offset 0")
                && e.contains("before the end of the previous entry's block at 4194313"),
            "{e}"
        );
        // Blocks in the order written read back; named out of order, refused.
        let a = contents(&[(b"a", b"1"), (b"b", b"2")]);
        let c = contents(&[(b"c", b"3")]);
        let t = table_of(&[a.clone(), c.clone()], &[(b"b", 0), (b"c", 1)]);
        let keys: Vec<Vec<u8>> = read(&t).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        let t = table_of(&[c, a], &[(b"b", 1), (b"c", 0)]);
        let e = read(&t).unwrap_err().to_string();
        assert!(e.contains("index entry 1 (\"c\")"), "{e}");
    }

    fn budget() -> Budget {
        Budget {
            key_bytes: 1 << 20,
            entries: MAX_ENTRIES,
        }
    }

    /// One 60 KiB key, then entries sharing all of it (4 bytes each on disk): refused
    /// once the rebuilt keys pass the budget, not after gigabytes.
    #[test]
    fn shared_prefixes_cannot_amplify_memory() {
        let mut block = vec![0x00, 0x80, 0xe0, 0x03, 0x00];
        block.extend(vec![b'k'; 60 << 10]);
        for _ in 0..100_000 {
            block.extend([0x80, 0xe0, 0x03, 0x01, 0x00, b'x']);
        }
        block.extend(0u32.to_le_bytes());
        block.extend(1u32.to_le_bytes());
        let e = entries(&block, 0, "data block", &mut budget()).unwrap_err();
        assert!(e.to_string().contains("more memory than accepted"), "{e}");
        let mut few = budget();
        few.entries = 3;
        let e = entries(&block, 0, "data block", &mut few).unwrap_err();
        assert!(e.to_string().contains("more than 1000000 entries"), "{e}");
    }
}
