//! A TensorFlow checkpoint index (`variables.index` of a SavedModel): parsing never
//! panics or allocates past the limits; an index that parses writes back to one that
//! parses to the same header and entries.
//!
//! Every block of the table carries a masked CRC-32C, which random mutations almost never
//! keep right, so each input is also parsed after `repair`: the checksums of the index
//! block and of every data block its entries point at recomputed (the rest left as is),
//! which lets mutations inside blocks reach the block and entry parsers.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::interop::tf::saved_model::{parse_index, write_index};

const FOOTER_LEN: usize = 48;

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

/// Rewrites the trailer checksum of the block at `offset`, `size` long, if it fits
/// before `end`; returns the block's contents.
fn fix_block(t: &mut [u8], end: usize, offset: u64, size: u64) -> Option<Vec<u8>> {
    let start = usize::try_from(offset).ok()?;
    let len = usize::try_from(size).ok()?;
    if start.checked_add(len)?.checked_add(5)? > end {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&t[start..start + len]), &[t[start + len]]);
    let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
    t[start + len + 1..start + len + 5].copy_from_slice(&masked.to_le_bytes());
    Some(t[start..start + len].to_vec())
}

/// `data` with the checksums of the index block and of the data blocks it points at
/// recomputed; `None` when the footer or index block is too broken to find them.
fn repair(data: &[u8]) -> Option<Vec<u8>> {
    let mut t = data.to_vec();
    let end = t.len().checked_sub(FOOTER_LEN)?;
    let mut pos = end;
    varint(&t, &mut pos)?;
    varint(&t, &mut pos)?;
    let (io, is) = (varint(&t, &mut pos)?, varint(&t, &mut pos)?);
    let index = fix_block(&mut t, end, io, is)?;
    // The index block's entries: shared, own, value_len varints, key bytes, value (a
    // block handle); then the restart array, whose length the last 4 bytes give.
    let n = u32::from_le_bytes(index.get(index.len().checked_sub(4)?..)?.try_into().ok()?);
    let data_end = (index.len() - 4).checked_sub(usize::try_from(n).ok()?.checked_mul(4)?)?;
    let body = &index[..data_end];
    let mut p = 0;
    while p < body.len() {
        let _shared = varint(body, &mut p)?;
        let own = usize::try_from(varint(body, &mut p)?).ok()?;
        let vlen = usize::try_from(varint(body, &mut p)?).ok()?;
        p = p.checked_add(own)?;
        let value = body.get(p..p.checked_add(vlen)?)?;
        p += vlen;
        let mut q = 0;
        let (o, s) = (varint(value, &mut q)?, varint(value, &mut q)?);
        fix_block(&mut t, end, o, s);
    }
    Some(t)
}

fn check(data: &[u8]) {
    let b = match parse_index(data) {
        Ok(b) => b,
        Err(e) => return drop(e.to_string()),
    };
    let again = parse_index(&write_index(&b)).expect("a written index parses");
    assert_eq!(again.header, b.header);
    assert_eq!(again.entries, b.entries);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(fixed) = repair(data)
        && fixed != data
    {
        check(&fixed);
    }
});
