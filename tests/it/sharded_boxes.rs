//! Sharded saves whose shards split a dimension past the first (boxes): the column
//! shards of tensor parallelism, the blocks of a 2-D mesh, rows and columns mixed in one
//! tensor. Ranks are threads here (processes in python/tests/test_sharded.py). The
//! committed tensors equal the global arrays, the entries' CRC-32s (combined from the
//! ranks' positioned CRCs, no byte read again) are right, `verify` checks each box's
//! digest, an unchanged save is stored by reference, and overlapping or incomplete boxes
//! are refused with nothing changed.

use modelzip::sharded::{ShardedOptions, ShardedReport, ShardedWriter, TensorSpec};
use modelzip::{Archive, ArchiveWriter, DType, TagBuilder, Tensor, WriteOptions};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

/// The global values of a tensor of `dims`: distinct per element and per seed.
fn global(seed: u32, dims: &[u64]) -> Vec<f32> {
    let n: u64 = dims.iter().product();
    (0..n).map(|i| seed as f32 * 10_000.0 + i as f32).collect()
}

/// The elements of box `b` of a row-major tensor of `dims`, in the box's row-major order.
fn cut(values: &[f32], dims: &[u64], b: &[Range<u64>]) -> Vec<f32> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let mut rest = i as u64;
        let mut inside = true;
        for d in (0..dims.len()).rev() {
            inside &= b[d].contains(&(rest % dims[d]));
            rest /= dims[d];
        }
        if inside {
            out.push(*v);
        }
    }
    out
}

fn opts(rank: u32, world: u32) -> ShardedOptions {
    let mut o = ShardedOptions::new(rank, world);
    o.timeout = Duration::from_secs(30);
    o.write = WriteOptions {
        fsync: false,
        // Tables stored, not deflated: a test patches shards.txt in place.
        deflate_text: false,
        ..WriteOptions::default()
    };
    o
}

/// One tensor of the save: name, global dims, and each rank's boxes of it.
struct Layout {
    name: &'static str,
    dims: Vec<u64>,
    boxes: Vec<Vec<Vec<Range<u64>>>>,
}

/// Four ranks' layouts: column shards (tensor parallelism) of a matrix large enough that
/// each rank's box goes through the shared map (1 MiB each), a 2 x 2 mesh of a 3-D
/// tensor, a tensor whose first half is rows (written with `write_param`) and second
/// half columns, and a plain row-sharded vector.
fn layouts() -> Vec<Layout> {
    vec![
        Layout {
            name: "big",
            dims: vec![1024, 1024],
            boxes: (0..4)
                .map(|r| vec![vec![0..1024, 256 * r..256 * (r + 1)]])
                .collect(),
        },
        Layout {
            name: "mesh",
            dims: vec![3, 6, 10],
            boxes: (0..4u64)
                .map(|r| {
                    let (i, j) = (r / 2, r % 2);
                    vec![vec![0..3, 3 * i..3 * (i + 1), 5 * j..5 * (j + 1)]]
                })
                .collect(),
        },
        Layout {
            name: "mixed",
            dims: vec![6, 8],
            boxes: vec![
                vec![vec![0..2, 0..8]],
                vec![vec![2..3, 0..8], vec![3..6, 0..3]],
                vec![vec![3..6, 3..8]],
                vec![],
            ],
        },
        Layout {
            name: "rows",
            dims: vec![7],
            boxes: (0..4u64)
                .map(|r| vec![vec![2 * r..(2 * r + 2).min(7)]])
                .collect(),
        },
    ]
}

/// Rank `rank` writes its boxes of every tensor of `layouts` (values from `seed`): a box
/// that keeps every dimension but the first whole through `write_param`, any other
/// through `write_param_at`.
fn rank_save(
    path: &Path,
    tag: &str,
    rank: u32,
    world: u32,
    seed: u32,
    layouts: &[Layout],
) -> modelzip::Result<ShardedReport> {
    let specs: Vec<TensorSpec> = layouts
        .iter()
        .map(|l| TensorSpec::param(l.name, DType::Fp32, l.dims.clone()))
        .collect();
    let mut w = ShardedWriter::open(path, tag, &specs, &opts(rank, world))?;
    for l in layouts {
        let all = global(seed, &l.dims);
        for b in &l.boxes[rank as usize] {
            let shape: Vec<u64> = b.iter().map(|r| r.end - r.start).collect();
            let t = Tensor::from_slice(shape, &cut(&all, &l.dims, b))?;
            if b[1..].iter().zip(&l.dims[1..]).all(|(r, &d)| *r == (0..d)) && rank.is_multiple_of(2)
            {
                w.write_param(l.name, b[0].start, &t.view())?;
            } else {
                let at: Vec<u64> = b.iter().map(|r| r.start).collect();
                w.write_param_at(l.name, &at, &t.view())?;
            }
        }
    }
    w.finish()
}

fn group_save(
    path: &Path,
    tag: &str,
    seed: u32,
    layouts: &[Layout],
) -> Vec<modelzip::Result<ShardedReport>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|r| s.spawn(move || rank_save(path, tag, r, 4, seed, layouts)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn base_archive(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("run.zip");
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(TagBuilder::new("init").param("x", Tensor::from_slice(vec![1], &[1.0f32]).unwrap()))
        .unwrap();
    w.finish().unwrap();
    path
}

fn contents(path: &Path) -> (Vec<String>, std::collections::BTreeMap<String, Vec<u8>>) {
    let a = Archive::open(path).unwrap();
    let entries = a
        .entry_names()
        .map(|n| (n.to_string(), a.entry_bytes(n).unwrap().to_vec()))
        .collect();
    (a.tags().to_vec(), entries)
}

#[test]
fn column_and_mesh_shards_commit_tensors_equal_to_the_global_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let layouts = layouts();
    for r in group_save(&path, "step-1", 3, &layouts) {
        r.unwrap();
    }
    let a = Archive::open(&path).unwrap();
    let tag = a.tag("step-1").unwrap();
    for l in &layouts {
        let got = tag.param(l.name).unwrap();
        assert_eq!(got.view().dims(), l.dims.as_slice(), "{}", l.name);
        assert_eq!(
            got.view().to_vec::<f32>().unwrap(),
            global(3, &l.dims),
            "{}",
            l.name
        );
    }
    // The stored CRC-32 of each entry (combined from the ranks' positioned CRCs) is that
    // of its bytes: verify says so, and so does an independent reader (the zip crate
    // checks it at the end of each entry).
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    let mut z = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
    for name in a.entry_names().filter(|n| n.starts_with("step-1/params/")) {
        let mut e = z.by_name(name).unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut got).unwrap();
        assert_eq!(got, a.entry_bytes(name).unwrap().as_ref(), "{name}");
    }
    // shards.txt lists a box line per box (rows of a tensor that has boxes too are boxes).
    let shards = String::from_utf8(a.entry_bytes("step-1/shards.txt").unwrap().to_vec()).unwrap();
    assert!(shards.contains(" box=0:1024,256:512\n"), "{shards}");
    assert!(shards.contains(" box=0:3,3:6,5:10\n"), "{shards}");
    assert!(shards.contains(" box=0:2,0:8\n"), "{shards}");
    assert!(
        !shards
            .lines()
            .any(|l| l.starts_with("params/3.lodtensor") && l.contains("box=")),
        "{shards}"
    );
    // A column shard reads back as a slice of the committed tensor.
    let slice = tag.param_slice("big", &[0..1024, 256..512]).unwrap();
    assert_eq!(
        slice.view().to_vec::<f32>().unwrap(),
        cut(
            &global(3, &[1024, 1024]),
            &[1024, 1024],
            &[0..1024, 256..512]
        )
    );
}

#[test]
fn an_unchanged_box_sharded_save_is_stored_by_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let layouts = layouts();
    for r in group_save(&path, "step-1", 3, &layouts) {
        r.unwrap();
    }
    let reports = group_save(&path, "step-2", 3, &layouts);
    let r0 = reports[0].as_ref().unwrap();
    assert_eq!(r0.deduplicated, layouts.len(), "{r0:?}");
    let a = Archive::open(&path).unwrap();
    let t2 = a.tag("step-2").unwrap();
    assert!(
        t2.params().iter().all(|p| p.location.shared),
        "every tensor by reference"
    );
    assert_eq!(
        t2.param("mesh").unwrap().view().to_vec::<f32>().unwrap(),
        global(3, &[3, 6, 10])
    );
    assert!(a.verify().is_ok());
}

#[test]
fn overlapping_or_incomplete_boxes_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let before = contents(&path);
    let two = |boxes: Vec<Vec<Vec<Range<u64>>>>| {
        vec![Layout {
            name: "w",
            dims: vec![4, 6],
            boxes,
        }]
    };
    let save = |layouts: &[Layout]| -> Vec<modelzip::Result<ShardedReport>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|r| {
                    let path = &path;
                    s.spawn(move || {
                        let specs = vec![TensorSpec::param("w", DType::Fp32, vec![4, 6])];
                        let mut w = ShardedWriter::open(path, "s", &specs, &opts(r, 2))?;
                        let all = global(1, &[4, 6]);
                        for b in &layouts[0].boxes[r as usize] {
                            let shape: Vec<u64> = b.iter().map(|x| x.end - x.start).collect();
                            let t = Tensor::from_slice(shape, &cut(&all, &[4, 6], b))?;
                            let at: Vec<u64> = b.iter().map(|x| x.start).collect();
                            w.write_param_at("w", &at, &t.view())?;
                        }
                        w.finish()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    // Columns 2..3 written by both ranks.
    let r = save(&two(vec![vec![vec![0..4, 0..3]], vec![vec![0..4, 2..6]]]));
    let e = r[0].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("ranks 0 and 1 both wrote element [0, 2] of \"w\""),
        "{e}"
    );
    assert!(e.contains("nothing was committed"), "{e}");
    assert_eq!(contents(&path), before);
    // Column 5 of rows 2..4 written by nobody.
    let r = save(&two(vec![
        vec![vec![0..4, 0..3]],
        vec![vec![0..2, 3..6], vec![2..4, 3..5]],
    ]));
    let e = r[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("cover 22 of its 24 elements"), "{e}");
    assert_eq!(contents(&path), before);
    // A box past the global shape, or of the wrong rank, is refused by its writer.
    let specs = vec![TensorSpec::param("w", DType::Fp32, vec![4, 6])];
    let mut w = ShardedWriter::open(&path, "s", &specs, &opts(0, 1)).unwrap();
    let t = Tensor::from_slice(vec![4, 3], &[0f32; 12]).unwrap();
    let e = w
        .write_param_at("w", &[0, 4], &t.view())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("spans 4..7 of dimension 1, past the global shape [4, 6]"),
        "{e}"
    );
    let e = w
        .write_param_at("w", &[0], &t.view())
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not match the 2 dimensions"), "{e}");
    // Rows through write_param must keep every other dimension whole.
    let e = w.write_param("w", 0, &t.view()).unwrap_err().to_string();
    assert!(e.contains("write_param_at"), "{e}");
    w.write_param_at("w", &[0, 0], &t.view()).unwrap();
    let e = w.write_param_at(
        "w",
        &[2, 2],
        &Tensor::from_slice(vec![1, 1], &[0f32]).unwrap().view(),
    );
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("the box 2:3,2:3 of \"w\" overlaps the box 0:4,0:3"),
        "{e}"
    );
    drop(w);
    assert_eq!(contents(&path), before);
}

#[test]
fn a_tampered_box_is_found_by_verify_naming_the_box_and_its_rank() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let layouts = layouts();
    for r in group_save(&path, "step-1", 3, &layouts) {
        r.unwrap();
    }
    // "mesh" is params/1.lodtensor; its last element is in rank 3's box.
    let a = Archive::open(&path).unwrap();
    let entry = a.entry_bytes("step-1/params/1.lodtensor").unwrap().to_vec();
    drop(a);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(entry.len())
        .position(|w| w == entry.as_slice())
        .unwrap();
    bytes[at + entry.len() - 2] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let problems = Archive::open(&path).unwrap().verify().problems;
    assert!(
        problems
            .iter()
            .any(|p| p.entry.as_deref() == Some("step-1/params/1.lodtensor")
                && p.message
                    .contains("box 0:3,3:6,5:10 (written by rank 3) has SHA-256")),
        "{problems:?}"
    );
}

/// A shards.txt with hostile box lines (overlapping, incomplete, outside the shape) is
/// reported by verify, naming the lines, never a panic. The lines are patched in place
/// (same length) into a real sharded save's shards.txt.
#[test]
fn hostile_box_lines_are_reported_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = base_archive(dir.path());
    let layouts = layouts();
    for r in group_save(&path, "step-1", 3, &layouts) {
        r.unwrap();
    }
    let good = std::fs::read(&path).unwrap();
    let was = b" box=0:3,3:6,5:10\n";
    let at = good.windows(was.len()).position(|w| w == was).unwrap();
    let cases: [(&[u8], &str); 4] = [
        (b" box=0:3,3:6,4:10\n", "share element [0, 3, 4]"),
        (b" box=0:3,3:6,6:10\n", "cover 171 of its 180 elements"),
        (b" box=0:3,3:6,5:11\n", "box 0:3,3:6,5:11 is outside"),
        (b" box=0:3,3:6,5:1x\n", "is not a box"),
    ];
    for (patch, want) in cases {
        let mut bytes = good.clone();
        bytes[at..at + patch.len()].copy_from_slice(patch);
        std::fs::write(&path, &bytes).unwrap();
        let problems = Archive::open(&path).unwrap().verify().problems;
        assert!(
            problems.iter().any(|p| p.message.contains(want)),
            "{}: {problems:?}",
            String::from_utf8_lossy(patch)
        );
    }
}
