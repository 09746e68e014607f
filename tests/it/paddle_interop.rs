//! Paddle interop: import → export byte for byte on the real Paddle fixtures, graph
//! conversion inside the archive (also under a full disk at every offset), persistables
//! directories, and the errors that name the variable and record.

use crate::support::ProgramOf;

use crate::support;
use crate::support::{export_opts, import_opts as opts, write_opts as no_fsync};

use modelzip::fault::{bytes_written, set_write_budget};
use modelzip::interop::ExportOptions;
use modelzip::interop::paddle::{
    self, export_inference_model, export_inference_model_bytes, import_inference_model,
    import_inference_model_files, import_persistables_dir, import_program,
};
use modelzip::tensor::{decode_combined, encode_combined};
use modelzip::{Archive, ArchiveWriter, Graph, TagBuilder, Tensor, TensorView};
use modelzip::{GraphFormat, convert_graph, replace_graph};
use std::path::{Path, PathBuf};
use support::{dump, stray_files};

const VERSIONS: [&str; 2] = ["2.6.2", "3.3.1"];
const MODELS: [&str; 2] = ["mlp", "conv"];

fn fixture(version: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paddle")
        .join(version)
        .join(file)
}

fn read(version: &str, file: &str) -> Vec<u8> {
    std::fs::read(fixture(version, file)).unwrap()
}

/// Imports every fixture model of both versions into one archive, tags `<model>-<v>`.
fn import_all(path: &Path) -> Vec<(String, &'static str, &'static str)> {
    let mut tags = Vec::new();
    for v in VERSIONS {
        for m in MODELS {
            let tag = format!("{m}-{v}");
            let r = import_inference_model_files(
                path,
                &tag,
                &fixture(v, &format!("{m}.pdmodel")),
                &fixture(v, &format!("{m}.pdiparams")),
                &opts(),
            )
            .unwrap();
            assert_eq!(r.tag, tag);
            assert_eq!(r.created, tags.is_empty());
            assert_eq!(
                r.graph_bytes,
                Some(read(v, &format!("{m}.pdmodel")).len() as u64)
            );
            tags.push((tag, v, m));
        }
    }
    tags
}

#[test]
fn import_then_export_is_byte_identical_for_every_fixture_model() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let tags = import_all(&zip);
    let a = Archive::open(&zip).unwrap();
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    for (tag, v, m) in &tags {
        let t = a.tag(tag).unwrap();
        let (enc, g) = t.graph().unwrap().unwrap();
        assert_eq!(enc, GraphFormat::ProgramDesc);
        assert_eq!(&*g, read(v, &format!("{m}.pdmodel")).as_slice());
        // Through files.
        let prefix = dir.path().join(format!("out-{tag}"));
        let r = export_inference_model(&t, &prefix, &export_opts()).unwrap();
        assert!(!r.graph_converted);
        assert!(r.unused.is_empty());
        let model = std::fs::read(&r.model_path).unwrap();
        let params = std::fs::read(r.params_path.as_ref().unwrap()).unwrap();
        assert_eq!(model, read(v, &format!("{m}.pdmodel")), "{tag} .pdmodel");
        assert_eq!(
            params,
            read(v, &format!("{m}.pdiparams")),
            "{tag} .pdiparams"
        );
        assert_eq!(r.model_bytes, model.len() as u64);
        assert_eq!(r.params_bytes, params.len() as u64);
        let mut sorted = r.params.clone();
        sorted.sort();
        assert_eq!(r.params, sorted, "params in byte order");
        // The output limit is checked before writing: one byte short is refused, with
        // the size it would have written, and leaves nothing behind.
        let total = (model.len() + params.len()) as u64;
        let capped = dir.path().join(format!("capped-{tag}"));
        let e = export_inference_model(
            &t,
            &capped,
            &ExportOptions {
                max_output: Some(total - 1),
                ..export_opts()
            },
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("of {total} exceeds the limit of {}", total - 1)),
            "{e}"
        );
        let (cm, cp) = paddle::export_paths(&capped);
        assert!(!cm.exists() && !cp.exists());
        let exact = ExportOptions {
            max_output: Some(total),
            ..export_opts()
        };
        export_inference_model(&t, &capped, &exact).unwrap();
        // In memory.
        let (m2, p2) = export_inference_model_bytes(&t).unwrap();
        assert_eq!((m2, p2), (model, params));
    }
}

#[test]
fn convert_to_flatbuffers_and_back_then_export_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let tags = import_all(&zip);
    for (tag, v, m) in &tags {
        let pdmodel = read(v, &format!("{m}.pdmodel"));
        let pdiparams = read(v, &format!("{m}.pdiparams"));
        let r = convert_graph(&zip, tag, GraphFormat::FlatBuffers, &no_fsync()).unwrap();
        assert!(r.changed);
        assert_eq!(
            (r.from, r.to),
            (GraphFormat::ProgramDesc, GraphFormat::FlatBuffers)
        );
        assert_eq!(r.old_bytes, pdmodel.len() as u64);
        {
            let a = Archive::open(&zip).unwrap();
            assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
            let t = a.tag(tag).unwrap();
            let (enc, fb) = t.graph().unwrap().unwrap();
            assert_eq!(enc, GraphFormat::FlatBuffers);
            assert_eq!(fb.len() as u64, r.new_bytes);
            // Exporting straight from graph.fb converts on the way.
            let (model, params) = export_inference_model_bytes(&t).unwrap();
            assert_eq!(model, pdmodel, "{tag} from graph.fb");
            assert_eq!(params, pdiparams, "{tag} from graph.fb");
            let prefix = dir.path().join(format!("fb-{tag}"));
            let rep = export_inference_model(&t, &prefix, &export_opts()).unwrap();
            assert!(rep.graph_converted);
        }
        // Converting to the encoding it already has changes nothing.
        let same = convert_graph(&zip, tag, GraphFormat::FlatBuffers, &no_fsync()).unwrap();
        assert!(!same.changed);
        let back = convert_graph(&zip, tag, GraphFormat::ProgramDesc, &no_fsync()).unwrap();
        assert!(back.changed);
        let a = Archive::open(&zip).unwrap();
        assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
        let t = a.tag(tag).unwrap();
        let (enc, g) = t.graph().unwrap().unwrap();
        assert_eq!(enc, GraphFormat::ProgramDesc);
        assert_eq!(&*g, pdmodel.as_slice(), "{tag}: pdmodel -> fb -> pdmodel");
        let (model, params) = export_inference_model_bytes(&t).unwrap();
        assert_eq!(model, pdmodel);
        assert_eq!(params, pdiparams);
    }
    // Every tag's tensors survived the four rewrites.
    let a = Archive::open(&zip).unwrap();
    assert_eq!(a.tags().len(), tags.len());
}

#[test]
fn persistables_dir_import_equals_the_combined_import() {
    for v in VERSIONS {
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("m.zip");
        let model = fixture(v, "mlp.pdmodel");
        let persist = fixture(v, "mlp_persistables");
        import_inference_model_files(
            &zip,
            "combined",
            &model,
            &fixture(v, "mlp.pdiparams"),
            &opts(),
        )
        .unwrap();
        let r = import_persistables_dir(&zip, "dir", &persist, Some(&model), &opts()).unwrap();
        assert_eq!(r.params.len(), 4);
        assert!(
            r.params
                .iter()
                .all(|p| p.shared_from.as_deref() == Some("combined")),
            "identical tensors are stored once: {:?}",
            r.params
        );
        let bare = import_persistables_dir(&zip, "bare", &persist, None, &opts()).unwrap();
        assert_eq!(bare.graph_bytes, None);
        let a = Archive::open(&zip).unwrap();
        let (c, d, b) = (
            a.tag("combined").unwrap(),
            a.tag("dir").unwrap(),
            a.tag("bare").unwrap(),
        );
        assert_eq!(dump(&c), dump(&d), "{v}");
        assert_eq!(dump(&c), dump(&b), "{v}");
        assert_eq!(c.graph().unwrap().unwrap().1, d.graph().unwrap().unwrap().1);
        assert!(b.graph().unwrap().is_none());
        let (m, p) = export_inference_model_bytes(&d).unwrap();
        assert_eq!(m, read(v, "mlp.pdmodel"));
        assert_eq!(p, read(v, "mlp.pdiparams"));

        // DIR/__model__ is found without --model.
        let copy = dir.path().join("persist");
        copy_dir(&persist, &copy);
        std::fs::copy(&model, copy.join("__model__")).unwrap();
        std::fs::write(copy.join("unrelated.txt"), b"ignored with a model").unwrap();
        let r = import_persistables_dir(&zip, "auto", &copy, None, &opts()).unwrap();
        assert_eq!(r.graph_bytes, Some(read(v, "mlp.pdmodel").len() as u64));
        let a = Archive::open(&zip).unwrap();
        assert_eq!(dump(&a.tag("auto").unwrap()), dump(&c));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn import_err(model: &[u8], params: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let e = import_inference_model(&zip, "t", model, params, &opts()).unwrap_err();
    assert!(!zip.exists(), "nothing is written on a failed check");
    e.to_string()
}

/// The records of a params file, re-encoded after `edit`.
fn edited(params: &[u8], edit: impl FnOnce(&mut Vec<Tensor>)) -> Vec<u8> {
    let mut ts: Vec<Tensor> = decode_combined(params)
        .unwrap()
        .into_iter()
        .map(|r| r.tensor.to_owned())
        .collect();
    edit(&mut ts);
    let views: Vec<TensorView<'_>> = ts.iter().map(Tensor::view).collect();
    let mut out = Vec::new();
    encode_combined(views.iter(), &mut out).unwrap();
    out
}

#[test]
fn record_count_mismatch_is_an_error_naming_the_counts() {
    let model = read("3.3.1", "mlp.pdmodel");
    let params = read("3.3.1", "mlp.pdiparams");
    let fewer = edited(&params, |ts| {
        ts.pop();
    });
    let e = import_err(&model, &fewer);
    assert!(e.contains("3 record(s)"), "{e}");
    assert!(e.contains("4 persistable variable(s)"), "{e}");
    assert!(e.contains("fc_0.b_0"), "{e}");
    let more = edited(&params, |ts| {
        let extra = ts[0].clone();
        ts.push(extra);
    });
    let e = import_err(&model, &more);
    assert!(e.contains("5 record(s)"), "{e}");
    // The conv params do not belong to the mlp program.
    let e = import_err(&model, &read("3.3.1", "conv.pdiparams"));
    assert!(e.contains("8 record(s)"), "{e}");
}

#[test]
fn dtype_and_dims_mismatches_name_the_variable_and_record() {
    let model = read("2.6.2", "mlp.pdmodel");
    let params = read("2.6.2", "mlp.pdiparams");
    let f64s = edited(&params, |ts| {
        ts[1] = Tensor::from_slice(vec![8, 16], &[0f64; 128]).unwrap();
    });
    let e = import_err(&model, &f64s);
    assert!(e.contains("\"fc_0.w_0\""), "{e}");
    assert!(e.contains("FP32") && e.contains("FP64"), "{e}");
    assert!(e.contains("record 1"), "{e}");
    let transposed = edited(&params, |ts| {
        ts[1] = Tensor::from_slice(vec![16, 8], &[0f32; 128]).unwrap();
    });
    let e = import_err(&model, &transposed);
    assert!(e.contains("\"fc_0.w_0\""), "{e}");
    assert!(e.contains("[8, 16]") && e.contains("[16, 8]"), "{e}");
    // Garbage params are a decode error with a position.
    let mut cut = params.clone();
    cut.truncate(params.len() - 5);
    let e = import_err(&model, &cut);
    assert!(e.contains("record 3"), "{e}");
    // A garbage program.
    let e = import_err(b"\x0a\x05junk!", &params);
    assert!(e.contains("graph"), "{e}");
}

#[test]
fn persistables_dir_with_a_missing_file_or_wrong_dtype_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let persist = dir.path().join("p");
    copy_dir(&fixture("3.3.1", "mlp_persistables"), &persist);
    std::fs::remove_file(persist.join("fc_1.w_0")).unwrap();
    let model = fixture("3.3.1", "mlp.pdmodel");
    let e = import_persistables_dir(&zip, "t", &persist, Some(&model), &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"fc_1.w_0\""), "{e}");
    assert!(e.contains("no file"), "{e}");
    assert!(!zip.exists());
    // Wrong dtype in one file: nothing is left of the half-written tag.
    let t = Tensor::from_slice(vec![16, 4], &[0i32; 64]).unwrap();
    let mut bytes = Vec::new();
    modelzip::tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
    std::fs::write(persist.join("fc_1.w_0"), &bytes).unwrap();
    let e = import_persistables_dir(&zip, "t", &persist, Some(&model), &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"fc_1.w_0\"") && e.contains("INT32"), "{e}");
    assert!(!zip.exists());
    // A file that is not a tensor, without a model.
    std::fs::write(persist.join("zz"), b"not a tensor").unwrap();
    let e = import_persistables_dir(&zip, "t", &persist, None, &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("zz"), "{e}");
}

#[test]
fn export_errors_no_graph_missing_param_existing_files() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let model = read("3.3.1", "mlp.pdmodel");
    let params = read("3.3.1", "mlp.pdiparams");
    import_persistables_dir(
        &zip,
        "nograph",
        &fixture("3.3.1", "mlp_persistables"),
        None,
        &opts(),
    )
    .unwrap();
    // A tag whose program needs fc_1.w_0, which it lacks.
    let tensors = paddle::inference_params(
        &Graph::decode(GraphFormat::ProgramDesc, &model).unwrap(),
        &params,
    )
    .unwrap();
    let mut b = TagBuilder::new("partial").graph(GraphFormat::ProgramDesc, model.clone());
    for (n, t) in tensors.iter().filter(|(n, _)| n != "fc_1.w_0") {
        b = b.param(n.clone(), t.to_owned());
    }
    b = b.param("extra", Tensor::from_slice(vec![1], &[1f32]).unwrap());
    modelzip::append_tag(&zip, b, modelzip::AppendMode::InPlace, &no_fsync()).unwrap();
    import_inference_model(&zip, "good", &model, &params, &opts()).unwrap();

    let a = Archive::open(&zip).unwrap();
    let prefix = dir.path().join("out");
    let e = export_inference_model(&a.tag("nograph").unwrap(), &prefix, &export_opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no graph"), "{e}");
    let e = export_inference_model(&a.tag("partial").unwrap(), &prefix, &export_opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"fc_1.w_0\"") && e.contains("partial"), "{e}");
    let (m, p) = paddle::export_paths(&prefix);
    assert!(!m.exists() && !p.exists());

    std::fs::write(&p, b"old").unwrap();
    let e = export_inference_model(&a.tag("good").unwrap(), &prefix, &export_opts())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("already exists") && e.contains("out.pdiparams"),
        "{e}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert!(!m.exists());
    let over = ExportOptions {
        overwrite: true,
        ..export_opts()
    };
    let r = export_inference_model(&a.tag("good").unwrap(), &prefix, &over).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), params);
    assert_eq!(std::fs::read(&m).unwrap(), model);
    assert!(r.unused.is_empty());
    let e = export_inference_model(
        &a.tag("good").unwrap(),
        &dir.path().join("no/such/x"),
        &export_opts(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not exist") && e.contains("such"), "{e}");
    // A prefix with a dot keeps it: out.v1.pdmodel.
    let (m1, p1) = paddle::export_paths(&dir.path().join("out.v1"));
    assert!(m1.ends_with("out.v1.pdmodel") && p1.ends_with("out.v1.pdiparams"));
}

#[test]
fn convert_a_tag_without_a_graph_or_unknown_tag_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    import_persistables_dir(
        &zip,
        "nograph",
        &fixture("3.3.1", "mlp_persistables"),
        None,
        &opts(),
    )
    .unwrap();
    let before = std::fs::read(&zip).unwrap();
    let e = convert_graph(&zip, "nograph", GraphFormat::FlatBuffers, &no_fsync())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no graph"), "{e}");
    let e = convert_graph(&zip, "nope", GraphFormat::FlatBuffers, &no_fsync())
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    assert_eq!(std::fs::read(&zip).unwrap(), before);
    assert!(stray_files(dir.path(), &zip).is_empty());
}

#[test]
fn replace_graph_keeps_sums_and_other_tags() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let mut w = ArchiveWriter::create_with(&zip, &no_fsync()).unwrap();
    w.add_tag(support::sample_tag("a", 1)).unwrap();
    w.add_tag(support::sample_tag("b", 2)).unwrap();
    w.finish().unwrap();
    let model = read("3.3.1", "mlp.pdmodel");
    let fb = Graph::decode(GraphFormat::ProgramDesc, &model)
        .unwrap()
        .encode(GraphFormat::FlatBuffers)
        .unwrap();
    let r = replace_graph(&zip, "A", GraphFormat::FlatBuffers, &fb, &no_fsync()).unwrap();
    assert_eq!(r.tag, "a");
    let a = Archive::open(&zip).unwrap();
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    assert_eq!(a.tags(), ["a", "b"]);
    let (enc, g) = a.tag("a").unwrap().graph().unwrap().unwrap();
    assert_eq!((enc, &*g), (GraphFormat::FlatBuffers, fb.as_slice()));
    assert!(a.entry_stored_size("a/graph.pdmodel").is_none());
    let extra = a.entry_bytes("a/notes/readme.md").unwrap();
    assert_eq!(&*extra, b"kept by every copy");
    // A fake ProgramDesc (written by another tool: modelzip's writers store only graphs
    // that decode) cannot be converted: the error names the entry.
    let fake = dir.path().join("fake.zip");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&fake).unwrap());
    let o = zip::write::SimpleFileOptions::default();
    for (name, bytes) in [
        ("tags.txt", &b"b\n"[..]),
        ("b/params.txt", b""),
        ("b/graph.pdmodel", b"\x0a\x00fake-program"),
    ] {
        z.start_file(name, o).unwrap();
        std::io::Write::write_all(&mut z, bytes).unwrap();
    }
    z.finish().unwrap();
    let e = convert_graph(&fake, "b", GraphFormat::FlatBuffers, &no_fsync())
        .unwrap_err()
        .to_string();
    assert!(e.contains("b/graph.pdmodel"), "{e}");
}

/// Evenly spread budgets over `0..=total` plus small ones.
fn budgets(total: u64, count: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..6).collect();
    v.extend((0..count).map(|i| i * total / count));
    v.push(total.saturating_sub(1));
    v.push(total);
    v.sort();
    v.dedup();
    v
}

#[test]
fn convert_survives_a_full_disk_at_every_offset() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base.zip");
    for (tag, m) in [("m", "mlp"), ("c", "conv")] {
        import_inference_model_files(
            &base,
            tag,
            &fixture("3.3.1", &format!("{m}.pdmodel")),
            &fixture("3.3.1", &format!("{m}.pdiparams")),
            &opts(),
        )
        .unwrap();
    }
    let pdmodel = read("3.3.1", "conv.pdmodel");
    let (ref_m, ref_c) = {
        let a = Archive::open(&base).unwrap();
        (dump(&a.tag("m").unwrap()), dump(&a.tag("c").unwrap()))
    };
    let op = |p: &Path| convert_graph(p, "c", GraphFormat::FlatBuffers, &no_fsync());
    let total = {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(None);
        op(&p).unwrap();
        bytes_written()
    };
    let list = budgets(total, 40);
    let mut failures = 0;
    for &n in &list {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.zip");
        std::fs::copy(&base, &p).unwrap();
        set_write_budget(Some(n));
        let res = op(&p);
        set_write_budget(None);
        failures += usize::from(res.is_err());
        let a = Archive::open(&p).unwrap_or_else(|e| panic!("budget {n}: {e}"));
        assert_eq!(a.tags(), ["m", "c"], "budget {n}");
        assert!(a.verify().is_ok(), "budget {n}: {:?}", a.verify().problems);
        let t = a.tag("c").unwrap();
        let (enc, _) = t.graph().unwrap().unwrap();
        assert_eq!(
            enc,
            if res.is_ok() {
                GraphFormat::FlatBuffers
            } else {
                GraphFormat::ProgramDesc
            },
            "budget {n}"
        );
        let (model, _) = export_inference_model_bytes(&t).unwrap();
        assert_eq!(model, pdmodel, "budget {n}");
        assert_eq!(dump(&a.tag("m").unwrap()), ref_m, "budget {n}");
        assert_eq!(dump(&t), ref_c, "budget {n}");
        drop(a);
        let stray = stray_files(d.path(), &p);
        assert!(stray.is_empty(), "budget {n}: stray files {stray:?}");
    }
    assert!(failures > list.len() / 2, "only {failures} runs failed");
}

#[test]
fn export_leaves_both_files_or_neither_on_a_full_disk() {
    let root = tempfile::tempdir().unwrap();
    let zip = root.path().join("m.zip");
    import_inference_model_files(
        &zip,
        "c",
        &fixture("2.6.2", "conv.pdmodel"),
        &fixture("2.6.2", "conv.pdiparams"),
        &opts(),
    )
    .unwrap();
    let a = Archive::open(&zip).unwrap();
    let t = a.tag("c").unwrap();
    let total =
        (read("2.6.2", "conv.pdmodel").len() + read("2.6.2", "conv.pdiparams").len()) as u64;
    let mut failures = 0;
    for n in budgets(total, 30) {
        let out = tempfile::tempdir().unwrap();
        let prefix = out.path().join("inference");
        set_write_budget(Some(n));
        let res = export_inference_model(&t, &prefix, &export_opts());
        set_write_budget(None);
        let mut names: Vec<String> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        if res.is_ok() {
            assert_eq!(
                names,
                ["inference.pdiparams", "inference.pdmodel"],
                "budget {n}"
            );
            let (m, p) = paddle::export_paths(&prefix);
            assert_eq!(std::fs::read(m).unwrap(), read("2.6.2", "conv.pdmodel"));
            assert_eq!(std::fs::read(p).unwrap(), read("2.6.2", "conv.pdiparams"));
        } else {
            failures += 1;
            assert!(names.is_empty(), "budget {n}: left {names:?}");
        }
    }
    assert!(failures > 10, "only {failures} runs failed");
}

#[test]
fn a_programdesc_field_framework_proto_lacks_is_kept_and_never_converted_away() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    // ProgramDesc field 6 (varint 1): not in framework.proto, as a newer Paddle might write.
    let mut model = read("3.3.1", "mlp.pdmodel");
    model.extend_from_slice(&[6 << 3, 1]);
    let model_path = dir.path().join("future.pdmodel");
    std::fs::write(&model_path, &model).unwrap();
    import_inference_model_files(
        &zip,
        "t",
        &model_path,
        &fixture("3.3.1", "mlp.pdiparams"),
        &opts(),
    )
    .unwrap();
    // Stored byte for byte, unknown field included.
    let a = Archive::open(&zip).unwrap();
    let (_, stored) = a.tag("t").unwrap().graph().unwrap().unwrap();
    assert_eq!(stored.as_ref(), model.as_slice());
    drop(a);
    let before = std::fs::read(&zip).unwrap();
    let e = convert_graph(&zip, "t", GraphFormat::FlatBuffers, &no_fsync())
        .unwrap_err()
        .to_string();
    assert!(e.contains("ProgramDesc: field number 6"), "{e}");
    assert!(e.contains("t/graph.pdmodel"), "{e}");
    assert_eq!(std::fs::read(&zip).unwrap(), before);
}

/// A program that loads no parameters (Paddle's jit.save writes only its .pdmodel) is
/// imported from the .pdmodel alone and exported as a .pdmodel alone; a program with
/// parameters needs its .pdiparams.
#[test]
fn a_program_without_parameters_needs_no_params_file() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    // The MLP's program without its persistable variables (and the ops that use them).
    let mut g = Graph::decode(GraphFormat::ProgramDesc, &read("3.3.1", "mlp.pdmodel")).unwrap();
    let block = &mut g.prog_mut().blocks[0];
    let params: Vec<String> = block
        .vars
        .iter()
        .filter(|v| v.is_persistable() && v.name != "feed" && v.name != "fetch")
        .map(|v| v.name.clone())
        .collect();
    assert!(!params.is_empty());
    block.vars.retain(|v| !params.contains(&v.name));
    let model = g.encode(GraphFormat::ProgramDesc).unwrap();
    let model_path = dir.path().join("noparams.pdmodel");
    std::fs::write(&model_path, &model).unwrap();
    let r = paddle::import_program(&zip, "t", &model_path, &opts()).unwrap();
    assert!(r.params.is_empty());
    let a = Archive::open(&zip).unwrap();
    let prefix = dir.path().join("out");
    let e = export_inference_model(&a.tag("t").unwrap(), &prefix, &export_opts()).unwrap();
    assert_eq!(e.params_path, None);
    assert_eq!(
        std::fs::read(dir.path().join("out.pdmodel")).unwrap(),
        model
    );
    assert!(!dir.path().join("out.pdiparams").exists());
    // With parameters, the .pdmodel alone is refused, naming them.
    let err = paddle::import_program(&zip, "u", &fixture("3.3.1", "mlp.pdmodel"), &opts())
        .unwrap_err()
        .to_string();
    assert!(err.contains("persistable variable(s)"), "{err}");
    assert!(err.contains(&params[0]), "{err}");
    assert!(err.contains("mlp.pdmodel"), "{err}");
}

/// `modelzip import A.pdiparams A.pdmodel` (the files the other way round) was "not a
/// model file of any known format"; the names say which is which, so it imports as the
/// usual order does.
#[test]
fn params_and_model_named_the_other_way_round_import_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let (model, params) = (
        fixture("3.3.1", "conv.pdmodel"),
        fixture("3.3.1", "conv.pdiparams"),
    );
    let mut seen = Vec::new();
    for (tag, inputs) in [
        ("usual", [model.clone(), params.clone()]),
        ("swapped", [params, model]),
    ] {
        let format = modelzip::interop::detect(&inputs).map(|f| f.name()).ok();
        assert_eq!(format, Some("paddle"), "{tag}");
        let r = modelzip::interop::format("paddle")
            .unwrap()
            .import(&zip, tag, &inputs, &crate::support::import_opts())
            .unwrap();
        seen.push(
            r.params
                .iter()
                .map(|p| (p.name.clone(), p.dims.clone()))
                .collect::<Vec<_>>(),
        );
        if tag == "swapped" {
            assert!(
                r.params
                    .iter()
                    .all(|p| p.shared_from.as_deref() == Some("usual"))
            );
        }
    }
    assert_eq!(seen[0], seen[1]);
    assert!(!seen[0].is_empty());
}

/// `--out out/` wrote the hidden files out/.pdmodel and out/.pdiparams (a prefix is
/// appended to); a prefix naming a directory is refused, and nothing is written. Through
/// the registry a PATH ending in .pdiparams is a prefix like one ending in .pdmodel.
#[test]
fn a_prefix_naming_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let (model, params) = (
        fixture("3.3.1", "mlp.pdmodel"),
        fixture("3.3.1", "mlp.pdiparams"),
    );
    import_inference_model_files(&zip, "fp32", &model, &params, &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("fp32").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let slash = format!("{}/", out.display());
    let (dot, dotdot) = (
        format!("{}/.", out.display()),
        format!("{}/..", out.display()),
    );
    for prefix in [&slash, &dot, &dotdot] {
        let e = export_inference_model(&tag, Path::new(prefix), &export_opts())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("names a directory, not a file prefix"),
            "{prefix}: {e}"
        );
    }
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
    let e = modelzip::interop::format("paddle")
        .unwrap()
        .export(&tag, &out.join("m.pdiparams"), &export_opts())
        .unwrap();
    let names: Vec<_> = e
        .files
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["m.pdmodel", "m.pdiparams"]);
    assert_eq!(
        std::fs::read(out.join("m.pdmodel")).unwrap(),
        std::fs::read(&model).unwrap()
    );
}

/// A .pdmodel of 5 million empty blocks (10 MB; vars and ops are counted and capped,
/// blocks were not) took 660 MB to decode before it was refused for a missing field; ten
/// times as many, gigabytes. It is walked first and refused at a few tens of MB.
#[test]
fn a_program_of_millions_of_empty_messages_is_refused_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("h.pdmodel");
    std::fs::write(&model, [0x0a, 0x00].repeat(5_000_000)).unwrap();
    let zip = dir.path().join("h.zip");
    let e = import_program(&zip, "h", &model, &opts()).unwrap_err();
    assert!(
        matches!(e.kind(), modelzip::ErrorKind::LimitExceeded { .. })
            && e.to_string().contains("estimated decoded ProgramDesc size"),
        "{e}"
    );
    assert!(!zip.exists());
}
