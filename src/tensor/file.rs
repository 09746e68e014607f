//! Tensor files on disk, memory-mapped: a standalone LoDTensor file or a combined
//! `.pdiparams`, decoded without copying the data.

use super::codec::{self, Record};
use super::view::Tensor;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A memory-mapped tensor file: [`decode_tensor`](super::decode_tensor) or
/// [`decode_combined`](super::decode_combined) of its [`bytes`](Self::bytes) borrow
/// from the map, so reading a 256 MiB `.pdiparams` costs its headers, not its data
/// (docs/BENCHMARKS-history.md, P6); [`records_owned`](Self::records_owned) copies the
/// records out.
#[derive(Debug)]
pub struct TensorFile {
    path: PathBuf,
    file: std::fs::File,
    map: Option<memmap2::Mmap>,
}

impl TensorFile {
    /// Maps the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<TensorFile> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| Error::from(e).in_file(path))?;
        let meta = file.metadata().map_err(|e| Error::from(e).in_file(path))?;
        if meta.is_dir() {
            return Err(Error::from(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory, not a tensor file",
            ))
            .in_file(path));
        }
        let len = meta.len();
        // An empty file cannot be mapped; it holds no records.
        let map = if len == 0 {
            None
        } else {
            // Safety: the map is read-only and lives in this struct with the views that
            // borrow it. Tensor files are written whole and then renamed or left alone;
            // another program truncating the file while it is mapped is outside what this
            // library can guard against (reads could then fault).
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::from(e).in_file(path))?)
        };
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            map,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Every record, as a combined file (`save_combine`, `.pdiparams`) holds them; an
    /// error names the file.
    fn records(&self) -> Result<Vec<Record<'_>>> {
        codec::decode_combined(self.bytes()).map_err(|e| e.in_file(&self.path))
    }

    /// Every record copied into owned tensors. The data is read from the file (`pread`)
    /// straight into each tensor's buffer, so the bytes are copied once and the mapped
    /// file pages are never touched (only the headers are): resident memory is the tensor
    /// bytes, not twice that. Data of 2 MiB or more is read in page-aligned pieces on up
    /// to 4 threads (one per core), which fault the new memory in parallel.
    pub fn records_owned(&self) -> Result<Vec<Tensor>> {
        let base = self.bytes().as_ptr() as usize;
        self.records()?
            .iter()
            .map(|r| {
                let v = &r.tensor;
                let offset = (v.data().as_ptr() as usize - base) as u64;
                let data = self
                    .read_at(offset, v.data().len())
                    .map_err(|e| e.in_file(&self.path).in_record(r.index).at_offset(offset))?;
                let t = Tensor::from_bytes(v.dtype(), v.dims().to_vec(), data)?;
                if v.lod().is_empty() {
                    Ok(t)
                } else {
                    t.with_lod(v.lod().clone())
                }
            })
            .collect()
    }

    /// Large data is read in page-aligned pieces on up to 4 threads, which fault the new
    /// allocation in parallel (as `Tag::tensor_owned` does); a failed piece's error
    /// names its own offset.
    #[cfg(unix)]
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut data = vec![0u8; len];
        crate::archive::read_exact_at_split(&self.file, &mut data, offset)
            .map_err(|(e, at)| Error::from(e).at_offset(at))?;
        Ok(data)
    }

    #[cfg(not(unix))]
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let start = offset as usize;
        Ok(self.bytes()[start..start + len].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn maps_and_decodes_without_copying() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pdiparams");
        let t = Tensor::from_slice(vec![3], &[1.0f32, 2.0, 3.0]).unwrap();
        let mut bytes = Vec::new();
        codec::encode_combined([&t.view(), &t.view()], &mut bytes).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let recs = f.records().unwrap();
        assert_eq!(recs.len(), 2);
        let data = recs[1].tensor.data();
        let range = f.bytes().as_ptr_range();
        assert!(range.contains(&data.as_ptr()), "data borrows from the map");
        assert!(
            codec::decode_tensor(f.bytes()).is_err(),
            "two records are not a standalone file"
        );
        let owned = f.records_owned().unwrap();
        assert_eq!(owned.len(), 2);
        assert_eq!(owned[1], t);
        std::fs::write(&path, b"").unwrap();
        assert!(
            TensorFile::open(&path)
                .unwrap()
                .records()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn large_records_read_in_pieces_and_a_short_file_names_the_record_and_offset() {
        // Records over the split threshold (2 MiB) are read on several threads.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.pdiparams");
        let a: Vec<f32> = (0..(3 << 18) + 7).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..(5 << 18) + 3).map(|i| -(i as f32)).collect();
        let ta = Tensor::from_slice(vec![a.len() as u64], &a).unwrap();
        let tb = Tensor::from_slice(vec![b.len() as u64], &b)
            .unwrap()
            .with_lod(vec![vec![0, 5, b.len() as u64]])
            .unwrap();
        let mut bytes = Vec::new();
        codec::encode_combined([&ta.view(), &tb.view()], &mut bytes).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let f = TensorFile::open(&path).unwrap();
        let owned = f.records_owned().unwrap();
        assert_eq!(owned, vec![ta.clone(), tb.clone()]);

        // The file loses its last MiB after it was mapped: the headers still decode from
        // the map, and the read of record 1's data fails where the file ends.
        let recs = f.records().unwrap();
        let base = f.bytes().as_ptr() as usize;
        let start = (recs[1].tensor.data().as_ptr() as usize - base) as u64;
        let cut = bytes.len() as u64 - (1 << 20);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        drop(recs);
        let err = f.records_owned().unwrap_err();
        let loc = err.location();
        assert_eq!(loc.record, Some(1), "{err}");
        let at = loc.offset.expect("an offset");
        assert!(at >= start && at < cut, "{at} not in {start}..{cut}: {err}");
        assert!(err.to_string().contains("big.pdiparams"), "{err}");
    }
}
