//! TensorFlow SavedModels on the fixture TensorFlow 2.21 made
//! (tests/tf/make_saved_model.py): import → verify → export → re-import gives the same
//! parameters and kept files; corrupt or unsupported checkpoints are refused saying what
//! and where; cast tags are refused on export and a failed export leaves nothing behind.
//! TensorFlow itself loads the export in tests/tf/run_exported.py.

use crate::support::{export_opts, import_opts as opts};
use modelzip::interop::tf::saved_model::{
    self, Bundle, BundleEntry, export_saved_model, import_saved_model, parse_index, write_index,
};
use modelzip::interop::{self, ExportOptions};
use modelzip::{Archive, DType, ErrorKind};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf/saved_model/mlp")
}

/// A copy of the fixture directory to damage.
fn copy_fixture(to: &Path) -> PathBuf {
    let dst = to.join("sm");
    for rel in [
        "saved_model.pb",
        "fingerprint.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ] {
        let p = dst.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(fixture().join(rel), p).unwrap();
    }
    dst
}

fn index_of(dir: &Path) -> Bundle {
    parse_index(&std::fs::read(dir.join("variables/variables.index")).unwrap()).unwrap()
}

fn write_index_to(dir: &Path, b: &Bundle) {
    std::fs::write(dir.join("variables/variables.index"), write_index(b)).unwrap();
}

fn entry_mut<'b>(b: &'b mut Bundle, key: &str) -> &'b mut BundleEntry {
    &mut b.entries.iter_mut().find(|(k, _)| k == key).unwrap().1
}

fn import_err(dir: &Path) -> modelzip::Error {
    let zip = dir.parent().unwrap().join("bad.zip");
    let e = import_saved_model(&zip, "t", dir, &opts()).unwrap_err();
    assert!(!zip.exists(), "a refused import left an archive");
    e
}

const W1: &str = "w1/.ATTRIBUTES/VARIABLE_VALUE";

#[test]
fn a_saved_model_goes_in_and_comes_out_and_back_in_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("sm.zip");
    // Detected from the directory, through the registry.
    let input = fixture();
    let f = interop::detect(std::slice::from_ref(&input)).unwrap();
    assert_eq!(f.name(), "tf");
    let r = f
        .import(&zip, "sm", std::slice::from_ref(&input), &opts())
        .unwrap();
    assert_eq!(r.graph_entry, None);
    let names: Vec<&str> = r.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "b1/.ATTRIBUTES/VARIABLE_VALUE",
            "b2/.ATTRIBUTES/VARIABLE_VALUE",
            "scale/.ATTRIBUTES/VARIABLE_VALUE",
            "step/.ATTRIBUTES/VARIABLE_VALUE",
            W1,
            "w2/.ATTRIBUTES/VARIABLE_VALUE",
        ]
    );
    let w1 = r.params.iter().find(|p| p.name == W1).unwrap();
    assert_eq!(
        (w1.dtype, w1.dims.as_slice()),
        (DType::Fp32, &[4u64, 8][..])
    );
    let a = Archive::open(&zip).unwrap();
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    let tag = a.tag("sm").unwrap();
    assert!(saved_model::is_saved_model_tag(&tag));
    assert_eq!(interop::origin_of(&tag).unwrap().unwrap().name(), "tf");
    let step = tag.param("step/.ATTRIBUTES/VARIABLE_VALUE").unwrap();
    assert_eq!(step.view().as_slice::<i64>().unwrap(), &[42]);
    let scale = tag.param("scale/.ATTRIBUTES/VARIABLE_VALUE").unwrap();
    assert_eq!(scale.view().as_slice::<f64>().unwrap(), &[0.5]);

    // Export: the kept files verbatim, a fresh single-shard checkpoint.
    let out = dir.path().join("out");
    let x = f.export(&tag, &out, &export_opts()).unwrap();
    assert_eq!(x.params.len(), 6);
    assert!(x.unused.is_empty());
    for kept in ["saved_model.pb", "fingerprint.pb"] {
        assert_eq!(
            std::fs::read(out.join(kept)).unwrap(),
            std::fs::read(fixture().join(kept)).unwrap(),
            "{kept}"
        );
    }
    let theirs = index_of(&fixture());
    let ours = index_of(&out);
    assert_eq!(ours.header.num_shards, 1);
    assert_eq!(ours.header.version, theirs.header.version);
    assert_eq!(ours.entries.len(), theirs.entries.len());
    for ((k1, e1), (k2, e2)) in theirs.entries.iter().zip(&ours.entries) {
        assert_eq!(k1, k2);
        assert_eq!(
            (e1.dtype, &e1.shape, e1.size),
            (e2.dtype, &e2.shape, e2.size)
        );
    }

    // Re-import: every parameter the same bytes (so shared with the first tag).
    let r2 = import_saved_model(&zip, "again", &out, &opts()).unwrap();
    assert!(
        r2.params
            .iter()
            .all(|p| p.shared_from.as_deref() == Some("sm")),
        "{:?}",
        r2.params
    );
    let a = Archive::open(&zip).unwrap();
    let again = a.tag("again").unwrap();
    for kept in [
        "saved_model/saved_model.pb",
        "saved_model/fingerprint.pb",
        "saved_model/object_graph.bin",
    ] {
        assert_eq!(
            a.entry_bytes(&format!("sm/{kept}")).unwrap(),
            a.entry_bytes(&format!("again/{kept}")).unwrap(),
            "{kept}"
        );
    }
    // Its export is byte for byte the first export.
    let out2 = dir.path().join("out2");
    export_saved_model(&again, &out2, &export_opts()).unwrap();
    for rel in [
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ] {
        assert_eq!(
            std::fs::read(out.join(rel)).unwrap(),
            std::fs::read(out2.join(rel)).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn an_existing_output_is_refused_unless_forced_and_then_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("sm.zip");
    import_saved_model(&zip, "sm", &fixture(), &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("sm").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("stale.txt"), b"x").unwrap();
    let e = export_saved_model(&tag, &out, &export_opts()).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert!(out.join("stale.txt").exists());
    let force = ExportOptions {
        overwrite: true,
        ..export_opts()
    };
    // Not over the directory holding the archive, even with --force.
    let e = export_saved_model(&tag, dir.path(), &force).unwrap_err();
    assert!(e.to_string().contains("holds the archive"), "{e}");
    assert!(zip.exists());
    export_saved_model(&tag, &out, &force).unwrap();
    assert!(!out.join("stale.txt").exists());
    assert!(out.join("saved_model.pb").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".modelzip"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn cast_and_quantized_tags_are_refused_on_export_leaving_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("sm.zip");
    import_saved_model(&zip, "sm", &fixture(), &opts()).unwrap();
    modelzip::variants::cast(
        &zip,
        "sm",
        "half",
        DType::Fp16,
        &modelzip::variants::AllowValues::default(),
        &Default::default(),
    )
    .unwrap();
    modelzip::variants::quantize(
        &zip,
        "sm",
        "int8",
        &Default::default(),
        &modelzip::variants::AllowValues::default(),
        &Default::default(),
    )
    .unwrap();
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("out");
    for (name, what) in [("half", "a cast"), ("int8", "a quantized copy")] {
        let tag = a.tag(name).unwrap();
        // Exported as its origin (the default), or --format tf: the same refusal.
        let origin = interop::origin_of(&tag).unwrap().unwrap();
        assert_eq!(origin.name(), "tf");
        let e = origin
            .export(&tag, &out, &export_opts())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("is {what} of SavedModel tag \"sm\"")) && e.contains("safetensors"),
            "{e}"
        );
        assert!(!out.exists());
    }
    // A tag holding the kept files whose parameter's dtype changed: refused by name.
    let b = dir.path().join("b.zip");
    import_saved_model(&b, "sm", &fixture(), &opts()).unwrap();
    let src = Archive::open(&b).unwrap();
    let sm = src.tag("sm").unwrap();
    let mut w = modelzip::Appender::open(&b, modelzip::AppendMode::Rewrite).unwrap();
    let mut t = w.begin_tag("odd").unwrap();
    for e in sm.own_entries() {
        if let Some(rel) = e.strip_prefix("sm/saved_model/") {
            t.extra_entry(&format!("saved_model/{rel}"), &src.entry_bytes(e).unwrap())
                .unwrap();
        }
    }
    for p in sm.params() {
        let data = sm.param(&p.name).unwrap();
        if p.name == W1 {
            let v = modelzip::Tensor::from_slice(vec![4, 8], &[0f64; 32]).unwrap();
            t.param(&p.name, &v.view()).unwrap();
        } else {
            t.param(&p.name, &data.view()).unwrap();
        }
    }
    t.finish().unwrap();
    w.finish().unwrap();
    let a = Archive::open(&b).unwrap();
    let e = export_saved_model(&a.tag("odd").unwrap(), &out, &export_opts())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(W1) && e.contains("FP64") && e.contains("declares FP32"),
        "{e}"
    );
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".modelzip-"))
        .collect();
    assert!(left.is_empty(), "temp directories left: {left:?}");
}

#[test]
fn a_damaged_index_is_refused_saying_where() {
    let dir = tempfile::tempdir().unwrap();
    let sm = copy_fixture(dir.path());
    let index = sm.join("variables/variables.index");
    let good = std::fs::read(&index).unwrap();

    // A flipped byte in the data block: its checksum.
    let mut bad = good.clone();
    bad[20] ^= 0x40;
    std::fs::write(&index, &bad).unwrap();
    let e = import_err(&sm);
    assert!(matches!(e.kind(), ErrorKind::Checksum(_)), "{e}");
    assert!(e.to_string().contains("variables.index"), "{e}");

    // Bad magic.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 2] ^= 1;
    std::fs::write(&index, &bad).unwrap();
    let e = import_err(&sm);
    assert!(e.to_string().contains("bad magic number"), "{e}");
    assert_eq!(e.location().offset, Some(n as u64 - 8));

    // Truncated: the footer is not where it should be.
    for cut in [good.len() - 1, 100, 10, 0] {
        std::fs::write(&index, &good[..cut]).unwrap();
        let e = import_err(&sm);
        assert!(
            e.to_string().contains("checkpoint index table"),
            "{cut}: {e}"
        );
    }

    // A compressed block (type 1), its checksum right: refused as compressed.
    let mut bad = good.clone();
    // The data block starts at 0 and its trailer ends where the metaindex starts: the
    // footer's first varint.
    let footer = &good[good.len() - 48..];
    let meta = usize::from(footer[0] & 0x7f) | usize::from(footer[1] & 0x7f) << 7;
    assert!(
        footer[0] & 0x80 != 0 && footer[1] & 0x80 == 0,
        "a two-byte varint"
    );
    let data_size = meta - 5;
    bad[data_size] = 1;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bad[..data_size]), &[1]);
    let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
    bad[data_size + 1..data_size + 5].copy_from_slice(&masked.to_le_bytes());
    std::fs::write(&index, &bad).unwrap();
    let e = import_err(&sm);
    assert!(e.to_string().contains("compressed, type 1 (snappy)"), "{e}");
    std::fs::write(&index, &good).unwrap();
}

#[test]
fn keys_out_of_order_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sm = copy_fixture(dir.path());
    let mut b = index_of(&sm);
    b.entries.swap(1, 2);
    write_index_to(&sm, &b);
    let e = import_err(&sm).to_string();
    assert!(e.contains("keys out of order"), "{e}");
}

/// The key TensorFlow writes for one slice of a sliced variable (what a
/// `MaxShardSizePolicy` sharding callback makes of a variable larger than a shard)
/// starts with a zero byte; it was refused as "checkpoint key [0, 119, ...] is not
/// UTF-8" (or, when its extents happened to be UTF-8, would be read as a parameter
/// named by the raw key). Now the variable is named and the cause said.
#[test]
fn a_slice_key_is_refused_naming_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let sm = copy_fixture(dir.path());
    let mut b = index_of(&sm);
    let w1 = entry_mut(&mut b, W1).clone();
    // OrderedCode: 0, the name ("\0" escaped as "\0\u{ff}"; none here), "\0\u{1}", then
    // the slice's rank (1 2) and extents (kept UTF-8 so write_index takes the key).
    let key = format!("\0{W1}\0\u{1}\u{1}\u{2}");
    b.entries.insert(0, (key, w1));
    write_index_to(&sm, &b);
    let e = import_err(&sm).to_string();
    assert!(
        e.contains("names a slice of variable \"w1/.ATTRIBUTES/VARIABLE_VALUE\"")
            && e.contains("MaxShardSizePolicy")
            && e.contains("variables.index"),
        "{e}"
    );
}

#[test]
fn sliced_string_and_wrongly_sized_entries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sm = copy_fixture(dir.path());
    let good = index_of(&sm);
    type Damage = fn(&mut BundleEntry);
    let cases: [(&str, Damage, &str); 6] = [
        ("sliced", |e| e.slices.push(vec![]), "is sliced"),
        ("string", |e| e.dtype = 7, "is a string tensor"),
        ("resource", |e| e.dtype = 20, "is a resource"),
        (
            "size",
            |e| e.size -= 4,
            "says 124 bytes, but FP32 [4, 8] takes 128",
        ),
        ("crc", |e| e.crc32c ^= 1, "checksum mismatch"),
        (
            "offset",
            |e| e.offset = 700,
            "run past the shard's 793 bytes",
        ),
    ];
    for (what, damage, want) in cases {
        let mut b = Bundle {
            header: good.header.clone(),
            entries: good.entries.clone(),
        };
        damage(entry_mut(&mut b, W1));
        write_index_to(&sm, &b);
        let e = import_err(&sm).to_string();
        assert!(e.contains(want) && e.contains(W1), "{what}: {e}");
    }
    // A shard the header does not have.
    let mut b = Bundle {
        header: good.header.clone(),
        entries: good.entries.clone(),
    };
    entry_mut(&mut b, W1).shard_id = 3;
    write_index_to(&sm, &b);
    let e = import_err(&sm).to_string();
    assert!(e.contains("shard 3, but the bundle has 1"), "{e}");
}

/// Nothing refused checkpoint entries naming one range of a shard: each was read,
/// checksummed (CRC-32C) and hashed (SHA-256) again, so 10,000 entries over one 4 MiB
/// range were 40 GiB checksummed and 40 GiB hashed from a 4 MiB shard and a 300 KB
/// index (the import took 58 s and succeeded), though dedup kept the archive small. An entry whose range overlaps one read before is
/// refused before its bytes are checked, naming both; the fixture's own ranges
/// (adjacent) and one entry over the new range import.
#[test]
fn entries_reading_one_range_of_a_shard_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sm = copy_fixture(dir.path());
    let data = sm.join("variables/variables.data-00000-of-00001");
    let mut shard = std::fs::read(&data).unwrap();
    let offset = shard.len() as i64;
    let values = vec![1u8; 4 << 20];
    shard.extend_from_slice(&values);
    std::fs::write(&data, &shard).unwrap();
    let crc = crc32c::crc32c(&values);
    let mut b = index_of(&sm);
    let mut alias = entry_mut(&mut b, W1).clone();
    let dims = &mut alias.shape.as_mut().unwrap().dim;
    dims.truncate(1);
    dims[0].size = 1 << 20;
    alias.offset = offset;
    alias.size = values.len() as i64;
    alias.crc32c = crc.rotate_right(15).wrapping_add(0xa282_ead8);
    // One such entry is a variable like any other.
    b.entries.push(("alias/00000".into(), alias.clone()));
    b.entries.sort_by(|x, y| x.0.cmp(&y.0));
    write_index_to(&sm, &b);
    let zip = dir.path().join("one.zip");
    import_saved_model(&zip, "t", &sm, &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let one = a.tag("t").unwrap().param("alias/00000").unwrap();
    assert_eq!(one.view().dims(), [1 << 20]);
    for i in 1..10_000 {
        b.entries.push((format!("alias/{i:05}"), alias.clone()));
    }
    b.entries.sort_by(|x, y| x.0.cmp(&y.0));
    write_index_to(&sm, &b);
    let e = import_err(&sm).to_string();
    let end = offset + (4 << 20);
    assert!(
        e.contains(&format!(
            "checkpoint entry \"alias/00001\" reads bytes {offset}..{end}, which overlap \
             the bytes {offset}..{end} of entry \"alias/00000\""
        )) && e.contains("variables.data-00000-of-00001"),
        "{e}"
    );
    // A range that starts inside another's is refused too.
    b.entries.retain(|(k, _)| !k.starts_with("alias/"));
    let mut inside = entry_mut(&mut b, W1).clone();
    inside.offset += 4;
    inside.shape = alias.shape.clone();
    inside.shape.as_mut().unwrap().dim[0].size = 1;
    inside.size = 4;
    b.entries.push(("x".into(), inside));
    write_index_to(&sm, &b);
    let e = import_err(&sm).to_string();
    assert!(
        e.contains("entry \"x\" reads bytes") && e.contains(&format!("of entry {W1:?}")),
        "{e}"
    );
}

#[test]
fn damaged_data_and_stray_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sm = copy_fixture(dir.path());
    let data = sm.join("variables/variables.data-00000-of-00001");
    let good = std::fs::read(&data).unwrap();
    let mut bad = good.clone();
    bad[0] ^= 1;
    std::fs::write(&data, &bad).unwrap();
    let e = import_err(&sm);
    assert!(matches!(e.kind(), ErrorKind::Checksum(_)), "{e}");
    std::fs::write(&data, &good[..400]).unwrap();
    let e = import_err(&sm).to_string();
    assert!(e.contains("run past the shard's 400 bytes"), "{e}");
    std::fs::write(&data, &good).unwrap();
    std::fs::write(sm.join("variables/checkpoint"), b"x").unwrap();
    let e = import_err(&sm).to_string();
    assert!(
        e.contains("\"checkpoint\" is neither the checkpoint's index"),
        "{e}"
    );
    std::fs::remove_file(sm.join("variables/checkpoint")).unwrap();
    std::fs::write(sm.join("notes.txt"), b"x").unwrap();
    let e = import_err(&sm).to_string();
    assert!(
        e.contains("\"notes.txt\" is not part of a SavedModel"),
        "{e}"
    );
}
