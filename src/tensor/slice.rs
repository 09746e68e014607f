//! Where a box of a tensor (one range per dimension) lies in its row-major data: the
//! checked ranges, the shape of the result and the contiguous byte runs that hold it,
//! for [`TensorView::slice`](super::TensorView::slice) and the archive's slice reads.

use super::dtype::DType;
use crate::error::{ErrorKind, Result};
use std::ops::Range;

/// Most runs a ranged (remote) slice asks for one by one; a box of more runs is read as
/// the one range that covers them (the store merges near runs anyway: object_store
/// coalesces ranges less than 1 MiB apart into one request).
pub(crate) const MAX_RANGED_RUNS: u64 = 4096;

/// A box of a tensor's data, checked against its dims: the result's dims and where its
/// bytes lie, as `runs` runs of `run_len` bytes each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceLayout {
    /// The result's dims: each range's length (a dimension without a range: all of it).
    pub(crate) dims: Vec<u64>,
    /// Bytes of each contiguous run.
    pub(crate) run_len: u64,
    /// Number of runs (0 when the box is empty).
    pub(crate) runs: u64,
    /// Offset of the first run in the data.
    base: u64,
    /// The dimensions before the last one the box cuts: (range length, byte stride).
    /// Runs are visited in row-major order of these.
    outer: Vec<(u64, u64)>,
}

impl SliceLayout {
    /// The layout of `ranges` (one per leading dimension; the dimensions after the last
    /// range are taken whole) of a `dtype` tensor of `dims`, whose byte count the caller
    /// has checked fits (a decoded or built tensor's does). `what` names the tensor in
    /// errors (`param "fc.w"`).
    pub(crate) fn new(
        dtype: DType,
        dims: &[u64],
        ranges: &[Range<u64>],
        what: &str,
    ) -> Result<SliceLayout> {
        if ranges.len() > dims.len() {
            return Err(ErrorKind::InvalidInput(format!(
                "slice of {what}: {} ranges for a tensor of {} dimensions (dims {dims:?})",
                ranges.len(),
                dims.len()
            ))
            .into());
        }
        for (d, (r, &n)) in ranges.iter().zip(dims).enumerate() {
            if r.start > r.end {
                return Err(ErrorKind::InvalidInput(format!(
                    "slice of {what}: range {}..{} of dimension {d} ends before it starts",
                    r.start, r.end
                ))
                .into());
            }
            if r.end > n {
                return Err(ErrorKind::InvalidInput(format!(
                    "slice of {what}: range {}..{} of dimension {d} is out of bounds: the \
                     dimension has {n} (dims {dims:?})",
                    r.start, r.end
                ))
                .into());
            }
        }
        let elem = dtype.size() as u64;
        // Byte strides; products of trailing dims of a tensor whose byte count fits u64
        // (a zero dim makes the data empty, and the strides are not used then).
        let mut strides = vec![elem; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1].saturating_mul(dims[d + 1]);
        }
        let range = |d: usize| ranges.get(d).cloned().unwrap_or(0..dims[d]);
        let out: Vec<u64> = (0..dims.len())
            .map(|d| range(d).end - range(d).start)
            .collect();
        if out.contains(&0) {
            return Ok(SliceLayout {
                dims: out,
                run_len: 0,
                runs: 0,
                base: 0,
                outer: Vec::new(),
            });
        }
        // The last dimension the box cuts: every later one is whole, so each run is that
        // dimension's range times the rows under it.
        let Some(k) = (0..ranges.len()).rev().find(|&d| range(d) != (0..dims[d])) else {
            let whole = dims.iter().fold(elem, |acc, &n| acc.saturating_mul(n));
            return Ok(SliceLayout {
                dims: out,
                run_len: whole,
                runs: 1,
                base: 0,
                outer: Vec::new(),
            });
        };
        let base = (0..=k).map(|d| range(d).start * strides[d]).sum();
        let outer: Vec<(u64, u64)> = (0..k).map(|d| (out[d], strides[d])).collect();
        Ok(SliceLayout {
            run_len: out[k] * strides[k],
            runs: outer.iter().map(|&(n, _)| n).product(),
            dims: out,
            base,
            outer,
        })
    }

    /// Bytes of the result.
    pub(crate) fn len(&self) -> u64 {
        self.run_len * self.runs
    }

    /// The byte range of the data the result is, when it is one run (or empty).
    pub(crate) fn contiguous(&self) -> Option<Range<u64>> {
        (self.runs <= 1).then(|| self.base..self.base + self.len())
    }

    /// The byte range from the first run's start to the last run's end.
    pub(crate) fn covering(&self) -> Range<u64> {
        let last: u64 = self.outer.iter().map(|&(n, s)| (n - 1) * s).sum();
        if self.runs == 0 {
            return self.base..self.base;
        }
        self.base..self.base + last + self.run_len
    }

    /// Calls `f` with each run's offset in the data, in row-major order.
    pub(crate) fn for_each_run(&self, mut f: impl FnMut(u64)) {
        if self.runs == 0 {
            return;
        }
        let mut index = vec![0u64; self.outer.len()];
        let mut at = self.base;
        loop {
            f(at);
            // Odometer over the outer dimensions, the last fastest.
            let mut d = self.outer.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                let (n, stride) = self.outer[d];
                index[d] += 1;
                at += stride;
                if index[d] < n {
                    break;
                }
                at -= n * stride;
                index[d] = 0;
            }
        }
    }

    /// The result gathered from `data` (the whole tensor's bytes, or the bytes from
    /// `offset` on that hold the box): each run copied once.
    pub(crate) fn gather(&self, data: &[u8], offset: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() as usize);
        self.for_each_run(|at| {
            let from = (at - offset) as usize;
            out.extend_from_slice(&data[from..from + self.run_len as usize]);
        });
        out
    }
}

#[cfg(test)]
// `&[a..b]` is one range (rows a..b), as slices are asked for.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    /// The box read element by element: the reference the layout must agree with.
    fn naive(dims: &[u64], ranges: &[Range<u64>], values: &[u32]) -> Vec<u32> {
        let full: Vec<Range<u64>> = (0..dims.len())
            .map(|d| ranges.get(d).cloned().unwrap_or(0..dims[d]))
            .collect();
        let mut out = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let mut rest = i as u64;
            let mut inside = true;
            for d in (0..dims.len()).rev() {
                let c = rest % dims[d];
                rest /= dims[d];
                inside &= full[d].contains(&c);
            }
            if inside {
                out.push(*v);
            }
        }
        out
    }

    #[test]
    fn every_box_of_small_tensors_matches_the_naive_reading() {
        let shapes: [&[u64]; 5] = [&[], &[5], &[3, 4], &[2, 3, 4], &[2, 1, 3, 2]];
        for dims in shapes {
            let n: u64 = dims.iter().product();
            let values: Vec<u32> = (0..n as u32).collect();
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let per_dim: Vec<Vec<Range<u64>>> = dims
                .iter()
                .map(|&n| (0..=n).flat_map(|a| (a..=n).map(move |b| a..b)).collect())
                .collect();
            // Every box of every prefix of the dimensions (the rest taken whole).
            let mut boxes: Vec<Vec<Range<u64>>> = Vec::new();
            for p in 0..=dims.len() {
                let mut level: Vec<Vec<Range<u64>>> = vec![vec![]];
                for options in &per_dim[..p] {
                    level = level
                        .iter()
                        .flat_map(|b| {
                            options.iter().map(move |r| {
                                let mut b = b.clone();
                                b.push(r.clone());
                                b
                            })
                        })
                        .collect();
                }
                boxes.extend(level);
            }
            for b in &boxes {
                let l = SliceLayout::new(DType::Uint32, dims, b, "t").unwrap();
                let got: Vec<u32> = l
                    .gather(&bytes, 0)
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let want = naive(dims, b, &values);
                assert_eq!(got, want, "dims {dims:?} box {b:?}");
                assert_eq!(l.dims.iter().product::<u64>(), want.len() as u64);
                let cover = l.covering();
                let mut runs = 0;
                l.for_each_run(|at| {
                    runs += 1;
                    assert!(at >= cover.start && at + l.run_len <= cover.end);
                });
                assert_eq!(runs, l.runs);
                if let Some(r) = l.contiguous() {
                    assert_eq!(
                        &bytes[r.start as usize..r.end as usize],
                        l.gather(&bytes, 0)
                    );
                }
            }
        }
    }

    #[test]
    fn leading_rows_and_single_index_prefixes_are_one_run() {
        let l = SliceLayout::new(DType::Fp32, &[10, 3, 2], &[4..7], "t").unwrap();
        assert_eq!(l.contiguous(), Some(4 * 24..7 * 24));
        assert_eq!(l.dims, [3, 3, 2]);
        let l = SliceLayout::new(DType::Fp32, &[10, 3, 2], &[4..5, 1..3], "t").unwrap();
        assert_eq!(l.contiguous(), Some(4 * 24 + 8..5 * 24));
        let l = SliceLayout::new(DType::Fp32, &[10, 3, 2], &[4..6, 1..3], "t").unwrap();
        assert_eq!((l.contiguous(), l.runs, l.run_len), (None, 2, 16));
        assert_eq!(l.covering(), 4 * 24 + 8..6 * 24);
    }

    #[test]
    fn bad_ranges_are_refused_with_the_dimension_and_the_tensor() {
        let msg = |dims: &[u64], r: &[Range<u64>]| {
            let e = SliceLayout::new(DType::Int8, dims, r, "param \"w\"").unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)), "{e}");
            e.to_string()
        };
        let m = msg(&[4, 3], &[0..4, 1..5]);
        assert!(
            m.contains("param \"w\"") && m.contains("dimension 1"),
            "{m}"
        );
        assert!(m.contains("1..5") && m.contains("has 3"), "{m}");
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = [3..1];
        let m = msg(&[4, 3], &backwards);
        assert!(
            m.contains("dimension 0") && m.contains("ends before"),
            "{m}"
        );
        let m = msg(&[4], &[0..1, 0..1]);
        assert!(m.contains("2 ranges") && m.contains("1 dimensions"), "{m}");
        let m = msg(&[], &[0..1]);
        assert!(m.contains("0 dimensions"), "{m}");
    }
}
