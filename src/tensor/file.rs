//! Tensor files on disk, memory-mapped: a standalone LoDTensor file or a combined
//! `.pdiparams`, decoded without copying the data.

use super::codec::{self, Record};
use super::view::TensorView;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A memory-mapped tensor file. Decoding borrows from the map: reading a 256 MiB
/// `.pdiparams` costs its headers, not its data (docs/BENCHMARKS.md, P6).
#[derive(Debug)]
pub struct TensorFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl TensorFile {
    /// Maps the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<TensorFile> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| Error::from(e).in_file(path))?;
        let len = file
            .metadata()
            .map_err(|e| Error::from(e).in_file(path))?
            .len();
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
            map,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Every record, as a combined file (`save_combine`, `.pdiparams`) holds them.
    pub fn records(&self) -> Result<Vec<Record<'_>>> {
        codec::decode_combined(self.bytes()).map_err(|e| e.in_file(&self.path))
    }

    /// The one tensor of a standalone file (`save`); bytes after it are an error.
    pub fn tensor(&self) -> Result<TensorView<'_>> {
        codec::decode_tensor(self.bytes()).map_err(|e| e.in_file(&self.path))
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
        assert!(f.tensor().is_err(), "two records are not a standalone file");
        std::fs::write(&path, b"").unwrap();
        assert!(
            TensorFile::open(&path)
                .unwrap()
                .records()
                .unwrap()
                .is_empty()
        );
    }
}
