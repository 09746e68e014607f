//! The Paddle LoDTensor record codec, byte-exact with the files Paddle's `save`,
//! `save_combine` and `save_inference_model` write.
//!
//! ```text
//! u32 version = 0 | u64 lod_level | lod_level × (u64 nbytes, nbytes/8 × u64 offset)
//! u32 tensor version = 0 | i32 desc_size | TensorDesc protobuf | data
//! ```
//! Decoding is strict where Paddle is loose, and never allocates from a length the
//! input declares before checking it against the bytes that remain.

use super::dtype::DType;
use super::lod::{Lod, check_height, check_level, check_nesting};
use super::view::{TensorView, data_len};
// Public here since before it moved to lod.rs, beside `Lod`.
pub use super::lod::check_lod;
use crate::error::{Error, ErrorKind, Result};
use std::io::Write;

/// `VarType.TensorDesc` of schemas/paddle/framework.proto, with `data_type` kept
/// optional so that a missing required field is detected rather than read as BOOL.
/// Its encoding is the one Paddle writes: field 1, then each dim as its own field 2.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorDescWire {
    #[prost(int32, optional, tag = "1")]
    data_type: Option<i32>,
    #[prost(int64, repeated, packed = "false", tag = "2")]
    dims: Vec<i64>,
}

/// One decoded record of a tensor file, with where it lies in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Position of the record in the file, from 0.
    pub index: usize,
    /// Byte offset of the record's first byte.
    pub offset: u64,
    /// Total bytes of the record (header and data).
    pub length: u64,
    /// Byte offset of the record's raw data.
    pub data_offset: u64,
    /// The tensor, borrowing its data from the input.
    pub tensor: TensorView<'a>,
}

/// A bounds-checked reader over a byte slice that reports absolute offsets.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(
                Error::new(ErrorKind::truncated(what, n, available)).at_offset(self.pos as u64)
            );
        }
        // n <= remaining, which fits in usize.
        let n = n as usize;
        let out = self.bytes.get(self.pos..self.pos + n).unwrap_or_default();
        self.pos += n;
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

/// Decodes the one record of a standalone tensor file; bytes after it are an error.
pub fn decode_tensor(bytes: &[u8]) -> Result<TensorView<'_>> {
    decode_tensor_record(bytes).map(|rec| rec.tensor)
}

/// [`decode_tensor`], keeping where the data starts ([`Record::data_offset`]).
pub(crate) fn decode_tensor_record(bytes: &[u8]) -> Result<Record<'_>> {
    let rec = decode_record_at(bytes, 0, 0)?;
    let end = rec.offset + rec.length;
    if end != bytes.len() as u64 {
        return Err(
            Error::new(ErrorKind::TrailingBytes(bytes.len() as u64 - end))
                .in_record(0)
                .at_offset(end),
        );
    }
    Ok(rec)
}

/// Decodes every record of a combined file (`save_combine`, `.pdiparams`).
/// An empty input holds no records.
pub fn decode_combined(bytes: &[u8]) -> Result<Vec<Record<'_>>> {
    records(bytes).collect()
}

/// Iterates over the records of a combined file, stopping after the first error.
pub fn records(bytes: &[u8]) -> Records<'_> {
    Records {
        bytes,
        pos: 0,
        index: 0,
        failed: false,
    }
}

/// Iterator returned by [`records`].
pub struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    index: usize,
    failed: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let rest = (self.bytes.len() - self.pos) as u64;
        if self.index > 0 && rest < MIN_RECORD_BYTES {
            // Too few bytes for any record: bytes after the last one, not a record cut short.
            self.failed = true;
            return Some(Err(Error::new(ErrorKind::TrailingBytes(rest))
                .in_record(self.index - 1)
                .at_offset(self.pos as u64)));
        }
        match decode_record_at(self.bytes, self.pos, self.index) {
            Ok(rec) => {
                self.pos += rec.length as usize;
                self.index += 1;
                Some(Ok(rec))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Decodes the record that starts at byte `start` of `bytes`, numbering it `index`.
/// Errors carry the record index and the absolute byte offset of the bad field.
pub fn decode_record_at(bytes: &[u8], start: usize, index: usize) -> Result<Record<'_>> {
    let mut c = Cursor { bytes, pos: start };
    decode_fields(&mut c, start, index).map_err(|e| e.in_record(index))
}

/// What a record's header says: dtype, dims, LoD and the data's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHead {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub dims: Vec<u64>,
    /// Level-of-detail offsets.
    pub lod: Lod,
    /// Bytes of the header (where the data starts).
    pub header_len: u64,
    /// Bytes of the data (dtype size × element count).
    pub data_len: u64,
}

/// Decodes the header of the standalone tensor record whose first bytes are `prefix`
/// (with every check [`decode_tensor`] makes of a header), and checks that header and data
/// fill exactly `entry_len` bytes. `Ok(None)` when `prefix` ends before the header does
/// (read more and decode the whole record).
pub fn decode_head(prefix: &[u8], entry_len: u64) -> Result<Option<RecordHead>> {
    let mut dims = Vec::new();
    Ok(
        decode_head_into(prefix, entry_len, &mut dims)?.map(
            |(lod, dtype, header_len, data_len)| RecordHead {
                dtype,
                dims,
                lod,
                header_len,
                data_len,
            },
        ),
    )
}

/// The dtype of [`decode_head`]'s header, with the same checks, keeping nothing else of
/// it (the dims decoded into this thread's reused buffers), and the header's length:
/// what a listing needs.
fn decode_head_dtype(prefix: &[u8], entry_len: u64) -> Result<Option<(DType, u64)>> {
    thread_local! {
        static DIMS: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut dims = DIMS.take();
    let found = decode_head_into(prefix, entry_len, &mut dims);
    // A hostile header's many dims are not kept by the thread.
    if dims.capacity() <= 64 {
        DIMS.set(dims);
    }
    Ok(found?.map(|(_, dtype, header_len, _)| (dtype, header_len)))
}

/// Record headers' dtypes as [`decode_head`] finds them, remembering the last header of
/// each of a caller's slots: a header whose bytes and entry length are the slot's last
/// one's has its dtype without a second decode. Exact: the decode reads a header's bytes
/// in order and stops at its end, so what it finds depends on those bytes and the
/// entry's length alone. Describing many checkpoints of one model (a tensor at the same
/// place in every tag has the same shape) decodes each place's header once.
#[derive(Default)]
pub(crate) struct DtypeMemo {
    slots: Vec<MemoSlot>,
}

/// One [`DtypeMemo`] slot: a header of at most [`MEMO_HEADER`] bytes (a record without
/// LoD and with a few dims; a longer one is decoded every time).
#[derive(Clone, Copy)]
struct MemoSlot {
    len: u8,
    bytes: [u8; MEMO_HEADER],
    entry_len: u64,
    dtype: DType,
}

const MEMO_HEADER: usize = 48;
/// The most slots a [`DtypeMemo`] keeps (~64 bytes each).
const MEMO_SLOTS: usize = 1 << 14;

impl DtypeMemo {
    /// [`decode_head`]'s dtype of the header `prefix` starts with, for the entry of
    /// `entry_len` bytes, remembered in `slot`.
    pub(crate) fn dtype(
        &mut self,
        slot: usize,
        prefix: &[u8],
        entry_len: u64,
    ) -> Result<Option<DType>> {
        if let Some(m) = self.slots.get(slot)
            && m.holds(prefix, entry_len)
        {
            return Ok(Some(m.dtype));
        }
        let Some((dtype, header_len)) = decode_head_dtype(prefix, entry_len)? else {
            return Ok(None);
        };
        let len = header_len as usize;
        if slot < MEMO_SLOTS && len <= MEMO_HEADER {
            if self.slots.len() <= slot {
                self.slots.resize(slot + 1, MemoSlot::EMPTY);
            }
            let m = &mut self.slots[slot];
            m.len = len as u8;
            m.bytes[..len].copy_from_slice(&prefix[..len]);
            m.entry_len = entry_len;
            m.dtype = dtype;
        }
        Ok(Some(dtype))
    }
}

impl MemoSlot {
    /// True when this slot's header is the one `prefix` starts with, in an entry of
    /// `entry_len` bytes.
    fn holds(&self, prefix: &[u8], entry_len: u64) -> bool {
        self.len > 0
            && self.entry_len == entry_len
            && prefix.starts_with(&self.bytes[..usize::from(self.len)])
    }

    const EMPTY: MemoSlot = MemoSlot {
        len: 0,
        bytes: [0; MEMO_HEADER],
        entry_len: 0,
        dtype: DType::Bool,
    };
}

/// [`decode_head`], remembering the last few headers without LoD this thread decoded:
/// a header whose bytes and entry length are one of theirs is that one's (exact, as
/// [`DtypeMemo`]'s). The tensors read one after another mostly repeat a few shapes
/// (every layer of a model has the same): their views need no decode but the first.
pub(crate) fn decode_head_recent(prefix: &[u8], entry_len: u64) -> Result<Option<RecordHead>> {
    thread_local! {
        static RECENT: std::cell::RefCell<Vec<(MemoSlot, RecordHead)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let hit = RECENT.with_borrow_mut(|recent| {
        let i = recent
            .iter()
            .position(|(m, _)| m.holds(prefix, entry_len))?;
        // The most recent first: the next look finds it at once.
        recent[..=i].rotate_right(1);
        Some(recent[0].1.clone())
    });
    if hit.is_some() {
        return Ok(hit);
    }
    let head = decode_head(prefix, entry_len)?;
    if let Some(h) = &head
        && h.lod.is_empty()
        && h.header_len as usize <= MEMO_HEADER
    {
        let len = h.header_len as usize;
        let mut slot = MemoSlot {
            len: len as u8,
            entry_len,
            dtype: h.dtype,
            ..MemoSlot::EMPTY
        };
        slot.bytes[..len].copy_from_slice(&prefix[..len]);
        RECENT.with_borrow_mut(|recent| {
            if recent.len() == RECENT_HEADS {
                recent.pop();
            }
            recent.insert(0, (slot, h.clone()));
        });
    }
    Ok(head)
}

/// How many headers [`decode_head_recent`] remembers (a layer's weight, bias, norm...).
const RECENT_HEADS: usize = 4;

/// [`decode_head`]'s decode and checks, its dims left in `dims`: the LoD, dtype, header
/// length and data length.
fn decode_head_into(
    prefix: &[u8],
    entry_len: u64,
    dims: &mut Vec<u64>,
) -> Result<Option<(Lod, DType, u64, u64)>> {
    let mut c = Cursor {
        bytes: prefix,
        pos: 0,
    };
    let (lod, dtype, desc_at) = match decode_header_fields(&mut c, dims) {
        Ok(h) => h,
        // Whatever a short prefix cannot tell, the whole record will.
        Err(_) if (prefix.len() as u64) < entry_len => return Ok(None),
        Err(e) => return Err(e.in_record(0)),
    };
    let header_len = c.pos as u64;
    let n = data_len(dtype, dims).map_err(|e| e.at_offset(desc_at).in_record(0))?;
    let end = header_len.saturating_add(n);
    if end > entry_len {
        return Err(Error::new(ErrorKind::truncated(
            "tensor data",
            n,
            entry_len.saturating_sub(header_len),
        ))
        .at_offset(header_len)
        .in_record(0));
    }
    if end < entry_len {
        return Err(Error::new(ErrorKind::TrailingBytes(entry_len - end))
            .in_record(0)
            .at_offset(end));
    }
    Ok(Some((lod, dtype, header_len, n)))
}

fn decode_fields<'a>(c: &mut Cursor<'a>, start: usize, index: usize) -> Result<Record<'a>> {
    let mut dims = Vec::new();
    let (lod, dtype, desc_at) = decode_header_fields(c, &mut dims)?;
    let data_offset = c.pos as u64;
    let n = data_len(dtype, &dims).map_err(|e| e.at_offset(desc_at))?;
    let data = c.take(n, "tensor data")?;
    let tensor = TensorView::new(dtype, dims, lod, data).map_err(|e| e.at_offset(data_offset))?;
    Ok(Record {
        index,
        offset: start as u64,
        length: c.pos as u64 - start as u64,
        data_offset,
        tensor,
    })
}

/// The header fields up to the data: LoD, dtype, and where the TensorDesc was; the dims
/// in `dims`.
fn decode_header_fields(c: &mut Cursor<'_>, dims: &mut Vec<u64>) -> Result<(Lod, DType, u64)> {
    let at = c.pos as u64;
    let version = c.u32("version")?;
    if version != 0 {
        return Err(Error::new(ErrorKind::bad_version("LoDTensor version", version)).at_offset(at));
    }
    let lod_at = c.pos as u64;
    let lod_level = c.u64("lod_level")?;
    if lod_level > MAX_LOD_LEVELS {
        return Err(Error::new(ErrorKind::BadLod(format!(
            "lod_level {lod_level} is over the limit of {MAX_LOD_LEVELS} levels"
        )))
        .at_offset(lod_at));
    }
    // Each level takes at least its 8-byte size word: refuse a count the input cannot
    // hold before allocating for it.
    if lod_level > c.remaining() / 8 {
        return Err(Error::new(ErrorKind::truncated(
            "LoD levels",
            lod_level * 8,
            c.remaining(),
        ))
        .at_offset(lod_at));
    }
    let mut lod: Lod = Vec::with_capacity(lod_level as usize);
    // Where the last offset of the previous level lies, for the error that names it.
    let mut prev_last_at = 0u64;
    for l in 0..lod_level as usize {
        let at = c.pos as u64;
        let nbytes = c.u64("LoD level size")?;
        if nbytes % 8 != 0 {
            return Err(Error::new(ErrorKind::BadLod(format!(
                "level {l} size {nbytes} is not a multiple of 8"
            )))
            .at_offset(at));
        }
        if nbytes < 16 {
            return Err(Error::new(ErrorKind::BadLod(format!(
                "level {l} has {} offset(s); a level needs at least 2",
                nbytes / 8
            )))
            .at_offset(at));
        }
        let first_at = c.pos as u64;
        let raw = c.take(nbytes, "LoD offsets")?;
        let level: Vec<u64> = raw
            .chunks_exact(8)
            .map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_le_bytes(a)
            })
            .collect();
        check_level(l, &level).map_err(|(i, e)| e.at_offset(first_at + 8 * i as u64))?;
        if let Some(prev) = lod.last() {
            check_nesting(l - 1, prev, &level).map_err(|e| e.at_offset(prev_last_at))?;
        }
        prev_last_at = first_at + nbytes - 8;
        lod.push(level);
    }
    let at = c.pos as u64;
    let tversion = c.u32("tensor version")?;
    if tversion != 0 {
        return Err(Error::new(ErrorKind::bad_version("tensor version", tversion)).at_offset(at));
    }
    let at = c.pos as u64;
    let size_word = c.u32("TensorDesc size")?;
    let desc_size = i64::from(size_word as i32);
    if desc_size < 0 || desc_size as u64 > c.remaining() {
        return Err(Error::new(ErrorKind::BadDescSize(format!(
            "invalid TensorDesc size {} ({} bytes remain)",
            desc_size,
            c.remaining()
        )))
        .at_offset(at));
    }
    let desc_at = c.pos as u64;
    let desc_bytes = c.take(desc_size as u64, "TensorDesc")?;
    let dtype = decode_desc(desc_bytes, dims).map_err(|e| e.at_offset(desc_at))?;
    if let Some(last) = lod.last() {
        let at = if dims.is_empty() {
            lod_at
        } else {
            prev_last_at
        };
        check_height(lod.len() - 1, last, dims).map_err(|e| e.at_offset(at))?;
    }
    Ok((lod, dtype, desc_at))
}

/// The dtype a TensorDesc names; its dims in `dims`. Decoded into this thread's reused
/// message (no allocation for its dims once a record with as many was decoded).
fn decode_desc(bytes: &[u8], dims: &mut Vec<u64>) -> Result<DType> {
    thread_local! {
        static DESC: std::cell::Cell<TensorDescWire> = std::cell::Cell::new(TensorDescWire::default());
    }
    let mut desc = DESC.take();
    desc.data_type = None;
    desc.dims.clear();
    let decoded = prost::Message::merge(&mut desc, bytes);
    let found = decoded
        .map_err(|e| ErrorKind::BadTensorDesc(format!("protobuf does not decode: {e}")).into())
        .and_then(|()| desc_fields(&desc, dims));
    // A hostile header's many dims are not kept by the thread.
    if desc.dims.capacity() <= 64 {
        DESC.set(desc);
    }
    found
}

/// The dtype of a decoded TensorDesc, its dims (each not negative) in `dims`.
fn desc_fields(desc: &TensorDescWire, dims: &mut Vec<u64>) -> Result<DType> {
    let code = desc
        .data_type
        .ok_or_else(|| ErrorKind::BadTensorDesc("required field data_type is missing".into()))?;
    let dtype = DType::from_code(code.into())?;
    dims.clear();
    dims.reserve_exact(desc.dims.len());
    for (index, &value) in desc.dims.iter().enumerate() {
        dims.push(u64::try_from(value).map_err(|_| ErrorKind::negative_dim(index, value))?);
    }
    Ok(dtype)
}

/// The most LoD levels a record may declare. Paddle sets no limit, but its models use a
/// few; a hostile count must not cost a vector per level.
pub const MAX_LOD_LEVELS: u64 = 1024;

/// The fewest bytes a record takes: versions, lod_level, desc size, a TensorDesc with
/// just its data_type (2 bytes), no data.
const MIN_RECORD_BYTES: u64 = 4 + 8 + 4 + 4 + 2;

/// The bytes of a record before its data: versions, LoD and TensorDesc.
pub fn encode_header(tensor: &TensorView<'_>) -> Vec<u8> {
    header_bytes(tensor.dtype(), tensor.dims(), tensor.lod())
}

impl RecordHead {
    /// Size of the record modelzip writes for this tensor (`encode_tensor`): its header
    /// as modelzip encodes it, then the data.
    pub(crate) fn encoded_len(&self) -> u64 {
        header_bytes(self.dtype, &self.dims, &self.lod).len() as u64 + self.data_len
    }
}

/// The record header modelzip writes for a tensor of `dtype` and `dims` without LoD
/// (what precedes its data in a tensor file).
pub(crate) fn header_for(dtype: DType, dims: &[u64]) -> Vec<u8> {
    header_bytes(dtype, dims, &Lod::default())
}

fn header_bytes(dtype: DType, dims: &[u64], lod: &Lod) -> Vec<u8> {
    let desc = TensorDescWire {
        data_type: Some(dtype.code()),
        dims: dims.iter().map(|&d| d as i64).collect(),
    };
    let desc = prost::Message::encode_to_vec(&desc);
    let lod_bytes: usize = lod.iter().map(|l| 8 + 8 * l.len()).sum();
    let mut out = Vec::with_capacity(4 + 8 + lod_bytes + 8 + desc.len());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(lod.len() as u64).to_le_bytes());
    for level in lod {
        out.extend_from_slice(&(8 * level.len() as u64).to_le_bytes());
        for o in level {
            out.extend_from_slice(&o.to_le_bytes());
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(desc.len() as i32).to_le_bytes());
    out.extend_from_slice(&desc);
    out
}

/// Total encoded size of a record.
pub fn encoded_len(tensor: &TensorView<'_>) -> u64 {
    encode_header(tensor).len() as u64 + tensor.data().len() as u64
}

/// Writes one record; returns the bytes written.
pub fn encode_tensor<W: Write + ?Sized>(
    tensor: &TensorView<'_>,
    w: &mut W,
) -> std::io::Result<u64> {
    let header = encode_header(tensor);
    w.write_all(&header)?;
    w.write_all(tensor.data())?;
    Ok(header.len() as u64 + tensor.data().len() as u64)
}

/// Writes records back to back, as `save_combine` does; returns the bytes written.
pub fn encode_combined<'a, W: Write + ?Sized>(
    tensors: impl IntoIterator<Item = &'a TensorView<'a>>,
    w: &mut W,
) -> std::io::Result<u64> {
    let mut total = 0;
    for t in tensors {
        total += encode_tensor(t, w)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    /// The example of FORMAT.md: float32 [5,2] with lod [[0,2,5]].
    fn example() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&24u64.to_le_bytes());
        for o in [0u64, 2, 5] {
            b.extend_from_slice(&o.to_le_bytes());
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&6i32.to_le_bytes());
        b.extend_from_slice(&[0x08, 0x05, 0x10, 0x05, 0x10, 0x02]);
        for i in 0..10 {
            b.extend_from_slice(&(i as f32).to_le_bytes());
        }
        b
    }

    #[test]
    fn decodes_the_format_example_and_reencodes_it() {
        let bytes = example();
        let rec = decode_record_at(&bytes, 0, 0).unwrap();
        assert_eq!(rec.data_offset, 0x3a);
        let t = rec.tensor;
        assert_eq!(t.dtype(), DType::Fp32);
        assert_eq!(t.dims(), &[5, 2]);
        assert_eq!(t.lod(), &vec![vec![0, 2, 5]]);
        let mut out = Vec::new();
        encode_tensor(&t, &mut out).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn packed_dims_are_accepted() {
        let t = Tensor::from_slice(vec![2, 3], &[0i32; 6]).unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        let desc = [0x08, 0x02, 0x12, 0x02, 0x02, 0x03];
        b.extend_from_slice(&(desc.len() as i32).to_le_bytes());
        b.extend_from_slice(&desc);
        b.extend_from_slice(t.data());
        assert_eq!(decode_tensor(&b).unwrap(), t.view());
    }

    /// What `decode_head` says of a record, as the memo answers: the dtype, no answer
    /// (a short prefix), or the error's text.
    fn head_dtype(prefix: &[u8], entry_len: u64) -> std::result::Result<Option<DType>, String> {
        decode_head(prefix, entry_len)
            .map(|h| h.map(|h| h.dtype))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_dtype_memo_answers_only_for_the_same_header_and_length() {
        let a = Tensor::from_slice(vec![2, 3], &[0f32; 6]).unwrap();
        let mut rec = Vec::new();
        encode_tensor(&a.view(), &mut rec).unwrap();
        let len = rec.len() as u64;
        let mut memo = DtypeMemo::default();
        assert_eq!(memo.dtype(0, &rec, len).unwrap(), Some(DType::Fp32));
        assert_eq!(memo.slots[0].len as usize, rec.len() - 24);
        // The same header again: remembered.
        assert_eq!(memo.dtype(0, &rec, len).unwrap(), Some(DType::Fp32));
        // The same header in an entry of another length: decoded, and refused.
        assert!(memo.dtype(0, &rec, len + 4).is_err());
        assert!(memo.dtype(0, &rec[..rec.len() - 4], len - 4).is_err());
        // Another dtype code in the same slot: decoded again.
        let b = Tensor::from_slice(vec![2, 3], &[0i32; 6]).unwrap();
        let mut other = Vec::new();
        encode_tensor(&b.view(), &mut other).unwrap();
        assert_eq!(memo.dtype(0, &other, len).unwrap(), Some(DType::Int32));
        // A header with LoD is longer than a slot holds: decoded every time.
        let bytes = example();
        assert_eq!(
            memo.dtype(1, &bytes, bytes.len() as u64).unwrap(),
            Some(DType::Fp32)
        );
        assert!(memo.slots.get(1).is_none_or(|m| m.len == 0));
    }

    #[test]
    fn recent_heads_answer_for_the_same_header_and_length_only() {
        let head = |dims: Vec<u64>| {
            let t = Tensor::from_bytes(
                DType::Fp32,
                dims.clone(),
                vec![0; 4 * dims.iter().product::<u64>() as usize],
            )
            .unwrap();
            let mut rec = Vec::new();
            encode_tensor(&t.view(), &mut rec).unwrap();
            rec
        };
        let (a, b) = (head(vec![2, 3]), head(vec![3, 2]));
        for rec in [&a, &b, &a, &b, &a] {
            let got = decode_head_recent(rec, rec.len() as u64).unwrap().unwrap();
            assert_eq!(Some(got), decode_head(rec, rec.len() as u64).unwrap());
        }
        // The same bytes in an entry of another length: refused, as decode_head does;
        // an entry shorter than its header too (not a subtraction's overflow).
        assert!(decode_head_recent(&a, a.len() as u64 + 1).is_err());
        assert!(decode_head(&a, 4).is_err());
        // A header with LoD: decoded, and the same.
        let lod = example();
        let got = decode_head_recent(&lod, lod.len() as u64).unwrap().unwrap();
        assert_eq!(got.lod, vec![vec![0, 2, 5]]);
    }

    proptest::proptest! {
        /// Whatever a slot last held, the memo says what `decode_head` says.
        #[test]
        fn the_dtype_memo_says_what_decode_head_says(
            records in proptest::collection::vec(
                (0usize..3, 0usize..4, proptest::collection::vec(1u64..4, 0..3),
                 0usize..4, -8i64..8, proptest::option::of((0usize..40, proptest::num::u8::ANY))),
                1..24,
            )
        ) {
            let dtypes = [DType::Fp32, DType::Int8, DType::Fp16, DType::Int64];
            let mut memo = DtypeMemo::default();
            for (slot, dt, dims, cut, extra, flip) in records {
                let dtype = dtypes[dt];
                let n: u64 = dims.iter().product::<u64>() * dtype.size() as u64;
                let mut rec = header_bytes(dtype, &dims, &Vec::new());
                rec.resize(rec.len() + n as usize, 0);
                if let Some((at, byte)) = flip {
                    let at = at % rec.len();
                    rec[at] = byte;
                }
                // A prefix of the record, in an entry of about its length.
                let prefix = &rec[..rec.len().saturating_sub(cut)];
                let entry_len = (rec.len() as i64 + extra).max(0) as u64;
                let got = memo.dtype(slot, prefix, entry_len).map_err(|e| e.to_string());
                proptest::prop_assert_eq!(got, head_dtype(prefix, entry_len));
                // And the recent heads say what decode_head says of the whole header.
                let recent = decode_head_recent(prefix, entry_len).map_err(|e| e.to_string());
                let plain = decode_head(prefix, entry_len).map_err(|e| e.to_string());
                proptest::prop_assert_eq!(recent, plain);
            }
        }
    }
}
