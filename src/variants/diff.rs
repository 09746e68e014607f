//! Comparing two tags: parameters added, removed, changed (with value differences), and
//! which of the identical ones share a file and which are copies.

use crate::archive::{Archive, Tag};
use crate::error::Result;
use crate::tensor::{DType, TensorView};
use std::collections::HashMap;

/// How the graphs of two tags compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphChange {
    /// Neither tag has a graph.
    None,
    /// Same encoding, same bytes.
    Same,
    /// Both have a graph, and the bytes or encoding differ.
    Changed,
    /// Only the second tag has a graph.
    Added,
    /// Only the first tag has a graph.
    Removed,
}

impl GraphChange {
    /// Lower-case name (`none`, `same`, `changed`, `added`, `removed`).
    pub fn name(self) -> &'static str {
        match self {
            GraphChange::None => "none",
            GraphChange::Same => "same",
            GraphChange::Changed => "changed",
            GraphChange::Added => "added",
            GraphChange::Removed => "removed",
        }
    }
}

/// A parameter present in both tags with different contents.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDiff {
    /// Parameter name.
    pub name: String,
    /// dtype in the first tag.
    pub dtype_a: DType,
    /// dtype in the second tag.
    pub dtype_b: DType,
    /// dims in the first tag.
    pub dims_a: Vec<u64>,
    /// dims in the second tag.
    pub dims_b: Vec<u64>,
    /// True when an INT8 side was dequantized with its `<name>@scale` before comparing.
    pub dequantized: bool,
    /// Largest |a − b| over the elements; `None` when the values cannot be compared
    /// (different dims, non-float dtypes, an INT8 side without usable scales).
    pub max_abs_diff: Option<f64>,
    /// `max_abs_diff` divided by the largest |a| (the first tag's range); `None` when not
    /// comparable or when the first tensor is all zeros.
    pub max_rel_diff: Option<f64>,
}

/// What [`diff_tags`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct TagDiff {
    /// The first tag, spelled as in tags.txt.
    pub tag_a: String,
    /// The second tag, spelled as in tags.txt.
    pub tag_b: String,
    /// How the graphs compare.
    pub graph: GraphChange,
    /// Parameters only in the second tag, in its order.
    pub added: Vec<String>,
    /// Parameters only in the first tag, in its order.
    pub removed: Vec<String>,
    /// Parameters in both whose dtype, dims, LoD or data differ.
    pub changed: Vec<ParamDiff>,
    /// Identical parameters stored once: both tags point at the same tensor file.
    pub shared: Vec<String>,
    /// Identical parameters stored twice (same dtype, dims, LoD and bytes, two files).
    pub copied: Vec<String>,
}

impl TagDiff {
    /// True when the tags hold the same parameters with the same values and the same graph.
    pub fn is_identical(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && matches!(self.graph, GraphChange::None | GraphChange::Same)
    }
}

/// Compares tags `a` and `b` of `archive` (names ignore ASCII case).
pub fn diff_tags(archive: &Archive, a: &str, b: &str) -> Result<TagDiff> {
    let ta = archive.tag(a)?;
    let tb = archive.tag(b)?;
    let graph = match (ta.graph()?, tb.graph()?) {
        (None, None) => GraphChange::None,
        (Some(_), None) => GraphChange::Removed,
        (None, Some(_)) => GraphChange::Added,
        (Some((ea, ga)), Some((eb, gb))) => {
            if ea == eb && ga == gb {
                GraphChange::Same
            } else {
                GraphChange::Changed
            }
        }
    };
    let in_b: HashMap<&str, usize> = tb
        .params()
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    let mut d = TagDiff {
        tag_a: ta.name().to_string(),
        tag_b: tb.name().to_string(),
        graph,
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
        shared: Vec::new(),
        copied: Vec::new(),
    };
    let mut same_pairs: std::collections::HashSet<(&str, &str)> = Default::default();
    // Which of tb's parameters ta has too (no second name index).
    let mut in_both = vec![false; tb.params().len()];
    for pa in ta.params() {
        let Some(&ib) = in_b.get(pa.name.as_str()) else {
            d.removed.push(pa.name.clone());
            continue;
        };
        let pb = &tb.params()[ib];
        in_both[ib] = true;
        if pa.location.entry == pb.location.entry {
            d.shared.push(pa.name.clone());
            continue;
        }
        // Many names may refer to one pair of files: compare each pair once.
        let pair = (pa.location.entry.as_str(), pb.location.entry.as_str());
        if same_pairs.contains(&pair) {
            d.copied.push(pa.name.clone());
            continue;
        }
        let da = ta.tensor(&pa.location)?;
        let db = tb.tensor(&pb.location)?;
        let (va, vb) = (da.view(), db.view());
        if va.dtype() == vb.dtype()
            && va.dims() == vb.dims()
            && va.lod() == vb.lod()
            && va.data() == vb.data()
        {
            same_pairs.insert(pair);
            d.copied.push(pa.name.clone());
            continue;
        }
        d.changed.push(compare(&pa.name, &ta, &va, &tb, &vb)?);
    }
    d.added = tb
        .params()
        .iter()
        .zip(&in_both)
        .filter(|(_, both)| !**both)
        .map(|(p, _)| p.name.clone())
        .collect();
    Ok(d)
}

/// The values of `v` as f32, dequantizing INT8 with the tag's `<name>@scale`.
/// `None` when they cannot be had. The bool says whether it dequantized.
fn values(tag: &Tag<'_>, name: &str, v: &TensorView<'_>) -> Result<Option<(Vec<f32>, bool)>> {
    if v.dtype().is_float() {
        return Ok(Some((v.to_f32_vec()?, false)));
    }
    if v.dtype() != DType::Int8 {
        return Ok(None);
    }
    let scale_name = format!("{name}@scale");
    if !tag.params().iter().any(|p| p.name == scale_name) {
        return Ok(None);
    }
    let st = tag.param(&scale_name)?;
    let sv = st.view();
    if !sv.dtype().is_float() {
        return Ok(None);
    }
    let scales = sv.to_f32_vec()?;
    let q = v.to_vec::<i8>()?;
    let dims = v.dims();
    let axis = if scales.len() == 1 {
        None
    } else {
        match quantization_axis(tag, name) {
            Some(a) if dims.get(a).is_some_and(|&c| c == scales.len() as u64) => Some(a),
            _ => return Ok(None),
        }
    };
    let Some(a) = axis else {
        let s = scales.first().copied().unwrap_or(0.0);
        return Ok(Some((q.iter().map(|&x| f32::from(x) * s).collect(), true)));
    };
    let inner: u64 = dims.get(a + 1..).unwrap_or(&[]).iter().product();
    let channels = scales.len() as u64;
    let inner = inner.max(1);
    let out = q
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let c = ((i as u64 / inner) % channels) as usize;
            f32::from(x) * scales.get(c).copied().unwrap_or(0.0)
        })
        .collect();
    Ok(Some((out, true)))
}

/// The per-channel axis metadata.json records for `name`, if any.
fn quantization_axis(tag: &Tag<'_>, name: &str) -> Option<usize> {
    let bytes = tag.metadata().ok()??;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let a = v
        .get("quantization")?
        .get("params")?
        .get(name)?
        .get("axis")?;
    usize::try_from(a.as_u64()?).ok()
}

fn compare(
    name: &str,
    ta: &Tag<'_>,
    va: &TensorView<'_>,
    tb: &Tag<'_>,
    vb: &TensorView<'_>,
) -> Result<ParamDiff> {
    let mut d = ParamDiff {
        name: name.to_string(),
        dtype_a: va.dtype(),
        dtype_b: vb.dtype(),
        dims_a: va.dims().to_vec(),
        dims_b: vb.dims().to_vec(),
        dequantized: false,
        max_abs_diff: None,
        max_rel_diff: None,
    };
    if va.dims() != vb.dims() {
        return Ok(d);
    }
    let (Some((xa, qa)), Some((xb, qb))) = (values(ta, name, va)?, values(tb, name, vb)?) else {
        return Ok(d);
    };
    d.dequantized = qa || qb;
    let mut max_abs = 0f64;
    let mut range = 0f64;
    for (&a, &b) in xa.iter().zip(&xb) {
        let (a, b) = (f64::from(a), f64::from(b));
        if a.is_nan() && b.is_nan() {
            continue;
        }
        let diff = if a == b { 0.0 } else { (a - b).abs() };
        max_abs = if diff.is_nan() {
            f64::INFINITY
        } else {
            max_abs.max(diff)
        };
        if a.is_finite() {
            range = range.max(a.abs());
        }
    }
    d.max_abs_diff = Some(max_abs);
    d.max_rel_diff = (range > 0.0).then(|| max_abs / range);
    Ok(d)
}
