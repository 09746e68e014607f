//! Comparing two tags: parameters added, removed, changed (with value differences), and
//! which of the identical ones share a file and which are copies.

use crate::archive::{Archive, Tag};
use crate::error::{ErrorKind, Result};
use crate::tensor::{DType, TensorView};
use std::hash::BuildHasher;

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
    /// Largest |a − b| over the elements (compared as FP32 widened to f64); `None` when
    /// the values cannot be compared (different dims, non-float dtypes, an INT8 side
    /// without usable scales). NaN against NaN and an infinity against the same infinity
    /// count as equal; NaN against anything else, or an infinity against anything else,
    /// make it +inf.
    pub max_abs_diff: Option<f64>,
    /// `max_abs_diff` divided by the largest finite |a| (the first tag's range); `None`
    /// when not comparable or when the first tensor has no finite nonzero value.
    pub max_rel_diff: Option<f64>,
    /// Elements where the two sides differ and one of them is NaN or ±inf (each makes
    /// `max_abs_diff` +inf); 0 when not comparable.
    pub non_finite_mismatches: u64,
    /// `max_abs_diff` over the elements finite on both sides: the error of the rest of
    /// the tensor when `non_finite_mismatches` makes `max_abs_diff` +inf (equal to it
    /// otherwise).
    pub finite_max_abs_diff: Option<f64>,
    /// `finite_max_abs_diff` divided by the same range as `max_rel_diff`.
    pub finite_max_rel_diff: Option<f64>,
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
    #[cfg_attr(not(feature = "test-internals"), allow(dead_code))]
    pub fn is_identical(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && matches!(self.graph, GraphChange::None | GraphChange::Same)
    }
}

/// Compares tags `a` and `b` of `archive` (names ignore ASCII case), collecting every
/// name. [`compare_tags`] gives the same answer without copying the names.
pub fn diff_tags(archive: &Archive, a: &str, b: &str) -> Result<TagDiff> {
    let c = compare_tags(archive, a, b)?;
    Ok(TagDiff {
        tag_a: c.tag_a().name().to_string(),
        tag_b: c.tag_b().name().to_string(),
        graph: c.graph(),
        added: c.added().map(str::to_string).collect(),
        removed: c.removed().map(str::to_string).collect(),
        changed: c.changed().collect(),
        shared: c.shared().map(str::to_string).collect(),
        copied: c.copied().map(str::to_string).collect(),
    })
}

/// What a parameter of the first tag is in the second: one of these, or the position
/// of its [`Change`].
const REMOVED: u32 = u32::MAX;
const SHARED: u32 = u32::MAX - 1;
const COPIED: u32 = u32::MAX - 2;
/// Parameters past this many in one tag are refused (they could not be classified).
const MAX_PARAMS: usize = (u32::MAX - 3) as usize;

/// What a changed pair of tensor files differs by, kept once per pair (however many
/// names refer to it): [`TagComparison::changed`] reads no tensor.
#[derive(Debug, Clone)]
struct Change {
    dtype_a: DType,
    dtype_b: DType,
    dims_a: Vec<u64>,
    dims_b: Vec<u64>,
    dequantized: bool,
    max_abs_diff: Option<f64>,
    max_rel_diff: Option<f64>,
    non_finite_mismatches: u64,
    finite_max_abs_diff: Option<f64>,
    finite_max_rel_diff: Option<f64>,
}

/// Two tags compared, holding a few bytes per parameter beside the tags' own tables (no
/// copies of names): [`TagComparison::added`], [`TagComparison::removed`], ... iterate
/// the names in the tags' order, so a caller can write a diff of millions of names as
/// it goes. Built by [`compare_tags`].
pub struct TagComparison<'a> {
    a: Tag<'a>,
    b: Tag<'a>,
    graph: GraphChange,
    /// Per parameter of `a`: `REMOVED`, `SHARED`, `COPIED` or a position in `changes`.
    class: Vec<u32>,
    /// Per parameter of `b`: true when `a` has it too.
    in_a: Vec<bool>,
    changes: Vec<Change>,
    counts: [usize; 5],
}

/// Compares tags `a` and `b` of `archive` (names ignore ASCII case). Each pair of tensor
/// files is compared once however many names refer to it (a pair with an INT8 side once
/// per pair of its names' `@scale` files and per-channel axes, which its dequantization
/// depends on).
pub fn compare_tags<'a>(archive: &'a Archive, a: &str, b: &str) -> Result<TagComparison<'a>> {
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
    let (pa_all, pb_all) = (ta.params(), tb.params());
    if pa_all.len() > MAX_PARAMS || pb_all.len() > MAX_PARAMS {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::LimitExceeded {
                what: "parameters of a tag to diff",
                size: pa_all.len().max(pb_all.len()) as u64,
                limit: MAX_PARAMS as u64,
            },
        ));
    }
    let hasher = crate::keyed::KeyedState::default();
    // b's names by position (4 bytes a name; the names stay in the tag's table).
    let mut in_b = hashbrown::HashTable::<u32>::with_capacity(pb_all.len());
    for (i, p) in pb_all.iter().enumerate() {
        let h = hasher.hash_one(p.name.as_str());
        if in_b
            .find(h, |&j| pb_all[j as usize].name == p.name)
            .is_none()
        {
            in_b.insert_unique(h, i as u32, |&j| {
                hasher.hash_one(pb_all[j as usize].name.as_str())
            });
        }
    }
    // Pairs of tensor files already compared, by a parameter of `a` that has the answer.
    let pair_hash = |ea: &str, eb: &str| hasher.hash_one((ea, eb));
    let mut pairs = hashbrown::HashTable::<u32>::new();
    // Pairs with an INT8 side, by their first parameter: each name's class also depends on
    // its `@scale` files and axes (`Int8Key`), one comparison per distinct key.
    let mut int8_pairs = std::collections::HashSet::<u32>::new();
    let mut int8_classes = std::collections::HashMap::<Int8Key, u32>::new();
    let mut c = Classes {
        class: Vec::with_capacity(pa_all.len()),
        partner: Vec::with_capacity(pa_all.len()),
        in_a: vec![false; pb_all.len()],
        changes: Vec::new(),
    };
    // Per-channel axes of each side's INT8 params, read from metadata.json once.
    let (axes_a, axes_b) = (QuantAxes::default(), QuantAxes::default());
    for pa in pa_all {
        let h = hasher.hash_one(pa.name.as_str());
        let Some(&ib) = in_b.find(h, |&j| pb_all[j as usize].name == pa.name) else {
            c.class.push(REMOVED);
            c.partner.push(0);
            continue;
        };
        c.partner.push(ib);
        let pb = &pb_all[ib as usize];
        c.in_a[ib as usize] = true;
        if pa.location.entry == pb.location.entry {
            c.class.push(SHARED);
            continue;
        }
        // Many names may refer to one pair of files: compare each pair once.
        let (ea, eb) = (pa.location.entry.as_str(), pb.location.entry.as_str());
        let ph = pair_hash(ea, eb);
        let same_pair = |&i: &u32| {
            let i = i as usize;
            pa_all[i].location.entry.as_str() == ea
                && pb_all[c.partner[i] as usize].location.entry.as_str() == eb
        };
        let found = pairs.find(ph, same_pair).copied();
        let int8_key = |rep: u32| Int8Key {
            pair: rep,
            scale_a: scale_entry(&ta, &pa.name),
            scale_b: scale_entry(&tb, &pa.name),
            axis_a: axes_a.of(&ta, &pa.name),
            axis_b: axes_b.of(&tb, &pa.name),
        };
        // The key of a pair with an INT8 side seen before, built once (its `@scale`
        // lookups) for the look-up and, on a miss, the insert below.
        let mut seen_key = None;
        if let Some(rep) = found {
            if !int8_pairs.contains(&rep) {
                c.class.push(c.class[rep as usize]);
                continue;
            }
            let key = int8_key(rep);
            if let Some(&class) = int8_classes.get(&key) {
                c.class.push(class);
                continue;
            }
            seen_key = Some(key);
        }
        let da = ta.tensor(&pa.location)?;
        let db = tb.tensor(&pb.location)?;
        let (va, vb) = (da.view(), db.view());
        let by_pair = va.dtype() != DType::Int8 && vb.dtype() != DType::Int8;
        let class = if va.dtype() == vb.dtype()
            && va.dims() == vb.dims()
            && va.lod() == vb.lod()
            && va.data() == vb.data()
        {
            COPIED
        } else {
            let d = compare(&pa.name, (&ta, &axes_a), &va, (&tb, &axes_b), &vb)?;
            c.changes.push(Change {
                dtype_a: d.dtype_a,
                dtype_b: d.dtype_b,
                dims_a: d.dims_a,
                dims_b: d.dims_b,
                dequantized: d.dequantized,
                max_abs_diff: d.max_abs_diff,
                max_rel_diff: d.max_rel_diff,
                non_finite_mismatches: d.non_finite_mismatches,
                finite_max_abs_diff: d.finite_max_abs_diff,
                finite_max_rel_diff: d.finite_max_rel_diff,
            });
            (c.changes.len() - 1) as u32
        };
        let me = c.class.len() as u32;
        match found {
            // A pair with an INT8 side seen before, under other `@scale` files or axes.
            // (Its key was built above: a pair without one was `continue`d.)
            Some(_) => {
                if let Some(key) = seen_key {
                    int8_classes.insert(key, class);
                }
            }
            None => {
                if class != COPIED && !by_pair {
                    int8_pairs.insert(me);
                    int8_classes.insert(int8_key(me), class);
                }
                let partner = &c.partner;
                pairs.insert_unique(ph, me, |&i| {
                    let i = i as usize;
                    pair_hash(
                        pa_all[i].location.entry.as_str(),
                        pb_all[partner[i] as usize].location.entry.as_str(),
                    )
                });
            }
        }
        c.class.push(class);
    }
    let mut counts = [0; 5];
    for &k in &c.class {
        counts[match k {
            REMOVED => 1,
            SHARED => 3,
            COPIED => 4,
            _ => 2,
        }] += 1;
    }
    counts[0] = c.in_a.iter().filter(|&&x| !x).count();
    Ok(TagComparison {
        a: ta,
        b: tb,
        graph,
        class: c.class,
        in_a: c.in_a,
        changes: c.changes,
        counts,
    })
}

/// What the comparison of a pair of tensor files with an INT8 side depends on besides
/// the pair (by its first parameter): each side's `@scale` file and per-channel axis.
#[derive(PartialEq, Eq, Hash)]
struct Int8Key {
    pair: u32,
    scale_a: Option<String>,
    scale_b: Option<String>,
    axis_a: Option<usize>,
    axis_b: Option<usize>,
}

/// The entry of parameter `name`'s `@scale` sibling in `tag`, if it has one.
fn scale_entry(tag: &Tag<'_>, name: &str) -> Option<String> {
    let i = tag.param_index(&format!("{name}@scale")).ok()?;
    Some(tag.params().get(i)?.location.entry.to_string())
}

/// [`TagComparison`]'s tables while they are built.
struct Classes {
    class: Vec<u32>,
    /// Per parameter of `a`: the position of the same name in `b` (0 when removed).
    partner: Vec<u32>,
    in_a: Vec<bool>,
    changes: Vec<Change>,
}

impl<'a> TagComparison<'a> {
    /// The first tag.
    pub fn tag_a(&self) -> &Tag<'a> {
        &self.a
    }

    /// The second tag.
    pub fn tag_b(&self) -> &Tag<'a> {
        &self.b
    }

    /// How the graphs compare.
    pub fn graph(&self) -> GraphChange {
        self.graph
    }

    /// How many parameters are added, removed, changed, shared and copied, in that order.
    pub fn counts(&self) -> [usize; 5] {
        self.counts
    }

    /// True when the tags hold the same parameters with the same values and the same graph.
    pub fn is_identical(&self) -> bool {
        self.counts[..3] == [0, 0, 0] && matches!(self.graph, GraphChange::None | GraphChange::Same)
    }

    /// Parameters only in the second tag, in its order.
    pub fn added(&self) -> impl Iterator<Item = &str> + '_ {
        self.b
            .params()
            .iter()
            .zip(&self.in_a)
            .filter(|(_, both)| !**both)
            .map(|(p, _)| p.name.as_str())
    }

    fn of_class(&self, want: u32) -> impl Iterator<Item = &str> + '_ {
        self.a
            .params()
            .iter()
            .zip(&self.class)
            .filter(move |(_, k)| **k == want)
            .map(|(p, _)| p.name.as_str())
    }

    /// Parameters only in the first tag, in its order.
    pub fn removed(&self) -> impl Iterator<Item = &str> + '_ {
        self.of_class(REMOVED)
    }

    /// Identical parameters stored once (both tags point at the same tensor file).
    pub fn shared(&self) -> impl Iterator<Item = &str> + '_ {
        self.of_class(SHARED)
    }

    /// Identical parameters stored twice (same dtype, dims, LoD and bytes, two files).
    pub fn copied(&self) -> impl Iterator<Item = &str> + '_ {
        self.of_class(COPIED)
    }

    /// Parameters in both whose dtype, dims, LoD or data differ, in the first tag's
    /// order; each [`ParamDiff`] is built when it is reached, from what
    /// [`compare_tags`] found for its pair of files (no tensor is read again).
    pub fn changed(&self) -> impl Iterator<Item = ParamDiff> + '_ {
        self.a
            .params()
            .iter()
            .zip(&self.class)
            .filter(|(_, k)| **k < COPIED)
            .map(move |(pa, &k)| {
                let ch = &self.changes[k as usize];
                ParamDiff {
                    name: pa.name.clone(),
                    dtype_a: ch.dtype_a,
                    dtype_b: ch.dtype_b,
                    dims_a: ch.dims_a.clone(),
                    dims_b: ch.dims_b.clone(),
                    dequantized: ch.dequantized,
                    max_abs_diff: ch.max_abs_diff,
                    max_rel_diff: ch.max_rel_diff,
                    non_finite_mismatches: ch.non_finite_mismatches,
                    finite_max_abs_diff: ch.finite_max_abs_diff,
                    finite_max_rel_diff: ch.finite_max_rel_diff,
                }
            })
    }
}

/// The values of `v` as f32, dequantizing INT8 with the tag's `<name>@scale`.
/// `None` when they cannot be had. The bool says whether it dequantized.
fn values(
    (tag, axes): (&Tag<'_>, &QuantAxes),
    name: &str,
    v: &TensorView<'_>,
) -> Result<Option<(Vec<f32>, bool)>> {
    if v.dtype().is_float() {
        return Ok(Some((v.to_f32_vec()?, false)));
    }
    if v.dtype() != DType::Int8 {
        return Ok(None);
    }
    let scale_name = format!("{name}@scale");
    // (By the tag's name index: a scan of its params per INT8 param was quadratic.)
    let st = match tag.param(&scale_name) {
        Ok(st) => st,
        Err(e) if matches!(e.kind(), ErrorKind::ParamNotFound(..)) => return Ok(None),
        Err(e) => return Err(e),
    };
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
        match axes.of(tag, name) {
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

/// The per-channel axes a tag's metadata.json records (`quantization.params.<name>.axis`),
/// parsed on first use and kept: parsing it again for every INT8 param was quadratic.
#[derive(Default)]
struct QuantAxes(std::cell::OnceCell<std::collections::HashMap<String, usize>>);

impl QuantAxes {
    fn of(&self, tag: &Tag<'_>, name: &str) -> Option<usize> {
        self.0
            .get_or_init(|| {
                let parsed = tag
                    .metadata()
                    .ok()
                    .flatten()
                    .filter(|bytes| {
                        crate::json_cost::check_json_cost(bytes, "metadata.json").is_ok()
                    })
                    .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
                let Some(params) = parsed
                    .as_ref()
                    .and_then(|v| v.get("quantization")?.get("params")?.as_object())
                else {
                    return Default::default();
                };
                params
                    .iter()
                    .filter_map(|(k, p)| {
                        let a = usize::try_from(p.get("axis")?.as_u64()?).ok()?;
                        Some((k.clone(), a))
                    })
                    .collect()
            })
            .get(name)
            .copied()
    }
}

fn compare(
    name: &str,
    ta: (&Tag<'_>, &QuantAxes),
    va: &TensorView<'_>,
    tb: (&Tag<'_>, &QuantAxes),
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
        non_finite_mismatches: 0,
        finite_max_abs_diff: None,
        finite_max_rel_diff: None,
    };
    if va.dims() != vb.dims() {
        return Ok(d);
    }
    let (Some((xa, qa)), Some((xb, qb))) = (values(ta, name, va)?, values(tb, name, vb)?) else {
        return Ok(d);
    };
    d.dequantized = qa || qb;
    let mut finite_max_abs = 0f64;
    let mut mismatches = 0u64;
    let mut range = 0f64;
    for (&a, &b) in xa.iter().zip(&xb) {
        let (a, b) = (f64::from(a), f64::from(b));
        if a.is_finite() {
            range = range.max(a.abs());
        }
        if a.is_finite() && b.is_finite() {
            finite_max_abs = finite_max_abs.max((a - b).abs());
        } else if !(a == b || a.is_nan() && b.is_nan()) {
            mismatches += 1;
        }
    }
    let max_abs = if mismatches > 0 {
        f64::INFINITY
    } else {
        finite_max_abs
    };
    d.max_abs_diff = Some(max_abs);
    d.max_rel_diff = (range > 0.0).then(|| max_abs / range);
    d.non_finite_mismatches = mismatches;
    d.finite_max_abs_diff = Some(finite_max_abs);
    d.finite_max_rel_diff = (range > 0.0).then(|| finite_max_abs / range);
    Ok(d)
}
