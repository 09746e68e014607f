//! Structured: 1–3 tags (valid names, params with any names, small tensors drawn from a
//! pool so that equal tensors recur, updater state, optional graph, training config and
//! metadata) written with ArchiveWriter read back equal; equal tensors are stored once;
//! verify() passes. Then one more tag is appended in place and everything re-checked;
//! then one tag is removed in place (its files that other tags share re-homed) and the
//! rest re-checked, before and after a compaction.
#![no_main]
use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use modelzip::tensor::{data_len, encode_tensor};
use modelzip::{AppendMode, Appender, Archive, ArchiveWriter, DType, GraphFormat, Removal};
use modelzip::{TagBuilder, Tensor, TensorKind, WriteOptions, validate_tag_name};
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Clone)]
struct TagCase {
    name: String,
    params: Vec<(String, Tensor)>,
    updater: Vec<(String, Vec<Tensor>)>,
    graph: Option<(GraphFormat, Vec<u8>)>,
    config: Option<Vec<u8>>,
    metadata: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Case {
    tags: Vec<TagCase>,
    appended: TagCase,
    deflate_text: bool,
    remove: usize,
}

fn tensor(u: &mut Unstructured) -> Result<Tensor> {
    let dtype = *u.choose(&DType::ALL)?;
    let dims = (0..u.int_in_range(0..=3)?).map(|_| u.int_in_range(0..=3u64)).collect::<Result<Vec<_>>>()?;
    let n = data_len(dtype, &dims).unwrap() as usize;
    let mut data = u.bytes(n.min(u.len()))?.to_vec();
    data.resize(n, 0x5a);
    let t = Tensor::from_bytes(dtype, dims.clone(), data).unwrap();
    Ok(match dims.first() {
        Some(&rows) if u.arbitrary()? => t.with_lod(vec![vec![0, rows]]).unwrap(),
        _ => t,
    })
}

fn tag_name(u: &mut Unstructured) -> Result<String> {
    const FIRST: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const REST: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    let mut s = String::from(*u.choose(FIRST)? as char);
    for _ in 0..u.int_in_range(0..=10)? {
        s.push(*u.choose(REST)? as char);
    }
    Ok(s)
}

fn tag(u: &mut Unstructured, pool: &[Tensor], taken: &mut Vec<String>) -> Result<TagCase> {
    let mut name = tag_name(u)?;
    while validate_tag_name(&name).is_err() || taken.iter().any(|t| t.eq_ignore_ascii_case(&name)) {
        name.push('x'); // "con" → "conx", "a." → "a.x", "a" taken → "ax"
    }
    taken.push(name.clone());
    let pick = |u: &mut Unstructured| -> Result<Tensor> { Ok(u.choose(pool)?.clone()) };
    let mut params: Vec<(String, Tensor)> = Vec::new();
    for _ in 0..u.int_in_range(0..=5)? {
        let n: String = u.arbitrary()?;
        if !n.is_empty() && !params.iter().any(|(p, _)| *p == n) {
            params.push((n, pick(u)?));
        }
    }
    let mut updater: Vec<(String, Vec<Tensor>)> = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let n: String = u.arbitrary()?;
        let arrays = (0..u.int_in_range(1..=2)?).map(|_| pick(u)).collect::<Result<Vec<_>>>()?;
        if !n.is_empty() && !updater.iter().any(|(p, _)| *p == n) {
            updater.push((n, arrays));
        }
    }
    let graph = match u.int_in_range(0..=2)? {
        0 => None,
        1 => Some((GraphFormat::ProgramDesc, modelzip::Graph::from(modelzip::graph::Program::default()).encode(GraphFormat::ProgramDesc).unwrap())),
        // Writers refuse graph bytes that do not decode (the graph_fb target fuzzes those).
        _ => Some((GraphFormat::FlatBuffers, modelzip::Graph::from(modelzip::graph::Program::default()).encode(GraphFormat::FlatBuffers).unwrap())),
    };
    let config = match u.arbitrary::<Option<f64>>()? {
        Some(lr) => Some(modelzip::TrainingConfig::sgd(lr).encode().unwrap()),
        None => None,
    };
    let metadata = match u.arbitrary::<Option<(String, i64)>>()? {
        Some((k, v)) => Some(serde_json::json!({ k: v, "step": 7 }).to_string().into_bytes()),
        None => None,
    };
    Ok(TagCase { name, params, updater, graph, config, metadata })
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let pool = (0..u.int_in_range(1..=3)?).map(|_| tensor(u)).collect::<Result<Vec<_>>>()?;
        let mut taken = Vec::new();
        let tags = (0..u.int_in_range(1..=3)?).map(|_| tag(u, &pool, &mut taken)).collect::<Result<_>>()?;
        let appended = tag(u, &pool, &mut taken)?;
        Ok(Case { tags, appended, deflate_text: u.arbitrary()?, remove: u.arbitrary()? })
    }
}

fn builder(t: &TagCase) -> TagBuilder {
    let mut b = TagBuilder::new(&t.name);
    for (n, x) in &t.params {
        b = b.param(n, x.clone());
    }
    for (n, xs) in &t.updater {
        b = b.updater(n, xs.clone());
    }
    if let Some((enc, g)) = &t.graph {
        b = b.graph(*enc, g.clone());
    }
    if let Some(c) = &t.config {
        b = b.training_config(c.clone());
    }
    if let Some(m) = &t.metadata {
        b = b.metadata(m.clone());
    }
    b
}

fn encoded(t: &Tensor) -> Vec<u8> {
    let mut v = Vec::new();
    encode_tensor(&t.view(), &mut v).unwrap();
    v
}

/// Reads every tag back, compares it with what was written, checks dedup and verify().
fn check(a: &Archive, tags: &[&TagCase]) {
    let names: Vec<&str> = tags.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(a.tags(), names);
    // Each stored tensor file holds one distinct record: equal tensors are stored once.
    let mut files: HashMap<(TensorKind, Vec<u8>), String> = HashMap::new();
    let mut seen = |kind, t: &Tensor, entry: &str| {
        let prev = files.entry((kind, encoded(t))).or_insert_with(|| entry.to_string());
        assert_eq!(prev, entry, "an equal tensor is stored twice");
    };
    for tc in tags {
        let tag = a.tag(&tc.name).unwrap();
        let got: Vec<&str> = tag.params().iter().map(|p| p.name.as_str()).collect();
        let want: Vec<&str> = tc.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(got, want);
        for (p, (_, t)) in tag.params().iter().zip(&tc.params) {
            assert_eq!(tag.param(&p.name).unwrap().view(), t.view());
            seen(TensorKind::Params, t, &p.location.entry);
        }
        assert_eq!(tag.updater().len(), tc.updater.len());
        for (u, (n, ts)) in tag.updater().iter().zip(&tc.updater) {
            assert_eq!((&u.name, u.arrays.len()), (n, ts.len()));
            for (loc, t) in u.arrays.iter().zip(ts) {
                assert_eq!(tag.tensor(loc).unwrap().view(), t.view());
                seen(TensorKind::Updater, t, &loc.entry);
            }
        }
        let graph = tag.graph().unwrap().map(|(e, b)| (e, b.into_owned()));
        assert_eq!(graph, tc.graph);
        assert_eq!(tag.training_config().unwrap().map(|b| b.into_owned()), tc.config);
        let meta = tag.metadata().unwrap().expect("metadata.json is missing");
        let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        assert!(meta.get("created").is_some());
        if let Some(m) = &tc.metadata {
            let m: serde_json::Value = serde_json::from_slice(m).unwrap();
            for (k, v) in m.as_object().unwrap() {
                assert_eq!(&meta[k], v);
            }
        }
    }
    let report = a.verify();
    assert!(report.is_ok(), "{report:?}");
}

fn path() -> &'static PathBuf {
    static DIR: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    &DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let d = tempfile::tempdir_in(base).unwrap();
        let p = d.path().join("r.zip");
        (d, p)
    })
    .1
}

fuzz_target!(|case: Case| {
    let opts = WriteOptions { fsync: false, deflate_text: case.deflate_text, ..WriteOptions::default() };
    let mut w = ArchiveWriter::create_with(path(), &opts).unwrap();
    for t in &case.tags {
        w.add_tag(builder(t)).unwrap();
    }
    w.finish().unwrap();
    let mut tags: Vec<&TagCase> = case.tags.iter().collect();
    check(&Archive::open(path()).unwrap(), &tags);
    let mut app = Appender::open_with(path(), AppendMode::InPlace, &opts).unwrap();
    app.add_tag(builder(&case.appended)).unwrap();
    app.finish().unwrap();
    tags.push(&case.appended);
    let a = Archive::open(path()).unwrap();
    check(&a, &tags);
    assert!(a.dead_bytes() > 0, "an in-place append leaves the old directory behind");
    drop(a);
    let gone = tags.remove(case.remove % tags.len()).name.clone();
    let r = modelzip::remove_tags(path(), Removal::tags([&gone]).in_place(true), &opts).unwrap();
    assert_eq!(r.removed, [gone]);
    check(&Archive::open(path()).unwrap(), &tags);
    modelzip::compact(path(), &opts).unwrap();
    let a = Archive::open(path()).unwrap();
    check(&a, &tags);
    assert_eq!(a.dead_bytes(), 0);
});
