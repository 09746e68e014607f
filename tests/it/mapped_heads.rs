//! Tensors far apart in a mapped archive have their zip local headers and record headers
//! read with `pread` instead of through the map (so opening and viewing touch none of
//! their pages). That path must answer exactly as the bytes read into memory do: the same
//! views, and for every corruption of a local or record header the same error.

use modelzip::{Archive, ArchiveWriter, Error, Result, TagBuilder, Tensor, TensorData};
use std::io::Cursor;

/// What reading every parameter gave: each view's dtype, dims, LoD and data, or the
/// error without the file name (an archive read from memory has none).
fn answers(a: Result<Archive>) -> Vec<String> {
    let plain = |e: Error| {
        let l = e.location();
        format!("{:?} {:?} {:?} {:?}", e.kind(), l.entry, l.record, l.offset)
    };
    let a = match a {
        Ok(a) => a,
        Err(e) => return vec![plain(e)],
    };
    let tag = match a.latest() {
        Ok(t) => t,
        Err(e) => return vec![plain(e)],
    };
    tag.params()
        .iter()
        .map(|p| match tag.tensor(&p.location) {
            Ok(t) => {
                let v = t.view();
                format!(
                    "{:?} {:?} {:?} {:?}",
                    v.dtype(),
                    v.dims(),
                    v.lod(),
                    v.data()
                )
            }
            Err(e) => plain(e),
        })
        .collect()
}

#[test]
fn far_apart_tensors_read_by_pread_answer_as_memory_does() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("far.zip");
    let n = 20_000usize; // 80 KB a tensor: each alone in its 64 KiB of the file
    let vals: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let plain = Tensor::from_slice(vec![n as u64], &vals).unwrap();
    let lod = Tensor::from_slice(vec![n as u64, 1], &vals)
        .unwrap()
        .with_lod(vec![vec![0, 5, n as u64]])
        .unwrap();
    // A LoD of 40 sequences makes a record header longer than the bytes first read.
    let long = Tensor::from_slice(vec![n as u64], &vals)
        .unwrap()
        .with_lod(vec![(0..=40).map(|i| i * 500).collect()])
        .unwrap();
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(
        TagBuilder::new("t")
            .param("a", plain)
            .param("b", lod)
            .param("c", long),
    )
    .unwrap();
    w.finish().unwrap();
    let good = std::fs::read(&path).unwrap();

    let mapped = Archive::open(&path).unwrap();
    let tag = mapped.latest().unwrap();
    for p in tag.params() {
        assert!(matches!(
            tag.tensor(&p.location).unwrap(),
            TensorData::Mapped(_)
        ));
    }
    let want = answers(Archive::from_reader(Cursor::new(good.clone())));
    assert_eq!(want.len(), 3);
    assert_eq!(answers(Archive::open(&path)), want);

    // Every byte of each tensor entry's local header and record header, corrupted.
    let starts: Vec<(usize, usize)> = {
        let a = Archive::open(&path).unwrap();
        let t = a.latest().unwrap();
        t.params()
            .iter()
            .map(|p| local_header(&good, p.location.entry().as_bytes()))
            .collect()
    };
    let (mut refused, mut tried) = (0, 0);
    for (header, data) in starts {
        for i in header..(data + 120).min(good.len()) {
            let mut b = good.clone();
            b[i] ^= 0x5a;
            std::fs::write(&path, &b).unwrap();
            let from_memory = answers(Archive::from_reader(Cursor::new(b)));
            refused += usize::from(from_memory.iter().any(|s| !s.starts_with("FP32")));
            tried += 1;
            assert_eq!(answers(Archive::open(&path)), from_memory, "byte {i}");
        }
    }
    assert!(
        refused * 2 > tried,
        "{refused} of {tried} corruptions refused"
    );
}

/// Where the local header of entry `name` starts in `zip`, and where its data starts
/// (the first occurrence of the name is in its local header, which precedes the
/// central directory).
fn local_header(zip: &[u8], name: &[u8]) -> (usize, usize) {
    let at = zip.windows(name.len()).position(|w| w == name).unwrap();
    let header = at - 30;
    assert_eq!(&zip[header..header + 4], b"PK\x03\x04");
    let extra = u16::from_le_bytes([zip[header + 28], zip[header + 29]]) as usize;
    (header, at + name.len() + extra)
}
