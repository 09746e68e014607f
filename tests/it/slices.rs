//! Slice reads (`Tag::param_slice`, `Archive::tensor_slice`, `TensorView::slice`): every
//! dtype and shape sliced equals the same part of the full tensor, locally (rows a view of
//! the map), from a deflated entry and remotely (rows one range request of only their
//! bytes, counted by the test server); bad ranges are refused with the parameter and the
//! dimension.
// `&[a..b]` is one range (rows a..b), as slices are asked for.
#![allow(clippy::single_range_in_vec_init)]

use modelzip::{Archive, ArchiveWriter, DType, ErrorKind, TagBuilder, Tensor, TensorData};
use std::ops::Range;
use std::path::Path;

/// Shapes sliced, with a zero dimension and a 0-D tensor among them.
const SHAPES: [&[u64]; 6] = [&[], &[7], &[5, 3], &[4, 3, 2], &[3, 0, 2], &[6, 1, 5]];

/// Boxes of `dims` to try: rows (empty, one, all), a row range then an inner range,
/// single-index prefixes, every dimension cut.
fn boxes(dims: &[u64]) -> Vec<Vec<Range<u64>>> {
    let mut out = vec![vec![]];
    let Some(&n) = dims.first() else {
        return out;
    };
    out.extend([vec![0..n], vec![0..0], vec![n / 2..n], vec![0..n.min(1)]]);
    if n >= 3 {
        out.push(vec![1..n - 1]);
    }
    if let Some(&m) = dims.get(1) {
        out.push(vec![0..n, m / 2..m]);
        out.push(vec![n / 2..n, 0..m.min(1)]);
        if n > 0 {
            out.push(vec![n - 1..n, m / 2..m]);
        }
    }
    if let Some(&k) = dims.get(2) {
        let m = dims[1];
        out.push(vec![0..n, 0..m, k / 2..k]);
        out.push(vec![n / 2..n, m / 2..m, 0..k.min(1)]);
    }
    out
}

/// A tensor of `dtype` and `dims` whose bytes are distinct-ish (their positions).
fn tensor(dtype: DType, dims: &[u64]) -> Tensor {
    let n = modelzip::tensor::data_len(dtype, dims).unwrap() as usize;
    let bytes = (0..n)
        .map(|i| {
            // BOOL holds 0 or 1 only.
            if dtype == DType::Bool {
                (i % 2) as u8
            } else {
                (i * 7 + i / 251) as u8
            }
        })
        .collect();
    Tensor::from_bytes(dtype, dims.to_vec(), bytes).unwrap()
}

/// Every dtype × shape as params `DTYPE_i` of tag "t".
fn every_dtype_and_shape(path: &Path) -> Vec<(String, Tensor)> {
    let mut all = Vec::new();
    let mut tag = TagBuilder::new("t");
    for dtype in DType::ALL {
        for (i, dims) in SHAPES.iter().enumerate() {
            let name = format!("{}_{i}", dtype.name());
            let t = tensor(dtype, dims);
            tag = tag.param(&name, t.clone());
            all.push((name, t));
        }
    }
    let mut w = ArchiveWriter::create(path).unwrap();
    w.add_tag(tag).unwrap();
    w.finish().unwrap();
    all
}

/// The part of `t` that `b` selects, element by element: the reference.
fn naive(t: &Tensor, b: &[Range<u64>]) -> Vec<u8> {
    let dims = t.dims();
    let size = t.dtype().size();
    let mut out = Vec::new();
    for (i, e) in t.data().chunks_exact(size).enumerate() {
        let mut rest = i as u64;
        let mut inside = true;
        for d in (0..dims.len()).rev() {
            let c = rest % dims[d];
            rest /= dims[d];
            inside &= b.get(d).is_none_or(|r| r.contains(&c));
        }
        if inside {
            out.extend_from_slice(e);
        }
    }
    out
}

fn expected_dims(dims: &[u64], b: &[Range<u64>]) -> Vec<u64> {
    (0..dims.len())
        .map(|d| b.get(d).map_or(dims[d], |r| r.end - r.start))
        .collect()
}

#[test]
fn every_dtype_and_shape_sliced_locally_equals_that_part_of_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.mz");
    let all = every_dtype_and_shape(&path);
    let a = Archive::open(&path).unwrap();
    let tag = a.tag("t").unwrap();
    let mut views = 0;
    for (name, t) in &all {
        let full = tag.param(name).unwrap();
        let range = full.view().data().as_ptr_range();
        for b in boxes(t.dims()) {
            let s = tag.param_slice(name, &b).unwrap();
            let v = s.view();
            assert_eq!(v.dtype(), t.dtype(), "{name} {b:?}");
            assert_eq!(v.dims(), expected_dims(t.dims(), &b), "{name} {b:?}");
            assert_eq!(v.data(), naive(t, &b), "{name} {b:?}");
            assert_eq!(s, t.view().slice(&b).unwrap(), "{name} {b:?}");
            // Rows (one run) are views of the map, inside the tensor's own bytes.
            let rows = b.len() <= 1 || (b.len() == 2 && b[0].end - b[0].start <= 1);
            if rows && !v.data().is_empty() {
                assert!(s.is_mapped(), "{name} {b:?}");
                let r = v.data().as_ptr_range();
                assert!(r.start >= range.start && r.end <= range.end, "{name} {b:?}");
                views += 1;
            }
        }
    }
    assert!(views > 200, "{views}");
}

#[test]
fn a_deflated_entry_is_inflated_whole_then_sliced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zip");
    let t = tensor(DType::Fp32, &[6, 4]);
    let mut rec = Vec::new();
    modelzip::tensor::encode_tensor(&t.view(), &mut rec).unwrap();
    let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let deflated = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    z.start_file("tags.txt", deflated).unwrap();
    std::io::Write::write_all(&mut z, b"z\n").unwrap();
    z.start_file("z/params.txt", deflated).unwrap();
    std::io::Write::write_all(&mut z, b"w 0\n").unwrap();
    z.start_file("z/params/0.lodtensor", deflated).unwrap();
    std::io::Write::write_all(&mut z, &rec).unwrap();
    z.finish().unwrap();
    let a = Archive::open(&path).unwrap();
    let tag = a.tag("z").unwrap();
    for b in boxes(t.dims()) {
        let s = tag.param_slice("w", &b).unwrap();
        assert!(matches!(s, TensorData::Owned(_)), "{b:?}");
        assert_eq!(s.view().data(), naive(&t, &b), "{b:?}");
    }
    let e = tag.param_slice("w", &[0..7]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)), "{e}");
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // 3..1: a backwards range, refused
fn bad_ranges_are_refused_naming_the_param_and_the_dimension() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.mz");
    every_dtype_and_shape(&path);
    let a = Archive::open(&path).unwrap();
    let tag = a.tag("t").unwrap();
    type Case = (&'static str, Vec<Range<u64>>, &'static [&'static str]);
    let cases: [Case; 5] = [
        (
            "FP32_2",
            vec![0..6],
            &["dimension 0", "0..6", "has 5", "[5, 3]"],
        ),
        (
            "FP32_2",
            vec![0..5, 2..4],
            &["dimension 1", "2..4", "has 3"],
        ),
        (
            "FP32_2",
            vec![3..1],
            &["dimension 0", "3..1", "ends before"],
        ),
        ("FP32_1", vec![0..1, 0..1], &["2 ranges", "1 dimensions"]),
        ("FP32_0", vec![0..1], &["1 ranges", "0 dimensions"]),
    ];
    for (name, b, words) in cases {
        let e = tag.param_slice(name, &b).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)), "{e}");
        let m = e.to_string();
        assert!(m.contains(&format!("param {name:?}")), "{m}");
        assert!(m.contains("s.mz"), "{m}");
        for w in words {
            assert!(m.contains(w), "{w:?} not in {m}");
        }
        // The location-based read says which entry.
        let loc = &tag
            .params()
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .location;
        let m = a.tensor_slice(loc, &b).unwrap_err().to_string();
        assert!(m.contains(loc.entry()), "{m}");
    }
    let e = tag.param_slice("nope", &[0..1]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::ParamNotFound(..)), "{e}");
}

#[cfg(feature = "remote")]
mod remote {
    use super::*;
    use crate::support::http_server::Server;
    use modelzip::remote::RemoteOptions;

    #[test]
    fn remote_slices_equal_local_ones_and_fetch_only_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.mz");
        let all = every_dtype_and_shape(&path);
        let server = Server::start();
        server.put("s.mz", std::fs::read(&path).unwrap());
        let a = RemoteOptions {
            max_retries: 0,
            ..RemoteOptions::default()
        }
        .open(&server.url("s.mz"))
        .unwrap();
        let tag = a.tag("t").unwrap();
        let locs: Vec<_> = tag.params().iter().map(|p| &p.location).collect();
        // One batched request for every header (and where each entry's data starts).
        let before = server.count();
        a.tensor_heads(&locs).unwrap();
        assert!(server.count() <= before + 1, "{:#?}", server.requests());
        for (name, t) in &all {
            for b in boxes(t.dims()) {
                let (count, sent) = (server.count(), server.bytes_sent());
                let s = tag.param_slice(name, &b).unwrap();
                assert_eq!(s.view().data(), naive(t, &b), "{name} {b:?}");
                assert_eq!(s.view().dims(), expected_dims(t.dims(), &b), "{name} {b:?}");
                let want = s.view().data().len() as u64;
                // Only the box's bytes; at most one request (none for an empty box, and
                // the runs of these small boxes lie within the store's merge distance).
                let merged = server.bytes_sent() - sent;
                assert!(server.count() - count <= 1, "{name} {b:?}");
                assert!(want <= merged, "{name} {b:?}");
                if t.view().slice(&b).unwrap().is_mapped() {
                    assert_eq!(merged, want, "{name} {b:?}: rows read exactly");
                } else {
                    let whole = t.data().len() as u64;
                    assert!(merged <= whole, "{name} {b:?}");
                }
            }
        }
    }

    #[test]
    fn a_remote_row_slice_of_a_large_tensor_is_one_request_of_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.mz");
        let rows = 4096u64;
        let t = tensor(DType::Fp32, &[rows, 256]);
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add_tag(TagBuilder::new("b").param("w", t.clone()))
            .unwrap();
        w.finish().unwrap();
        let server = Server::start();
        server.put("big.mz", std::fs::read(&path).unwrap());
        let a = RemoteOptions {
            max_retries: 0,
            ..RemoteOptions::default()
        }
        .open(&server.url("big.mz"))
        .unwrap();
        let tag = a.tag("b").unwrap();
        // Without an earlier header read: one request for the header, one for the rows.
        let (count, sent) = (server.count(), server.bytes_sent());
        let s = tag.param_slice("w", &[1000..1100]).unwrap();
        assert_eq!(s.view().data(), naive(&t, &[1000..1100]));
        assert_eq!(
            server.count() - count,
            2,
            "{:#?}",
            &server.requests()[count..]
        );
        let row = 256 * 4;
        assert!(server.bytes_sent() - sent <= 100 * row + 1024);
        // The next slice: its rows alone.
        let (count, sent) = (server.count(), server.bytes_sent());
        let s = tag.param_slice("w", &[rows - 3..rows]).unwrap();
        assert_eq!(s.view().data(), naive(&t, &[rows - 3..rows]));
        assert_eq!(server.count() - count, 1);
        assert_eq!(server.bytes_sent() - sent, 3 * row);
        // A column of every row: 4096 runs read through the covering range, once.
        let (count, sent) = (server.count(), server.bytes_sent());
        let s = tag.param_slice("w", &[0..rows, 5..6]).unwrap();
        assert_eq!(s.view().data(), naive(&t, &[0..rows, 5..6]));
        assert!(server.count() - count <= 4, "{}", server.count() - count);
        assert!(server.bytes_sent() - sent <= rows * row);
        // Out of bounds: refused before any request.
        let count = server.count();
        let e = tag.param_slice("w", &[0..rows + 1]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)), "{e}");
        assert_eq!(server.count(), count);
    }
}
