//! Shards that split a dimension past the first: a box (one range per dimension) of a
//! tensor, whose bytes are not one contiguous range of the tensor's data but a run per
//! row of the box (tensor.slice's [`SliceLayout`] says where).
//!
//! Three things a box needs that a row range gets for free:
//! - **The entry's CRC-32 without reading the entry.** CRC-32 is affine over GF(2): for
//!   messages `A` and `B` of one length `L`, `crc(A ^ B) = crc(A) ^ crc(B) ^ crc(0^L)`.
//!   So each rank computes the CRC of the tensor's data with its own bytes in place and
//!   zeros everywhere else ([`positioned_crc`]: its runs, with the CRCs of the zero gaps
//!   between them combined in, `crc32fast`'s zlib combine), and the committing rank XORs
//!   the ranks' CRCs ([`xor_parts`]) — no byte read again.
//! - **A tiling check**: boxes that overlap or leave elements unwritten are found by
//!   [`check_tiling`] (at commit, and by `verify` on shards.txt).
//! - **A digest**: the SHA-256 of a box is that of its bytes in row-major order of the
//!   box (the rank's local array as given), gathered run by run.

use crate::tensor::DType;
use crate::tensor::slice::SliceLayout;
use std::collections::HashMap;
use std::ops::Range;

/// CRC-32 of `n` zero bytes, in O(log n) combines.
pub(crate) fn zeros_crc(n: u64) -> u32 {
    let mut acc = crc32fast::Hasher::new();
    // `pow` is the CRC of 2^i zero bytes (its length tracked by the hasher).
    let mut pow = crc32fast::Hasher::new();
    pow.update(&[0u8]);
    let mut rest = n;
    while rest > 0 {
        if rest & 1 == 1 {
            acc.combine(&pow);
        }
        rest >>= 1;
        if rest > 0 {
            let same = pow.clone();
            pow.combine(&same);
        }
    }
    acc.finalize()
}

/// Appends `n` zero bytes to `h` (their CRC from `cache`, computed once per length).
fn append_zeros(h: &mut crc32fast::Hasher, n: u64, cache: &mut HashMap<u64, u32>) {
    if n == 0 {
        return;
    }
    let crc = *cache.entry(n).or_insert_with(|| zeros_crc(n));
    h.combine(&crc32fast::Hasher::new_with_initial_len(crc, n));
}

/// CRC-32 of a tensor's `total` data bytes with the box of `layout` holding `data` (the
/// box's bytes in its row-major order) and every other byte zero.
pub(crate) fn positioned_crc(layout: &SliceLayout, data: &[u8], total: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    let mut cache = HashMap::new();
    let mut pos = 0u64;
    let mut from = 0usize;
    let run = layout.run_len as usize;
    layout.for_each_run(|at| {
        append_zeros(&mut h, at - pos, &mut cache);
        h.update(&data[from..from + run]);
        from += run;
        pos = at + layout.run_len;
    });
    append_zeros(&mut h, total - pos, &mut cache);
    h.finalize()
}

/// The positioned CRC (see [`positioned_crc`]) of `len` bytes at `offset` whose own
/// CRC-32 is `crc`, in data of `total` bytes: a row range's, from what its rank reported.
pub(crate) fn positioned_run_crc(crc: u32, offset: u64, len: u64, total: u64) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial_len(zeros_crc(offset), offset);
    h.combine(&crc32fast::Hasher::new_with_initial_len(crc, len));
    let tail = total - offset - len;
    h.combine(&crc32fast::Hasher::new_with_initial_len(
        zeros_crc(tail),
        tail,
    ));
    h.finalize()
}

/// The CRC-32 of `total` bytes that are the XOR of parts whose positioned CRCs are
/// `parts` (parts that do not overlap: their XOR is their union).
pub(crate) fn xor_parts(parts: impl IntoIterator<Item = u32>, total: u64) -> u32 {
    let mut acc = 0u32;
    let mut n = 0u64;
    for p in parts {
        acc ^= p;
        n += 1;
    }
    // crc(A ^ B) = crc(A) ^ crc(B) ^ crc(0^L): one crc(0^L) per part after the first.
    if n == 0 {
        return zeros_crc(total);
    }
    if (n - 1) % 2 == 1 {
        acc ^= zeros_crc(total);
    }
    acc
}

/// Calls `f` with each run of the box of `layout` as (offset in the tensor's data, the
/// run's bytes of `data`, the box's bytes in row-major order).
pub(crate) fn for_each_run<'d>(
    layout: &SliceLayout,
    data: &'d [u8],
    mut f: impl FnMut(u64, &'d [u8]),
) {
    let run = layout.run_len as usize;
    let mut from = 0usize;
    layout.for_each_run(|at| {
        f(at, &data[from..from + run]);
        from += run;
    });
}

/// Why boxes do not tile a tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tiling {
    /// Boxes `a` and `b` (indices into the list checked) share element `at`.
    Overlap { a: usize, b: usize, at: Vec<u64> },
    /// The boxes cover `covered` of the tensor's `total` elements.
    Gap { covered: u128, total: u128 },
    /// Checking `boxes` boxes for overlaps would take more than [`MAX_TILING_PAIRS`]
    /// comparisons (boxes that share rows are compared pairwise).
    TooMany { boxes: usize },
}

/// Most pairs of boxes [`check_tiling`] compares for one tensor: every legitimate cut
/// stays far below it (8,192 column shards of one tensor are 33.5 million pairs); a
/// hostile list of millions of one-column boxes would take hours.
pub(crate) const MAX_TILING_PAIRS: u64 = 1 << 26;

/// Whether boxes `a` and `b` share an element.
fn meet(a: &[Range<u64>], b: &[Range<u64>]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.start.max(y.start) < x.end.min(y.end))
}

/// Elements of a box.
fn volume(b: &[Range<u64>]) -> u128 {
    b.iter().map(|r| u128::from(r.end - r.start)).product()
}

/// The first element boxes `a` and `b` share, if any.
pub(crate) fn first_common(a: &[Range<u64>], b: &[Range<u64>]) -> Option<Vec<u64>> {
    let mut at = Vec::with_capacity(a.len());
    for (x, y) in a.iter().zip(b) {
        let (s, e) = (x.start.max(y.start), x.end.min(y.end));
        if s >= e {
            return None;
        }
        at.push(s);
    }
    Some(at)
}

/// Checks that `boxes` (each one range per dimension of `dims`, inside it) tile the
/// tensor exactly: no element in two boxes, none in no box. Empty boxes are ignored.
/// A sweep along the first dimension compares only boxes whose rows meet.
pub(crate) fn check_tiling(dims: &[u64], boxes: &[Vec<Range<u64>>]) -> Result<(), Tiling> {
    let total: u128 = dims.iter().map(|&d| u128::from(d)).product();
    let mut order: Vec<usize> = (0..boxes.len())
        .filter(|&i| volume(&boxes[i]) > 0)
        .collect();
    if dims.is_empty() {
        // A scalar: one element, boxes of no ranges.
        return match order.as_slice() {
            [] => Err(Tiling::Gap { covered: 0, total }),
            [_] => Ok(()),
            [a, b, ..] => Err(Tiling::Overlap {
                a: *a,
                b: *b,
                at: Vec::new(),
            }),
        };
    }
    order.sort_by_key(|&i| boxes[i][0].start);
    // The pairs the sweep below compares, counted first (boxes whose rows are still open
    // when each box starts): the work is bounded before it is done.
    let mut open = std::collections::BinaryHeap::new();
    let mut pairs = 0u64;
    for &i in &order {
        while open
            .peek()
            .is_some_and(|&std::cmp::Reverse(end)| end <= boxes[i][0].start)
        {
            open.pop();
        }
        pairs += open.len() as u64;
        if pairs > MAX_TILING_PAIRS {
            return Err(Tiling::TooMany { boxes: order.len() });
        }
        open.push(std::cmp::Reverse(boxes[i][0].end));
    }
    let mut active: Vec<usize> = Vec::new();
    let mut covered = 0u128;
    for &i in &order {
        let b = &boxes[i];
        active.retain(|&j| boxes[j][0].end > b[0].start);
        if let Some(&j) = active.iter().find(|&&j| meet(&boxes[j], b)) {
            let at = first_common(&boxes[j], b).unwrap_or_default();
            return Err(Tiling::Overlap { a: j, b: i, at });
        }
        active.push(i);
        covered += volume(b);
    }
    if covered != total {
        return Err(Tiling::Gap { covered, total });
    }
    Ok(())
}

/// The layout of box `b` of a `dtype` tensor of `dims` (inside it: checked by callers).
pub(crate) fn layout(
    dtype: DType,
    dims: &[u64],
    b: &[Range<u64>],
    what: &str,
) -> crate::Result<SliceLayout> {
    SliceLayout::new(dtype, dims, b, what)
}

/// `"0:4,2:6"`: a box as shards.txt and errors write it.
pub(crate) fn render(b: &[Range<u64>]) -> String {
    let parts: Vec<String> = b.iter().map(|r| format!("{}:{}", r.start, r.end)).collect();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc(b: &[u8]) -> u32 {
        crc32fast::hash(b)
    }

    #[test]
    fn zeros_crc_is_the_crc_of_zero_bytes() {
        for n in [0u64, 1, 2, 3, 7, 64, 1000, 4097, 65_537] {
            assert_eq!(zeros_crc(n), crc(&vec![0u8; n as usize]), "{n}");
        }
    }

    /// Every way of cutting a 3-D tensor into boxes: the positioned CRCs XOR to the CRC
    /// of the whole data, and the boxes tile it.
    #[test]
    fn positioned_crcs_of_boxes_combine_to_the_crc_of_the_tensor() {
        let dims = [4u64, 6, 5];
        let data: Vec<u8> = (0..4 * 6 * 5 * 2).map(|i| (i * 7 + 3) as u8).collect();
        let total = data.len() as u64;
        let cuts: [&[Vec<Range<u64>>]; 4] = [
            &[vec![0..4, 0..3, 0..5], vec![0..4, 3..6, 0..5]],
            &[
                vec![0..2, 0..6, 0..2],
                vec![0..2, 0..6, 2..5],
                vec![2..4, 0..6, 0..5],
            ],
            &[vec![0..4, 0..6, 0..5]],
            &[
                vec![0..1, 0..6, 0..5],
                vec![1..4, 0..1, 0..5],
                vec![1..4, 1..6, 0..4],
                vec![1..4, 1..6, 4..5],
            ],
        ];
        for boxes in cuts {
            assert_eq!(check_tiling(&dims, boxes), Ok(()));
            let parts = boxes.iter().map(|b| {
                let l = layout(DType::Fp16, &dims, b, "t").unwrap();
                let mine = l.gather(&data, 0);
                positioned_crc(&l, &mine, total)
            });
            assert_eq!(xor_parts(parts, total), crc(&data), "{boxes:?}");
        }
        // A row range's positioned CRC from its own CRC.
        let (o, n) = (60u64, 60u64);
        let l = layout(DType::Fp16, &dims, &[1..2, 0..6, 0..5], "t").unwrap();
        let run = &data[o as usize..(o + n) as usize];
        assert_eq!(
            positioned_run_crc(crc(run), o, n, total),
            positioned_crc(&l, run, total)
        );
    }

    #[test]
    fn overlaps_and_gaps_are_found_with_the_boxes_named() {
        let dims = [4u64, 6];
        let over = [vec![0..4, 0..4], vec![2..3, 3..6], vec![0..4, 4..6]];
        assert_eq!(
            check_tiling(&dims, &over),
            Err(Tiling::Overlap {
                a: 0,
                b: 1,
                at: vec![2, 3]
            })
        );
        let gap = [vec![0..4, 0..3], vec![0..3, 3..6]];
        assert_eq!(
            check_tiling(&dims, &gap),
            Err(Tiling::Gap {
                covered: 21,
                total: 24
            })
        );
        // Empty boxes take no part.
        let ok = [vec![0..4, 0..3], vec![2..2, 0..6], vec![0..4, 3..6]];
        assert_eq!(check_tiling(&dims, &ok), Ok(()));
        assert_eq!(render(&ok[0]), "0:4,0:3");
    }

    /// Column shards are compared pairwise (they share every row): 4,096 of them are
    /// checked, a hostile list whose pairs pass the bound is refused before any
    /// comparison, and boxes that share no rows are never compared.
    #[test]
    fn the_pairs_compared_are_bounded_before_the_work() {
        let cols =
            |n: u64| -> Vec<Vec<Range<u64>>> { (0..n).map(|c| vec![0..2, c..c + 1]).collect() };
        assert_eq!(check_tiling(&[2, 4096], &cols(4096)), Ok(()));
        let n = 20_000u64;
        assert_eq!(
            check_tiling(&[2, n], &cols(n)),
            Err(Tiling::TooMany { boxes: n as usize })
        );
        let rows: Vec<Vec<Range<u64>>> = (0..1_000_000).map(|r| vec![r..r + 1, 0..3]).collect();
        assert_eq!(check_tiling(&[1_000_000, 3], &rows), Ok(()));
    }
}
