//! Writing the container front to back: local headers and data, then the central
//! directory and end records.

use super::*;
use std::io::Write;

/// One entry for [`ZipOut::write_entry`]: its name, its bytes as stored, and what the
/// headers say about them.
#[derive(Debug, Clone, Copy)]
pub struct EntrySpec<'a> {
    /// Entry name (checked by the caller).
    pub name: &'a str,
    /// [`METHOD_STORED`] or [`METHOD_DEFLATED`].
    pub method: u16,
    /// CRC-32 of the uncompressed bytes.
    pub crc32: u32,
    /// Size after decompression (the stored size is the sum of `data`).
    pub uncompressed_size: u64,
    /// The stored bytes (already compressed when `method` is deflate), in parts.
    pub data: &'a [&'a [u8]],
    /// With `Some(h)`, the local extra field is padded so that the byte `h` bytes into
    /// the data (a tensor's first element, after its variable-length LoDTensor header)
    /// lies at a multiple of [`DATA_ALIGN`].
    pub align_after: Option<u64>,
    /// A copied entry whose metadata (time, attributes, extra fields, comment) to keep.
    pub template: Option<&'a ZipEntry>,
}

impl<'a> EntrySpec<'a> {
    /// A stored entry of `data` with CRC `crc32`, unaligned, with fresh metadata.
    pub fn stored(name: &'a str, crc32: u32, data: &'a [&'a [u8]]) -> Self {
        EntrySpec {
            name,
            method: METHOD_STORED,
            crc32,
            uncompressed_size: data.iter().map(|d| d.len() as u64).sum(),
            data,
            align_after: None,
            template: None,
        }
    }
}

/// Whether a reader with the default limits inflates a deflated entry of these sizes.
pub fn admitted_deflated(uncompressed_size: u64, compressed_size: u64) -> bool {
    crate::archive::OpenOptions::default().admits_deflated(uncompressed_size, compressed_size)
}

/// Writes a zip archive front to back: local headers and data as entries are added,
/// then the central directory and end records. Positions are relative to the file start
/// (`start` is where the writer begins, non-zero for an in-place append).
pub struct ZipOut<W: Write> {
    w: W,
    pos: u64,
    /// Entries that go into the central directory, in order.
    pub entries: Vec<ZipEntry>,
    dos_time: u16,
    dos_date: u16,
}

impl<W: Write> ZipOut<W> {
    /// A writer whose first byte lands at file offset `start`.
    pub fn new(w: W, start: u64) -> Self {
        let (dos_date, dos_time) = crate::archive::time::dos_now();
        ZipOut {
            w,
            pos: start,
            entries: Vec::new(),
            dos_time,
            dos_date,
        }
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.w.write_all(b)?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Writes a local header and the entry's data (see [`EntrySpec`]).
    pub fn write_entry(&mut self, spec: EntrySpec<'_>) -> Result<ZipEntry> {
        let (h, entry) = local_header(&spec, self.pos, (self.dos_time, self.dos_date))?;
        self.put(&h)?;
        for part in spec.data {
            self.put(part)?;
        }
        self.entries.push(entry.clone());
        Ok(entry)
    }

    /// Lists an entry whose local header and data are already in the file (written
    /// there by positioned writes, before this writer's start): it goes into the central
    /// directory as it is.
    pub fn list_placed(&mut self, entry: ZipEntry) {
        self.entries.push(entry);
    }

    /// Writes an entry from uncompressed bytes: deflated when `deflate` and that makes it
    /// smaller (a few bytes, like tags.txt, grow when deflated) and a reader with the
    /// default [`OpenOptions`](crate::archive::OpenOptions) would inflate it (over 16 MiB
    /// compressing better than 100:1, or over 4 GiB, is refused as a deflate bomb), else
    /// stored.
    pub fn write_bytes(&mut self, name: &str, bytes: &[u8], deflate: bool) -> Result<ZipEntry> {
        let crc = crc32fast::hash(bytes);
        let len = bytes.len() as u64;
        // Over the size limit an entry is refused whatever its ratio: not worth deflating.
        let z = if deflate && admitted_deflated(len, len) {
            let mut enc =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(bytes)?;
            Some(enc.finish()?)
                .filter(|z| z.len() < bytes.len() && admitted_deflated(len, z.len() as u64))
        } else {
            None
        };
        match z {
            Some(z) => self.write_entry(EntrySpec {
                method: METHOD_DEFLATED,
                uncompressed_size: bytes.len() as u64,
                ..EntrySpec::stored(name, crc, &[&z])
            }),
            None => self.write_entry(EntrySpec::stored(name, crc, &[bytes])),
        }
    }

    /// Writes the central directory and end records; returns the sink and the end offset.
    pub fn finish(mut self, comment: &[u8]) -> Result<(W, u64)> {
        let cd_offset = self.pos;
        let entries = std::mem::take(&mut self.entries);
        let mut buf = Vec::with_capacity(64 * 1024);
        for e in &entries {
            write_central(&mut buf, e);
            if buf.len() >= 64 * 1024 {
                self.put(&buf)?;
                buf.clear();
            }
        }
        self.put(&buf)?;
        let cd_size = self.pos - cd_offset;
        let count = entries.len() as u64;
        let mut end = Vec::new();
        let zip64 = count >= 0xffff || cd_size >= U32_MAX || cd_offset >= U32_MAX;
        if zip64 {
            let z64_offset = self.pos;
            end.extend_from_slice(&SIG_EOCD64.to_le_bytes());
            end.extend_from_slice(&44u64.to_le_bytes());
            end.extend_from_slice(&45u16.to_le_bytes());
            end.extend_from_slice(&45u16.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&count.to_le_bytes());
            end.extend_from_slice(&count.to_le_bytes());
            end.extend_from_slice(&cd_size.to_le_bytes());
            end.extend_from_slice(&cd_offset.to_le_bytes());
            end.extend_from_slice(&SIG_LOCATOR64.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&z64_offset.to_le_bytes());
            end.extend_from_slice(&1u32.to_le_bytes());
        }
        let comment = &comment[..comment.len().min(0xffff)];
        end.extend_from_slice(&SIG_EOCD.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        let c16 = count.min(0xffff) as u16;
        end.extend_from_slice(&c16.to_le_bytes());
        end.extend_from_slice(&c16.to_le_bytes());
        end.extend_from_slice(&(cd_size.min(U32_MAX) as u32).to_le_bytes());
        end.extend_from_slice(&(cd_offset.min(U32_MAX) as u32).to_le_bytes());
        end.extend_from_slice(&(comment.len() as u16).to_le_bytes());
        end.extend_from_slice(comment);
        self.put(&end)?;
        self.w.flush()?;
        Ok((self.w, self.pos))
    }
}

/// The local header of `spec`'s entry at `header_offset` (its data follows it), and the
/// entry as the central directory lists it. The header's length depends on the name, the
/// sizes and the alignment only, not on the CRC: a writer may compute where data goes
/// before it knows the CRC, and write the header afterwards.
pub fn local_header(
    spec: &EntrySpec<'_>,
    header_offset: u64,
    (dos_time, dos_date): (u16, u16),
) -> Result<(Vec<u8>, ZipEntry)> {
    let EntrySpec {
        name,
        method,
        crc32,
        uncompressed_size,
        data,
        align_after,
        template,
    } = *spec;
    let compressed_size: u64 = data.iter().map(|d| d.len() as u64).sum();
    let compressed_size = if data.is_empty() && method == METHOD_STORED {
        uncompressed_size
    } else {
        compressed_size
    };
    let zip64 = compressed_size >= U32_MAX || uncompressed_size >= U32_MAX;
    let mut extra = Vec::new();
    if zip64 {
        extra.extend_from_slice(&ZIP64_EXTRA.to_le_bytes());
        extra.extend_from_slice(&16u16.to_le_bytes());
        extra.extend_from_slice(&uncompressed_size.to_le_bytes());
        extra.extend_from_slice(&compressed_size.to_le_bytes());
    }
    if let Some(h) = align_after {
        let base = header_offset + 30 + name.len() as u64 + extra.len() as u64 + 6 + h;
        let pad = (DATA_ALIGN - base % DATA_ALIGN) % DATA_ALIGN;
        extra.extend_from_slice(&ALIGN_EXTRA.to_le_bytes());
        extra.extend_from_slice(&(2 + pad as u16).to_le_bytes());
        extra.extend_from_slice(&(DATA_ALIGN as u16).to_le_bytes());
        extra.resize(extra.len() + pad as usize, 0);
    }
    if 30 + name.len() + extra.len() > usize::from(u16::MAX) {
        return Err(ErrorKind::InvalidInput(format!("entry name {name:?} is too long")).into());
    }
    let mut h = Vec::with_capacity(30 + name.len() + extra.len());
    h.extend_from_slice(&SIG_LOCAL.to_le_bytes());
    h.extend_from_slice(&(if zip64 { 45u16 } else { 20u16 }).to_le_bytes());
    h.extend_from_slice(&FLAG_UTF8.to_le_bytes());
    h.extend_from_slice(&method.to_le_bytes());
    let (t, d) = template.map_or((dos_time, dos_date), |e| (e.dos_time, e.dos_date));
    h.extend_from_slice(&t.to_le_bytes());
    h.extend_from_slice(&d.to_le_bytes());
    h.extend_from_slice(&crc32.to_le_bytes());
    let (c32, u32_) = if zip64 {
        (U32_MAX as u32, U32_MAX as u32)
    } else {
        (compressed_size as u32, uncompressed_size as u32)
    };
    h.extend_from_slice(&c32.to_le_bytes());
    h.extend_from_slice(&u32_.to_le_bytes());
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    h.extend_from_slice(&extra);
    let entry = ZipEntry {
        name: name.into(),
        method,
        flags: FLAG_UTF8,
        crc32,
        compressed_size,
        uncompressed_size,
        header_offset,
        data_offset: header_offset + h.len() as u64,
        descriptor_len: 0,
        dos_time: t,
        dos_date: d,
        version_made_by: template.map_or(0x031e, |e| e.version_made_by),
        external_attrs: template.map_or(0o100644 << 16, |e| e.external_attrs),
        internal_attrs: template.map_or(0, |e| e.internal_attrs),
        rare: template.and_then(|e| e.rare.clone()),
        read_head: None,
        unchecked_until: None,
    };
    Ok((h, entry))
}

fn write_central(buf: &mut Vec<u8>, e: &ZipEntry) {
    let mut z64 = Vec::new();
    let usize_ = if e.uncompressed_size >= U32_MAX {
        z64.extend_from_slice(&e.uncompressed_size.to_le_bytes());
        U32_MAX as u32
    } else {
        e.uncompressed_size as u32
    };
    let csize = if e.compressed_size >= U32_MAX {
        z64.extend_from_slice(&e.compressed_size.to_le_bytes());
        U32_MAX as u32
    } else {
        e.compressed_size as u32
    };
    let offset = if e.header_offset >= U32_MAX {
        z64.extend_from_slice(&e.header_offset.to_le_bytes());
        U32_MAX as u32
    } else {
        e.header_offset as u32
    };
    let mut extra = Vec::new();
    if !z64.is_empty() {
        extra.extend_from_slice(&ZIP64_EXTRA.to_le_bytes());
        extra.extend_from_slice(&(z64.len() as u16).to_le_bytes());
        extra.extend_from_slice(&z64);
    }
    let room = 0xffff - extra.len();
    if e.cd_extra().len() <= room {
        extra.extend_from_slice(e.cd_extra());
    }
    let needed: u16 = if z64.is_empty() { 20 } else { 45 };
    buf.extend_from_slice(&SIG_CENTRAL.to_le_bytes());
    buf.extend_from_slice(
        &(e.version_made_by & 0xff00 | (e.version_made_by & 0xff).max(needed)).to_le_bytes(),
    );
    buf.extend_from_slice(&needed.to_le_bytes());
    buf.extend_from_slice(&e.flags.to_le_bytes());
    buf.extend_from_slice(&e.method.to_le_bytes());
    buf.extend_from_slice(&e.dos_time.to_le_bytes());
    buf.extend_from_slice(&e.dos_date.to_le_bytes());
    buf.extend_from_slice(&e.crc32.to_le_bytes());
    buf.extend_from_slice(&csize.to_le_bytes());
    buf.extend_from_slice(&usize_.to_le_bytes());
    buf.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(extra.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(e.comment().len().min(0xffff) as u16).to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes());
    buf.extend_from_slice(&e.internal_attrs.to_le_bytes());
    buf.extend_from_slice(&e.external_attrs.to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(e.name.as_bytes());
    buf.extend_from_slice(&extra);
    buf.extend_from_slice(&e.comment()[..e.comment().len().min(0xffff)]);
}
