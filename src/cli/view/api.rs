//! The JSON documents of `modelzip view`'s API, built from an open archive by the same
//! functions the other commands report through (`tags --json`'s rows, `show`'s tensor
//! descriptions, `diff --json`'s document, `graph --format dot`'s drawing). Pure: the
//! server and `--html` both call these.

use super::super::common::TensorInfo;
use super::super::diff::ChangedJson;
use super::super::tags;
use modelzip::checkpoint::{self, CheckpointStatus, Goal};
use modelzip::variants::{ParamDiff, TagComparison, compare_tags};
use modelzip::{Archive, Graph, GraphFormat, TensorView};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// An API failure: an HTTP status and the one-line message the page shows.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    /// A request the API refuses (a bad or missing argument): 400.
    pub fn bad_request(message: String) -> ApiError {
        ApiError {
            status: 400,
            message,
        }
    }

    /// Something the request names is not in the archive: 404.
    pub fn not_found(message: String) -> ApiError {
        ApiError {
            status: 404,
            message,
        }
    }

    /// The archive could not be read (open, decode, a hostile entry): 422.
    pub fn unreadable(message: String) -> ApiError {
        ApiError {
            status: 422,
            message,
        }
    }
}

impl From<super::super::CliError> for ApiError {
    fn from(e: super::super::CliError) -> ApiError {
        match e {
            super::super::CliError::Failed(m) => ApiError::unreadable(m),
            super::super::CliError::BrokenPipe => ApiError::unreadable("broken pipe".into()),
        }
    }
}

/// The longest tag or parameter name the API accepts (the archive's own names are
/// shorter; a longer one cannot name anything).
const MAX_NAME: usize = 4096;

/// Checks a name argument of a request.
pub fn check_name(what: &str, name: Option<&str>) -> Result<String, ApiError> {
    let name = name.ok_or_else(|| ApiError::bad_request(format!("missing argument {what:?}")))?;
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "invalid {what}: empty, longer than {MAX_NAME} bytes or with control characters"
        )));
    }
    Ok(name.to_string())
}

/// The tag `name` of the archive (ignoring case, as every command does).
pub fn tag<'a>(archive: &'a Archive, name: &str) -> Result<modelzip::Tag<'a>, ApiError> {
    if archive.canonical_tag(name).is_none() {
        return Err(ApiError::not_found(format!(
            "no tag {name:?} in the archive"
        )));
    }
    archive
        .tag(name)
        .map_err(|e| ApiError::unreadable(format!("cannot read tag {name}: {e}")))
}

/// `GET /api/archive`: every tag as `tags --json` lists it, plus, from
/// [`checkpoint::history`], each checkpoint's step and metrics and why the retention
/// policy keeps it, each other tag's reason for not being a checkpoint, and the policy
/// and the checkpoints it removed (as the newest checkpoint's save recorded them).
pub fn archive_doc(archive: &Archive, shown: &Path) -> Result<Value, ApiError> {
    let rows = tags::summaries(archive, shown)?;
    let h = checkpoint::history(archive)
        .map_err(|e| ApiError::unreadable(format!("cannot read the checkpoints: {e}")))?;
    let ckpts: HashMap<&str, &CheckpointStatus> = h
        .checkpoints
        .iter()
        .map(|c| (c.record.tag.as_str(), c))
        .collect();
    let others: HashMap<&str, &str> = h
        .others
        .iter()
        .map(|(t, why)| (t.as_str(), why.as_str()))
        .collect();
    let mut list = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let mut row = tags::tag_json(i, r);
        let c = ckpts.get(r.name.as_str());
        if let Value::Object(m) = &mut row {
            m.insert("step".into(), json!(c.map(|c| c.record.step)));
            m.insert(
                "metrics".into(),
                c.map_or(json!({}), |c| json!(c.record.metrics)),
            );
            let kept = c.filter(|_| h.policy.is_some()).map(|c| {
                c.kept_by
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            });
            m.insert("kept_by".into(), json!(kept));
            m.insert("not_checkpoint".into(), json!(others.get(r.name.as_str())));
        }
        list.push(row);
    }
    let retention = h.policy.as_ref().map(|p| {
        json!({
            "keep_last": p.keep_last,
            "keep_every": p.keep_every,
            "keep_best": p.keep_best.as_ref().map(|b| json!({
                "metric": b.metric,
                "goal": match b.goal { Goal::Min => "min", Goal::Max => "max" },
                "count": b.count,
            })),
            "removed": h.removed.iter().map(|r| json!({
                "tag": r.tag, "step": r.step, "metrics": r.metrics,
            })).collect::<Vec<_>>(),
            "removed_omitted": h.removed_omitted,
        })
    });
    Ok(json!({
        "archive": shown.display().to_string(),
        "default": archive.default_tag(),
        "len_bytes": archive.len_bytes(),
        "dead_bytes": archive.dead_bytes(),
        "tags": list,
        "retention": retention,
        "retention_problem": h.problem,
    }))
}

/// The most parameters a tag's document lists (a tag of a million names would be
/// hundreds of MB of JSON); `params_total` says how many the tag has.
pub const MAX_PARAM_ROWS: usize = 20_000;

/// `GET /api/tag?name=T`: the tag's parameters (name, dtype, dims, stored bytes, the
/// tag it shares the file with, the data's SHA-256), as `show` describes them; the
/// first [`MAX_PARAM_ROWS`] of them.
pub fn tag_doc(archive: &Archive, name: &str) -> Result<Value, ApiError> {
    tag_doc_with(archive, name, &mut Described::new())
}

/// Tensor files described so far, by entry: a file several tags share is read and hashed
/// once for all their documents (`--html`).
pub type Described = HashMap<String, TensorInfo>;

/// [`tag_doc`] describing each tensor file not in `described` yet, and keeping it there.
pub fn tag_doc_with(
    archive: &Archive,
    name: &str,
    described: &mut Described,
) -> Result<Value, ApiError> {
    let t = tag(archive, name)?;
    let mut params = Vec::with_capacity(t.params().len().min(MAX_PARAM_ROWS));
    for p in t.params().iter().take(MAX_PARAM_ROWS) {
        let loc = &p.location;
        if !described.contains_key(loc.entry()) {
            let data = t.tensor(loc).map_err(|e| {
                ApiError::unreadable(format!(
                    "cannot read parameter {:?} of tag {}: {e}",
                    p.name,
                    t.name()
                ))
            })?;
            described.insert(loc.entry().to_string(), TensorInfo::of(&data.view()));
        }
        let info = &described[loc.entry()];
        params.push(json!({
            "name": p.name,
            "dtype": info.dtype.name(),
            "dims": info.dims,
            "bytes": t.stored_size(loc),
            "shared_from": loc.shared.then_some(loc.tag()),
            "data_sha256": info.data_sha256,
        }));
    }
    Ok(json!({
        "tag": t.name(),
        "updater_entries": t.updater().len(),
        "params_total": t.params().len(),
        "params": params,
    }))
}

/// The most values a statistics request reads: larger tensors are sampled in
/// [`SAMPLE_RUNS`] evenly spaced runs (the work of a request is bounded).
const MAX_VALUES: u64 = 1 << 20;
const SAMPLE_RUNS: u64 = 16;
/// Histogram bins: 1 to 200, 40 unless asked.
const MAX_BINS: usize = 200;

/// `GET /api/param?tag=T&name=P&bins=N`: min, max, mean and standard deviation of the
/// parameter's finite values and a histogram of them, computed on at most
/// [`MAX_VALUES`] values.
pub fn param_doc(
    archive: &Archive,
    tag_name: &str,
    param: &str,
    bins: usize,
) -> Result<Value, ApiError> {
    if bins == 0 || bins > MAX_BINS {
        return Err(ApiError::bad_request(format!(
            "invalid bins {bins}: 1 to {MAX_BINS}"
        )));
    }
    let t = tag(archive, tag_name)?;
    let Some(entry) = t.params().iter().find(|p| p.name == param) else {
        return Err(ApiError::not_found(format!(
            "no parameter {param:?} in tag {}",
            t.name()
        )));
    };
    let unreadable = |e: modelzip::Error| {
        ApiError::unreadable(format!(
            "cannot read parameter {param:?} of tag {}: {e}",
            t.name()
        ))
    };
    let no_stats = |dtype: modelzip::DType, e: modelzip::Error| {
        ApiError::bad_request(format!(
            "no statistics for {param:?} ({}): {e}",
            dtype.name()
        ))
    };
    // The header first (a remote archive fetches its first bytes only): a large stored
    // tensor is sampled by slices, which read only the sampled runs (by range from a
    // remote archive; a local one maps them). A deflated one is inflated once, whole.
    let head = archive
        .tensor_heads(&[&entry.location])
        .map_err(unreadable)?
        .pop()
        .ok_or_else(|| ApiError::unreadable(format!("no header for {param:?}")))?;
    let numel: u64 = head.dims.iter().product();
    let stored = archive.entry_stored_size(entry.location.entry())
        == head.header_len.checked_add(head.data_len);
    let (values, sampled) = if numel > MAX_VALUES && stored {
        let mut out = Vec::with_capacity(MAX_VALUES as usize);
        for ranges in sample_boxes(&head.dims) {
            let part = t.param_slice(param, &ranges).map_err(unreadable)?;
            out.extend(
                part.view()
                    .to_f32_vec()
                    .map_err(|e| no_stats(head.dtype, e))?,
            );
        }
        (out, true)
    } else {
        let data = t.tensor(&entry.location).map_err(unreadable)?;
        let view = data.view();
        sample(&view).map_err(|e| no_stats(view.dtype(), e))?
    };
    let mut finite = values.iter().copied().filter(|v| v.is_finite());
    let first = finite.next();
    let (mut min, mut max, mut sum, mut n) = match first {
        Some(v) => (v, v, v as f64, 1u64),
        None => (0.0, 0.0, 0.0, 0u64),
    };
    for v in finite {
        min = min.min(v);
        max = max.max(v);
        sum += v as f64;
        n += 1;
    }
    let mean = if n > 0 { sum / n as f64 } else { 0.0 };
    let mut var = 0.0f64;
    let mut counts = vec![0u64; bins];
    let width = (max as f64 - min as f64) / bins as f64;
    for v in values.iter().copied().filter(|v| v.is_finite()) {
        let d = v as f64 - mean;
        var += d * d;
        let b = if width > 0.0 {
            (((v as f64 - min as f64) / width) as usize).min(bins - 1)
        } else {
            0
        };
        counts[b] += 1;
    }
    let std = if n > 0 { (var / n as f64).sqrt() } else { 0.0 };
    let num = |x: f64| if n > 0 { json!(x) } else { Value::Null };
    Ok(json!({
        "tag": t.name(),
        "name": param,
        "dtype": head.dtype.name(),
        "dims": head.dims,
        "numel": numel,
        "read": values.len(),
        "sampled": sampled,
        "finite": n,
        "non_finite": values.len() as u64 - n,
        "min": num(min as f64),
        "max": num(max as f64),
        "mean": num(mean),
        "std": num(std),
        "histogram": {"min": num(min as f64), "max": num(max as f64), "counts": counts},
    }))
}

/// The boxes (one range per leading dimension, as `param_slice` takes them) of
/// [`SAMPLE_RUNS`] evenly spaced runs of about [`MAX_VALUES`] elements in all of a
/// tensor of `dims` (more than `MAX_VALUES` elements): each run starts near its place in
/// the row-major order and keeps the trailing dimensions whole where a run holds them.
fn sample_boxes(dims: &[u64]) -> Vec<Vec<std::ops::Range<u64>>> {
    let numel: u64 = dims.iter().product();
    let run = MAX_VALUES / SAMPLE_RUNS;
    // inner[k]: the elements of one index of dimension k (the product of those after it).
    let mut inner = vec![1u64; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        inner[k] = inner[k + 1] * dims[k + 1];
    }
    // The first dimension whose indices are no larger than a run (the last one is).
    let Some(k) = (0..dims.len()).find(|&k| inner[k] <= run) else {
        return Vec::new();
    };
    let width = (run / inner[k]).clamp(1, dims[k]);
    (0..SAMPLE_RUNS)
        .map(|i| {
            let mut rest = i * (numel / SAMPLE_RUNS);
            let mut ranges = Vec::with_capacity(k + 1);
            for n in &inner[..k] {
                let at = rest / n;
                rest %= n;
                ranges.push(at..at + 1);
            }
            let at = (rest / inner[k]).min(dims[k] - width);
            ranges.push(at..at + width);
            ranges
        })
        .collect()
}

/// The tensor's values as f32: all of them, or the runs of [`sample_boxes`] (true when
/// sampled), as a stored tensor's are read by slices.
fn sample(view: &TensorView<'_>) -> modelzip::Result<(Vec<f32>, bool)> {
    if view.numel() <= MAX_VALUES {
        return Ok((view.to_f32_vec()?, false));
    }
    let mut out = Vec::with_capacity(MAX_VALUES as usize);
    for ranges in sample_boxes(view.dims()) {
        out.extend(view.slice(&ranges)?.view().to_f32_vec()?);
    }
    Ok((out, true))
}

/// `GET /api/diff?a=A&b=B`: the `diff --json` document of the two tags with each list
/// cut to [`MAX_PARAM_ROWS`] names (of the changed parameters, those with the largest
/// relative, then absolute, difference, in the tag's order), and `counts` (each list's
/// length uncut) and `truncated` (whether a list was cut) beside them.
pub fn diff_doc(archive: &Archive, a: &str, b: &str) -> Result<Value, ApiError> {
    tag(archive, a)?;
    tag(archive, b)?;
    let d = compare_tags(archive, a, b)
        .map_err(|e| ApiError::unreadable(format!("cannot diff {a} and {b}: {e}")))?;
    let [added, removed, changed, shared, copied] = d.counts();
    let names = |it: &mut dyn Iterator<Item = &str>| -> Value {
        it.take(MAX_PARAM_ROWS).map(|n| json!(n)).collect()
    };
    let truncated = [added, removed, changed, shared, copied]
        .iter()
        .any(|&n| n > MAX_PARAM_ROWS);
    let changed_rows: Vec<Value> = largest_changes(&d, MAX_PARAM_ROWS)
        .into_iter()
        .map(|c| serde_json::to_value(ChangedJson(c)))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::unreadable(format!("cannot diff {a} and {b}: {e}")))?;
    Ok(json!({
        "tag_a": d.tag_a().name(),
        "tag_b": d.tag_b().name(),
        "identical": d.is_identical(),
        "graph": d.graph().name(),
        "added": names(&mut d.added()),
        "removed": names(&mut d.removed()),
        "changed": changed_rows,
        "shared": names(&mut d.shared()),
        "copied": names(&mut d.copied()),
        "counts": {
            "added": added,
            "removed": removed,
            "changed": changed,
            "shared": shared,
            "copied": copied,
        },
        "truncated": truncated,
    }))
}

/// The `limit` changed parameters of `d` with the largest relative difference, then
/// absolute (none, as the page sorts it, below every number; infinity above), in the
/// first tag's order: a heap of `limit`, not a list of every changed parameter.
fn largest_changes(d: &TagComparison<'_>, limit: usize) -> Vec<ParamDiff> {
    use std::cmp::{Ordering, Reverse};
    use std::collections::BinaryHeap;
    struct Ranked(f64, f64, usize, ParamDiff);
    impl Ranked {
        fn cmp_key(&self, o: &Self) -> Ordering {
            // Larger differences first, then the earlier parameter.
            (self.0.total_cmp(&o.0))
                .then(self.1.total_cmp(&o.1))
                .then(o.2.cmp(&self.2))
        }
    }
    impl PartialEq for Ranked {
        fn eq(&self, o: &Self) -> bool {
            self.cmp_key(o) == Ordering::Equal
        }
    }
    impl Eq for Ranked {}
    impl PartialOrd for Ranked {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Ranked {
        fn cmp(&self, o: &Self) -> Ordering {
            self.cmp_key(o)
        }
    }
    if d.counts()[2] <= limit {
        return d.changed().collect();
    }
    let mut heap: BinaryHeap<Reverse<Ranked>> = BinaryHeap::with_capacity(limit + 1);
    for (i, c) in d.changed().enumerate() {
        let key = |x: Option<f64>| x.unwrap_or(-1.0);
        heap.push(Reverse(Ranked(
            key(c.max_rel_diff),
            key(c.max_abs_diff),
            i,
            c,
        )));
        if heap.len() > limit {
            heap.pop();
        }
    }
    let mut kept: Vec<Ranked> = heap.into_iter().map(|Reverse(r)| r).collect();
    kept.sort_by_key(|r| r.2);
    kept.into_iter().map(|r| r.3).collect()
}

/// The entry holding tag `name`'s graph: its own, or the one of the tag it shares it
/// with (shared.txt); `None` when it has none. Read from the tables and the directory,
/// not from the graph.
pub fn graph_entry(archive: &Archive, t: &modelzip::Tag<'_>) -> Option<String> {
    if let Some((file, owner)) = t
        .shared_files()
        .iter()
        .find(|(f, _)| f.starts_with("graph."))
    {
        return Some(format!("{owner}/{file}"));
    }
    ["graph.fb", "graph.pdmodel"]
        .iter()
        .map(|f| format!("{}/{f}", t.name()))
        .find(|e| archive.entry_stored_size(e).is_some())
}

/// `GET /api/graph?tag=T`: the tag's graph as operations and edges
/// ([`modelzip::dump::op_graph`]), with the tag, entry and encoding.
pub fn graph_doc(archive: &Archive, name: &str) -> Result<Value, ApiError> {
    let t = tag(archive, name)?;
    let entry = graph_entry(archive, &t);
    graph_doc_of(&t, entry)
}

/// [`graph_doc`] of tag `t`, whose graph is in `entry` ([`graph_entry`]).
pub fn graph_doc_of(t: &modelzip::Tag<'_>, entry: Option<String>) -> Result<Value, ApiError> {
    let tag_name = t.name().to_string();
    let Some((enc, bytes)) = t.graph().map_err(|e| {
        ApiError::unreadable(format!("cannot read the graph of tag {tag_name:?}: {e}"))
    })?
    else {
        return Ok(json!({"tag": tag_name, "graph": Value::Null}));
    };
    let entry = entry.unwrap_or_else(|| format!("{tag_name}/{}", enc.file_name()));
    let g = match enc {
        GraphFormat::ProgramDesc => Graph::decode(GraphFormat::ProgramDesc, &bytes),
        GraphFormat::FlatBuffers => Graph::decode(GraphFormat::FlatBuffers, &bytes),
    }
    .map_err(|e| ApiError::unreadable(format!("cannot decode {entry}: {e}")))?;
    let mut doc: Value = serde_json::from_str(&modelzip::dump::op_graph(&g))
        .map_err(|e| ApiError::unreadable(format!("cannot draw {entry}: {e}")))?;
    if let Value::Object(m) = &mut doc {
        m.insert("tag".into(), json!(tag_name));
        m.insert("entry".into(), json!(entry));
        m.insert(
            "encoding".into(),
            json!(super::super::graph::encoding_name(enc)),
        );
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::{MAX_PARAM_ROWS, diff_doc, param_doc};
    use modelzip::{Archive, ArchiveWriter, TagBuilder, Tensor};

    /// A large tensor's statistics come from 16 evenly spaced runs read by slices: rows
    /// of a [2048, 1024] tensor (64 rows from every 128th), and runs inside the rows of a
    /// [3, 2000000] one (a row is longer than a run); every value read is the one at its
    /// place.
    #[test]
    fn a_large_tensor_is_sampled_by_slices_at_evenly_spaced_places() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.zip");
        let rows: Vec<f32> = (0..2048 * 1024).map(|i| (i / 1024) as f32).collect();
        let flat: Vec<f32> = (0..6_000_000).map(|i| i as f32).collect();
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add_tag(
            TagBuilder::new("t")
                .param("rows", Tensor::from_slice(vec![2048, 1024], &rows).unwrap())
                .param(
                    "cols",
                    Tensor::from_slice(vec![3, 2_000_000], &flat).unwrap(),
                ),
        )
        .unwrap();
        w.finish().unwrap();
        let a = Archive::open(&path).unwrap();
        let doc = param_doc(&a, "t", "rows", 40).unwrap();
        assert_eq!(doc["sampled"], true);
        assert_eq!(doc["read"], 16 * 65536);
        assert_eq!(doc["numel"], 2048 * 1024);
        assert_eq!(doc["min"], 0.0);
        assert_eq!(doc["max"], (15 * 128 + 63) as f64);
        assert_eq!(doc["mean"], 7.5 * 128.0 + 31.5);
        // Runs of 65,536 starting at i * 375,000, kept inside their row.
        let starts: Vec<u64> = (0..16u64)
            .map(|i| {
                let at = i * 375_000;
                at / 2_000_000 * 2_000_000 + (at % 2_000_000).min(2_000_000 - 65_536)
            })
            .collect();
        let values: Vec<f64> = starts
            .iter()
            .flat_map(|&s| (s..s + 65_536).map(|v| v as f64))
            .collect();
        let doc = param_doc(&a, "t", "cols", 40).unwrap();
        assert_eq!(doc["sampled"], true);
        assert_eq!(doc["read"], values.len());
        assert_eq!(doc["min"], 0.0);
        assert_eq!(doc["max"], values.iter().cloned().fold(0.0, f64::max));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert_eq!(doc["mean"], mean);
    }

    /// Two tags of MAX_PARAM_ROWS + 5 parameters, every one changed, and 3 added: the
    /// document lists MAX_PARAM_ROWS changed ones, those with the largest differences
    /// (the last five), and counts them all.
    #[test]
    fn a_diff_document_lists_at_most_max_rows_a_kind_and_counts_them_all() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("m.zip");
        let n = MAX_PARAM_ROWS + 5;
        let one = |v: f32| Tensor::from_slice(vec![1], &[v]).unwrap();
        let (mut a, mut b) = (TagBuilder::new("a"), TagBuilder::new("b"));
        for i in 0..n {
            a = a.param(format!("p{i}"), one(1.0));
            // The last five differ most.
            let diff = if i >= n - 5 { 1.0 } else { 0.5 };
            b = b.param(format!("p{i}"), one(1.0 + diff));
        }
        for i in 0..3 {
            b = b.param(format!("new{i}"), one(0.0));
        }
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add_tag(a).unwrap();
        w.add_tag(b).unwrap();
        w.finish().unwrap();
        let archive = Archive::open(&path).unwrap();
        let doc = diff_doc(&archive, "a", "b").unwrap();
        let changed = doc["changed"].as_array().unwrap();
        assert_eq!(changed.len(), MAX_PARAM_ROWS);
        assert_eq!(doc["counts"]["changed"], n);
        assert_eq!(doc["counts"]["added"], 3);
        assert_eq!(doc["added"].as_array().unwrap().len(), 3);
        assert_eq!(doc["truncated"], true);
        // The five largest kept, the first five of the rest dropped, tag order kept.
        let names: Vec<&str> = changed
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "p0");
        assert_eq!(
            names[MAX_PARAM_ROWS - 6],
            format!("p{}", MAX_PARAM_ROWS - 6)
        );
        assert_eq!(
            names[MAX_PARAM_ROWS - 5..],
            [n - 5, n - 4, n - 3, n - 2, n - 1].map(|i| format!("p{i}"))
        );
    }
}
