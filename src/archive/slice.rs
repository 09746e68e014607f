//! Slice reads ([`Archive::tensor_slice`], [`Tag::param_slice`](super::Tag::param_slice)):
//! the rows or the box of a tensor without reading the rest. Local stored entries are
//! sliced in the map ([`TensorView::slice`](crate::TensorView::slice): rows are a view,
//! a box is gathered from the runs that hold it); remote stored entries fetch only the
//! bytes of the box after the record header; deflated entries are inflated whole (a
//! deflate stream cannot be entered in the middle), their CRC-32 checked, then sliced.

use super::container::{METHOD_STORED, ZipEntry};
use super::reader::{Archive, Backing, TensorData, TensorLocation};
use super::source::Ranged;
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::Tensor;
use crate::tensor::slice::{MAX_RANGED_RUNS, SliceLayout};
use std::ops::Range;

impl Archive {
    /// [`Self::tensor_slice`], naming the tensor `what` in errors.
    pub(super) fn slice_at(
        &self,
        loc: &TensorLocation,
        ranges: &[Range<u64>],
        what: &str,
    ) -> Result<TensorData<'_>> {
        let located = |e: Error| self.located(e.in_entry(loc.entry.clone()));
        if let Backing::Ranged(r) = &self.backing
            && let Some(e) = self.location_entry(loc)
            && e.method == METHOD_STORED
        {
            return self.ranged_slice(r, e, loc, ranges, what).map_err(located);
        }
        match self.tensor(loc)? {
            TensorData::Mapped(v) => v.slice_of(ranges, what).map_err(located),
            TensorData::Owned(t) => match t.view().slice_of(ranges, what).map_err(located)? {
                TensorData::Mapped(v) => Ok(TensorData::Owned(v.to_owned())),
                TensorData::Owned(t) => Ok(TensorData::Owned(t)),
            },
        }
    }

    /// The box of stored entry `e` of a ranged archive, fetching its runs.
    fn ranged_slice(
        &self,
        r: &Ranged,
        e: &ZipEntry,
        loc: &TensorLocation,
        ranges: &[Range<u64>],
        what: &str,
    ) -> Result<TensorData<'_>> {
        let head = self
            .shared_heads(&[loc])?
            .pop()
            .ok_or_else(|| Error::new(ErrorKind::MissingEntry(loc.entry.to_string())))?;
        let layout = SliceLayout::new(head.dtype, &head.dims, ranges, what)?;
        let mut bytes = Vec::new();
        if layout.runs > 0 {
            // The header decode checked header and data fill the entry, and the local
            // header check that the entry lies in the object: every run lies inside it.
            let data = r.data_start(e, self.dir.cd_offset)? + head.header_len;
            let short = |got: usize, want: u64| {
                Error::new(ErrorKind::Remote(format!(
                    "a range read returned {got} bytes, {want} were asked for"
                )))
                .at_offset(data)
            };
            if layout.runs <= MAX_RANGED_RUNS {
                let mut wanted = Vec::with_capacity(layout.runs as usize);
                layout.for_each_run(|at| wanted.push(data + at..data + at + layout.run_len));
                bytes.reserve_exact(layout.len() as usize);
                for got in r.read(&wanted)? {
                    if got.len() as u64 != layout.run_len {
                        return Err(short(got.len(), layout.run_len));
                    }
                    bytes.extend_from_slice(&got);
                }
            } else {
                let cover = layout.covering();
                let got = r
                    .read(std::slice::from_ref(
                        &(data + cover.start..data + cover.end),
                    ))?
                    .pop()
                    .unwrap_or_default();
                if got.len() as u64 != cover.end - cover.start {
                    return Err(short(got.len(), cover.end - cover.start));
                }
                bytes = layout.gather(&got, cover.start);
            }
        }
        Tensor::from_bytes(head.dtype, layout.dims, bytes).map(TensorData::Owned)
    }
}
