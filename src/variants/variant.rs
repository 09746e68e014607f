//! What quantize and cast share: the report of a variant, the records a variant leaves
//! in the new tag's metadata.json (and the refusals they allow), and appending the
//! derived tag to the archive.

use crate::archive::{AppendMode, Appender, Archive, GraphFormat, WriteOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::Ticker;
use crate::tensor::{DType, Tensor};
use std::path::Path;

/// What a variant did to one parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamChange {
    /// Quantized to INT8; `axis` is the channel axis (per channel) or `None` (per tensor),
    /// `scale` names the FP32 parameter holding the scales.
    Quantized {
        /// The per-channel axis, `None` for per-tensor.
        axis: Option<usize>,
        /// The scale parameter's name (`<name>@scale`).
        scale: String,
        /// Why a parameter quantized per channel was asked for was quantized per tensor
        /// instead (`axis` is `None`): the ops that read it disagree on its channel axis,
        /// or their axis does not fit its rank. `None` when quantized as asked.
        per_tensor_reason: Option<String>,
    },
    /// The scales of the quantized parameter `of`.
    Scale {
        /// The quantized parameter.
        of: String,
    },
    /// Cast from `from` to the variant's dtype.
    Cast {
        /// The source dtype.
        from: DType,
    },
    /// Written as it was (and so shared with the source tag).
    Unchanged,
}

/// One parameter of a variant tag.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantParam {
    /// Parameter name.
    pub name: String,
    /// Its dtype in the new tag.
    pub dtype: DType,
    /// Its dims.
    pub dims: Vec<u64>,
    /// What happened to it.
    pub change: ParamChange,
    /// True when its tensor file is owned by another tag (no bytes of its own).
    pub shared: bool,
    /// Bytes its own tensor file takes (0 when shared, and when a param listed before it
    /// in the new tag uses the same file: each file is counted once).
    pub stored_bytes: u64,
    /// Source values that were NaN or ±inf, converted anyway because
    /// [`AllowValues::non_finite`] allowed it (0 otherwise: such values are refused).
    pub non_finite: u64,
    /// Finite source values beyond the new dtype's range, stored as ±inf because
    /// [`AllowValues::overflow`] allowed it (cast only; 0 otherwise: refused).
    pub overflowed: u64,
    /// Nonzero finite source values that became ±0 in the new dtype (cast: below half
    /// of the smallest subnormal). Reported, not refused: it is the precision the dtype
    /// has.
    pub underflowed: u64,
}

/// Source values a variant converts only when allowed (both `false` by default:
/// [`quantize`](super::quantize) and [`cast`](super::cast) refuse them with
/// [`ErrorKind::UnrepresentableValues`], naming the parameter, the count and the first
/// index), `AllowValues::default()`. Given to [`quantize`](super::quantize) and
/// [`cast`](super::cast); the report counts what was allowed per parameter
/// ([`VariantParam::non_finite`], [`VariantParam::overflowed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllowValues {
    /// NaN and ±inf in a parameter to convert. `quantize` stores them as 0 and leaves
    /// them out of the scale; `cast` keeps them (NaN stays NaN, ±inf stays ±inf).
    pub non_finite: bool,
    /// (`cast`) finite FP32 values beyond the target dtype's range (|x| ≥ 65520 for
    /// FP16, ≥ 3.3961e38 for BF16), stored as ±inf as IEEE rounding does.
    pub overflow: bool,
}

/// What was allowed or lost in one converted parameter (the report's counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ValueCounts {
    pub(super) non_finite: u64,
    pub(super) overflowed: u64,
    pub(super) underflowed: u64,
}

/// The first value of `values` for which `bad` holds, and how many there are.
pub(super) fn find_bad(
    values: &[f32],
    bad: impl Fn(usize, f32) -> bool,
) -> (u64, Option<(u64, f32)>) {
    let mut count = 0u64;
    let mut first = None;
    for (i, &x) in values.iter().enumerate() {
        if bad(i, x) {
            count += 1;
            if first.is_none() {
                first = Some((i as u64, x));
            }
        }
    }
    (count, first)
}

/// Refuses the NaN/±inf values of parameter `name` (`values`) unless allowed; returns
/// their count. `consequence` says what the variant would store for them.
pub(super) fn check_non_finite(
    name: &str,
    values: &[f32],
    allow: &AllowValues,
    consequence: &'static str,
    from_fp64: bool,
) -> Result<u64> {
    let (count, first) = find_bad(values, |_, x| !x.is_finite());
    if let Some((first_index, first_value)) = first
        && !allow.non_finite
    {
        let problem = if from_fp64 {
            "are NaN or infinite once read as FP32 (FP64 values beyond FP32's range, 3.4e38, become infinite)"
        } else {
            "are NaN or infinite"
        };
        return Err(unrepresentable(
            name,
            problem,
            count,
            (first_index, first_value),
            consequence,
            "non_finite",
        ));
    }
    Ok(count)
}

/// [`ErrorKind::UnrepresentableValues`]: `count` values of parameter `name` `problem`
/// (the first at flat index `first.0`, `first.1`); `consequence` says what the variant
/// would store for them, `allow` names the [`AllowValues`] field that allows them.
pub(super) fn unrepresentable(
    name: &str,
    problem: &str,
    count: u64,
    first: (u64, f32),
    consequence: &str,
    allow: &'static str,
) -> Error {
    let (first_index, first_value) = first;
    ErrorKind::UnrepresentableValues {
        message: format!(
            "parameter {name:?}: {count} value(s) {problem} (the first at flat index \
             {first_index}: {first_value}); {consequence}"
        ),
        allow,
    }
    .into()
}

/// What [`quantize`](super::quantize) or [`cast`](super::cast) wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantReport {
    /// The new tag, spelled as in tags.txt.
    pub tag: String,
    /// The tag it was derived from, spelled as in tags.txt.
    pub source_tag: String,
    /// The graph's encoding, if the source tag has a graph (rewritten in the same encoding).
    pub graph: Option<GraphFormat>,
    /// Every parameter of the new tag, in params.txt order.
    pub params: Vec<VariantParam>,
    /// For an `s3://` archive: the remote append's versions and costs (bytes uploaded,
    /// copied by the store, requests).
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

impl VariantReport {
    /// The parameters that were quantized or cast.
    pub fn changed(&self) -> impl Iterator<Item = &VariantParam> {
        self.params.iter().filter(|p| {
            matches!(
                p.change,
                ParamChange::Quantized { .. } | ParamChange::Cast { .. }
            )
        })
    }

    /// Bytes of tensor files the new tag owns.
    pub fn stored_bytes(&self) -> u64 {
        self.params.iter().map(|p| p.stored_bytes).sum()
    }
}

/// A variant computed in memory, ready to append.
pub(super) struct Variant {
    pub(super) source_tag: String,
    pub(super) graph: Option<(GraphFormat, Vec<u8>)>,
    /// Each parameter: its name, its tensor (an index into `tensors`) and what was done.
    /// Names of one source tensor file share one tensor (converted once, written once).
    pub(super) params: Vec<(String, usize, ParamChange)>,
    /// The distinct tensors of the new tag.
    pub(super) tensors: Vec<Tensor>,
    pub(super) metadata: serde_json::Map<String, serde_json::Value>,
    /// The counts of each converted parameter, by name (absent: all zero).
    pub(super) counts: std::collections::HashMap<String, ValueCounts>,
}

/// Checks the new tag's name and that it does not exist yet, before any work is done.
fn check_new_tag(archive: &Archive, new_tag: &str) -> Result<()> {
    crate::archive::validate_tag_name(new_tag)?;
    if let Some(t) = archive.canonical_tag(new_tag) {
        return Err(ErrorKind::TagExists(t.to_string()).into());
    }
    Ok(())
}

/// The source tag's metadata.json as a JSON object (empty when it has none).
pub(super) fn source_metadata(
    tag: &crate::archive::Tag<'_>,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let Some(bytes) = tag.metadata()? else {
        return Ok(serde_json::Map::new());
    };
    let entry = format!("{}/metadata.json", tag.name());
    crate::json_cost::check_json_cost(&bytes, "estimated memory of parsing metadata.json")
        .map_err(|e| e.in_entry(entry.clone()))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::new(ErrorKind::InvalidInput(format!(
            "metadata.json is not valid JSON: {e}"
        )))
        .in_entry(entry.clone())
    })?;
    let serde_json::Value::Object(m) = v else {
        return Err(Error::new(ErrorKind::InvalidInput(
            "metadata.json is not a JSON object".into(),
        ))
        .in_entry(entry));
    };
    Ok(m)
}

/// The keys of the source tag's metadata `meta` that belong to users, to carry over into
/// the variant: everything but the keys modelzip writes itself (`created`, the variant
/// records, and the checkpoint keys `step` and `metrics`, which would make the variant
/// look like a checkpoint to a [`Checkpointer`](crate::checkpoint::Checkpointer)).
pub(super) fn user_metadata(
    mut meta: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    for k in ["created", QUANTIZATION, CAST]
        .into_iter()
        .chain(crate::checkpoint::CHECKPOINT_KEYS)
    {
        meta.remove(k);
    }
    meta
}

/// The metadata.json record of a quantized variant.
pub(super) const QUANTIZATION: &str = "quantization";
/// The metadata.json record of a cast variant.
pub(super) const CAST: &str = "cast";

/// What to derive from instead of a variant: the source tag its `record` names, if any.
pub(super) fn derive_instead(
    meta: &serde_json::Map<String, serde_json::Value>,
    record: &str,
) -> String {
    match meta
        .get(record)
        .and_then(|r| r.get("source_tag"))
        .and_then(serde_json::Value::as_str)
    {
        Some(s) => format!("its source tag {s:?}"),
        None => "a float tag".into(),
    }
}

/// Why `tag` (with metadata `meta`) is already quantized, if it is: it has a
/// `<name>@scale` parameter beside a parameter `<name>`, or a quantization record.
pub(super) fn quantized_because(
    tag: &crate::archive::Tag<'_>,
    meta: &serde_json::Map<String, serde_json::Value>,
) -> Option<String> {
    let names: std::collections::HashSet<&str> =
        tag.params().iter().map(|p| p.name.as_str()).collect();
    let scale = tag.params().iter().find_map(|p| {
        let of = p.name.strip_suffix("@scale")?;
        names.contains(of).then_some((of, p.name.as_str()))
    });
    match scale {
        Some((of, scale)) => Some(format!(
            "already has a parameter {scale:?} (the scales of {of:?})"
        )),
        None => meta
            .contains_key(QUANTIZATION)
            .then(|| format!("already has a {QUANTIZATION:?} record in its metadata.json")),
    }
}

/// The dtype a cast variant (metadata `meta`) was cast to, if it is one.
pub(super) fn cast_dtype(meta: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let r = meta.get(CAST)?;
    Some(
        r.get("dtype")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("FP16/BF16")
            .to_string(),
    )
}

/// The progress of deriving tag `from_tag` of `archive`: each source parameter is one
/// unit when derived and one when written (scale params are not counted).
fn progress_for<'a>(archive: &Archive, from_tag: &str, opts: &'a WriteOptions) -> Ticker<'a> {
    let n = archive.tag(from_tag).map_or(0, |t| t.params().len() as u64);
    Ticker::from_hook(opts.progress.as_ref(), 2 * n)
}

/// Derives tag `new_tag` from tag `from_tag` of the archive at `path` with `build` and
/// appends it: to the file in place, or, for an `s3://` URL (feature `remote`), by a
/// remote append ([`RemoteAppender`](crate::remote::RemoteAppender): the source tag's
/// tensors read by ranges, the new tag's bytes uploaded, the rest copied by the store),
/// committed only if the object is still the version the source was read from.
pub(super) fn derive_variant(
    path: &Path,
    from_tag: &str,
    new_tag: &str,
    write: &WriteOptions,
    build: impl FnOnce(&Archive, &mut Ticker<'_>) -> Result<Variant>,
) -> Result<VariantReport> {
    #[cfg(feature = "remote")]
    if let Some(url) = crate::archive::url_of(path) {
        return derive_remote(url, from_tag, new_tag, write, build);
    }
    let mut ticker;
    let variant = {
        let archive = Archive::open(path)?;
        check_new_tag(&archive, new_tag).map_err(|e| e.in_file(path))?;
        ticker = progress_for(&archive, from_tag, write);
        build(&archive, &mut ticker).map_err(|e| e.in_file(path))?
    };
    let mut app = Appender::open_with(path, AppendMode::InPlace, write)?;
    let w = app.begin_tag(new_tag).map_err(|e| e.in_file(path))?;
    write_variant(w, &variant, &mut ticker).map_err(|e| e.in_file(path))?;
    app.finish()?;
    report_of(&Archive::open(path)?, new_tag, variant)
}

/// [`derive_variant`] of the archive at an `s3://` URL.
#[cfg(feature = "remote")]
fn derive_remote(
    url: &str,
    from_tag: &str,
    new_tag: &str,
    write: &WriteOptions,
    build: impl FnOnce(&Archive, &mut Ticker<'_>) -> Result<Variant>,
) -> Result<VariantReport> {
    use crate::remote::{RemoteAppender, RemoteOptions};
    let remote = RemoteOptions::default();
    crate::remote::check_writable(url, &remote)?;
    let archive = remote.open(url)?;
    check_new_tag(&archive, new_tag).map_err(|e| e.in_file(url))?;
    let mut ticker = progress_for(&archive, from_tag, write);
    let variant = build(&archive, &mut ticker).map_err(|e| e.in_file(url))?;
    let mut app = RemoteAppender::open(url, &remote, write)?;
    // The new tag goes onto the version its source was read from, or nowhere.
    app.check_opened(archive.remote_version())?;
    drop(archive);
    let w = app.begin_tag(new_tag).map_err(|e| e.in_file(url))?;
    write_variant(w, &variant, &mut ticker).map_err(|e| e.in_file(url))?;
    let done = app.finish()?;
    let mut report = report_of(&remote.open(url)?, new_tag, variant)?;
    report.remote = Some(done);
    Ok(report)
}

/// Writes `v` into the new tag `w`.
fn write_variant(
    mut w: crate::archive::TagWriter<'_>,
    v: &Variant,
    ticker: &mut Ticker<'_>,
) -> Result<()> {
    if let Some((enc, bytes)) = &v.graph {
        w.graph(*enc, bytes)?;
    }
    // The reference each tensor of the pool got when its first name was written: its
    // other names list it without hashing it again.
    let mut refs = vec![None; v.tensors.len()];
    for (name, i, change) in &v.params {
        match &refs[*i] {
            Some(r) => w.param_ref(name, Clone::clone(r))?,
            None => {
                #[cfg(test)]
                work::note(&work::WRITTEN);
                refs[*i] = Some(w.param_returning_ref(name, &v.tensors[*i].view())?);
            }
        }
        if !matches!(change, ParamChange::Scale { .. }) {
            ticker.tick();
        }
    }
    let meta = serde_json::to_vec(&serde_json::Value::Object(v.metadata.clone()))
        .map_err(|e| ErrorKind::InvalidInput(format!("cannot render metadata.json: {e}")))?;
    w.metadata(&meta)?;
    w.finish()
}

/// The report of variant `v`, written as tag `new_tag` of `archive` (read back for
/// what is shared and stored).
fn report_of(archive: &Archive, new_tag: &str, v: Variant) -> Result<VariantReport> {
    let tag = archive.tag(new_tag)?;
    let mut params = Vec::with_capacity(v.params.len());
    // The tag's own files counted so far: two params of equal values (two per-tensor
    // scales, say) are one file, whose bytes the tag holds once.
    let mut counted = std::collections::HashSet::new();
    for ((name, i, change), entry) in v.params.into_iter().zip(tag.params()) {
        let t = &v.tensors[i];
        let shared = entry.location.shared;
        let stored_bytes = if shared || !counted.insert(entry.location.entry()) {
            0
        } else {
            archive
                .entry_stored_size(&entry.location.entry)
                .unwrap_or(0)
        };
        let counts = v.counts.get(&name).copied().unwrap_or_default();
        params.push(VariantParam {
            non_finite: counts.non_finite,
            overflowed: counts.overflowed,
            underflowed: counts.underflowed,
            name,
            dtype: t.dtype(),
            dims: t.dims().to_vec(),
            change,
            shared,
            stored_bytes,
        });
    }
    Ok(VariantReport {
        tag: tag.name().to_string(),
        source_tag: v.source_tag,
        graph: v.graph.map(|(e, _)| e),
        params,
        #[cfg(feature = "remote")]
        remote: None,
    })
}

/// Test counters of a variant's work on this thread: tensors read and converted (or
/// copied) by `build`, and tensors written (hashed) by `write_variant`.
#[cfg(test)]
pub(super) mod work {
    use std::cell::Cell;
    thread_local! {
        /// Source tensors read and converted, quantized or copied into the pool.
        pub(in crate::variants) static CONVERTED: Cell<u64> = const { Cell::new(0) };
        /// Tensors given to `TagWriter::param` (each hashed).
        pub(in crate::variants) static WRITTEN: Cell<u64> = const { Cell::new(0) };
    }

    pub(in crate::variants) fn note(c: &'static std::thread::LocalKey<Cell<u64>>) {
        c.with(|c| c.set(c.get() + 1));
    }

    /// The counts so far, reset to 0: (converted, written).
    pub(in crate::variants) fn take() -> (u64, u64) {
        (
            CONVERTED.with(|c| c.replace(0)),
            WRITTEN.with(|c| c.replace(0)),
        )
    }
}

#[cfg(test)]
mod shared_file_tests {
    use super::work;
    use crate::archive::{Archive, ArchiveWriter, TagBuilder, WriteOptions};
    use crate::tensor::{DType, Tensor};
    use crate::variants::{AllowValues, ParamChange, QuantizeOptions, cast, quantize};

    const NAMES: usize = 40;

    /// Tag "fp32": `NAMES` weights `w{i}` listing one tensor file (a NaN in it), a
    /// distinct weight `b`, and three names of one INT64 file.
    fn shared_archive(dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("m.zip");
        let mut vals: Vec<f32> = (0..32).map(|i| i as f32 - 7.5).collect();
        vals[3] = f32::NAN;
        let w = Tensor::from_slice(vec![8, 4], &vals).unwrap();
        let b = Tensor::from_slice(vec![4, 4], &[0.5f32; 16]).unwrap();
        let ids = Tensor::from_slice(vec![3], &[1i64, 2, 3]).unwrap();
        let mut tag = TagBuilder::new("fp32");
        for i in 0..NAMES {
            tag = tag.param(format!("w{i}"), w.clone());
        }
        tag = tag.param("b", b);
        for i in 0..3 {
            tag = tag.param(format!("ids{i}"), ids.clone());
        }
        let opts = WriteOptions {
            fsync: false,
            ..WriteOptions::default()
        };
        let mut wr = ArchiveWriter::create_with(&path, &opts).unwrap();
        wr.add_tag(tag).unwrap();
        wr.finish().unwrap();
        path
    }

    fn entries(path: &std::path::Path, tag: &str) -> Vec<(String, String)> {
        let a = Archive::open(path).unwrap();
        let t = a.tag(tag).unwrap();
        t.params()
            .iter()
            .map(|p| (p.name.clone(), p.location.entry.to_string()))
            .collect()
    }

    /// Names listing one tensor file cost one read, one conversion and one write of
    /// it (they cost one each per name), and each name is still reported as before.
    #[test]
    fn names_of_one_file_are_converted_and_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = shared_archive(dir.path());
        let allow = AllowValues {
            non_finite: true,
            overflow: false,
        };
        let opts = WriteOptions {
            fsync: false,
            ..WriteOptions::default()
        };

        work::take();
        let r = cast(&path, "fp32", "fp16", DType::Fp16, &allow, &opts).unwrap();
        // Three distinct files: read and converted (or copied) once, written once.
        assert_eq!(work::take(), (3, 3));
        assert_eq!(r.params.len(), NAMES + 4);
        for p in &r.params[..NAMES] {
            assert_eq!(p.change, ParamChange::Cast { from: DType::Fp32 });
            assert_eq!((p.dtype, p.dims.as_slice()), (DType::Fp16, &[8u64, 4][..]));
            assert_eq!(p.non_finite, 1, "{}", p.name);
        }
        assert!(r.params[NAMES].stored_bytes > 0);
        assert!(r.params[1].stored_bytes == 0 && r.params[0].stored_bytes > 0);
        for p in &r.params[NAMES + 1..] {
            assert!(p.change == ParamChange::Unchanged && p.shared);
        }
        let e = entries(&path, "fp16");
        assert!(e[..NAMES].iter().all(|(_, f)| *f == e[0].1));
        assert_ne!(e[NAMES].1, e[0].1);
        let a = Archive::open(&path).unwrap();
        let t = a.tag("fp16").unwrap();
        let w7 = t.param("w7").unwrap().view().to_f32_vec().unwrap();
        assert_eq!(w7[5], -2.5);
        assert!(w7[3].is_nan());
        drop(a);

        let per_channel = QuantizeOptions { per_channel: true };
        let r = quantize(&path, "fp32", "int8", &per_channel, &allow, &opts).unwrap();
        // The weights (two files) quantized once each, their tensor and scale written
        // once; the INT64 file copied and written once.
        assert_eq!(work::take(), (3, 5));
        assert_eq!(r.params.len(), 2 * (NAMES + 1) + 3);
        for (i, pair) in r.params[..2 * NAMES].chunks(2).enumerate() {
            assert_eq!(pair[0].name, format!("w{i}"));
            assert!(matches!(
                &pair[0].change,
                ParamChange::Quantized { scale, .. } if *scale == format!("w{i}@scale")
            ));
            assert_eq!(pair[0].non_finite, 1);
            assert_eq!(pair[1].name, format!("w{i}@scale"));
            assert_eq!(
                pair[1].change,
                ParamChange::Scale {
                    of: format!("w{i}")
                }
            );
        }
        let e = entries(&path, "int8");
        assert!(e[..2 * NAMES].iter().step_by(2).all(|(_, f)| *f == e[0].1));
        assert!(e[1..2 * NAMES].iter().step_by(2).all(|(_, f)| *f == e[1].1));
        let a = Archive::open(&path).unwrap();
        assert!(a.verify().is_ok(), "{:?}", a.verify());
    }
}
