//! ProgramDesc to [`Program`], checking every enum value.

use super::common::{MODELZIP_ATTR, classify, decode_dynamic, gerr, in_where, modelzip_json};
use prost::Message;

use crate::error::Result;
use crate::keyed::KeyedSet;
use crate::graph::model::{
    Attr, AttrValue, Block, DenseTensorDesc, Op, Program, Scalar, ScalarType, Slot, TensorDesc,
    TensorSlot, Var, VarTypeExtra, attr_type_name, main_slot, var_type_name,
};
use crate::paddle_proto as pb;
use crate::tensor::DType;

/// Decodes `.pdmodel` bytes into a [`Program`].
pub fn decode(bytes: &[u8]) -> Result<Program> {
    decode_dynamic(bytes)?;
    let program = pb::ProgramDesc::decode(bytes)
        .map_err(|e| gerr(format!("invalid ProgramDesc protobuf: {e}")))?;
    from_proto(&program)
}

/// Converts a decoded ProgramDesc into the model, checking every enum value.
pub(crate) fn from_proto(p: &pb::ProgramDesc) -> Result<Program> {
    if p.blocks.is_empty() {
        return Err(gerr("ProgramDesc has no blocks"));
    }
    let blocks = p
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_from_proto(b).map_err(|e| in_where(e, &format!("block {i}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(Program {
        blocks,
        // An empty Version message reads as version 0, Paddle's default.
        version: p.version.as_ref().map(|v| v.version.unwrap_or(0)),
        op_version_map: p.op_version_map.as_ref().map(|m| {
            m.pair
                .iter()
                .map(|pair| (pair.op_name.clone(), pair.op_version.version))
                .collect()
        }),
    })
}

fn block_from_proto(b: &pb::BlockDesc) -> Result<Block> {
    let vars = b
        .vars
        .iter()
        .map(|v| var_from_proto(v).map_err(|e| in_where(e, &format!("var {:?}", v.name))))
        .collect::<Result<Vec<_>>>()?;
    let ops = b
        .ops
        .iter()
        .enumerate()
        .map(|(i, o)| op_from_proto(o).map_err(|e| in_where(e, &format!("op {i} ({})", o.r#type))))
        .collect::<Result<Vec<_>>>()?;
    Ok(Block {
        idx: b.idx,
        parent_idx: b.parent_idx,
        forward_block_idx: b.forward_block_idx,
        vars,
        ops,
    })
}

fn dtype_of(n: i32, what: &str) -> Result<DType> {
    match DType::from_code(n.into()) {
        Ok(d) => Ok(d),
        Err(_) => match var_type_name(n) {
            Some(name) => Err(gerr(format!(
                "{what}: data type {n} ({name}) is not an element type"
            ))),
            None => Err(gerr(format!("{what}: unknown VarType.Type value {n}"))),
        },
    }
}

fn tensor_from_proto(t: &pb::var_type::TensorDesc, what: &str) -> Result<TensorDesc> {
    Ok(TensorDesc {
        dtype: dtype_of(t.data_type, what)?,
        dims: t.dims.clone(),
    })
}

fn dense_from_proto(
    t: &pb::var_type::TensorDesc,
    lod: Option<i32>,
    what: &str,
) -> Result<DenseTensorDesc> {
    Ok(DenseTensorDesc {
        tensor: tensor_from_proto(t, what)?,
        lod_level: lod,
    })
}

fn var_from_proto(v: &pb::VarDesc) -> Result<Var> {
    let t = &v.r#type;
    let n = t.r#type;
    if var_type_name(n).is_none() {
        return Err(gerr(format!("unknown VarType.Type value {n}")));
    }
    let mut extra = VarTypeExtra {
        selected_rows: t
            .selected_rows
            .as_ref()
            .map(|d| tensor_from_proto(d, "selected_rows"))
            .transpose()?,
        dense_tensor: t
            .dense_tensor
            .as_ref()
            .map(|d| dense_from_proto(&d.tensor, d.legacy_lod_level, "dense_tensor"))
            .transpose()?,
        tensor_array: t
            .tensor_array
            .as_ref()
            .map(|d| dense_from_proto(&d.tensor, d.legacy_lod_level, "tensor_array"))
            .transpose()?,
        reader: t
            .reader
            .as_ref()
            .map(|r| {
                r.dense_tensor
                    .iter()
                    .map(|d| dense_from_proto(&d.tensor, d.legacy_lod_level, "reader"))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?,
        tuple: t
            .tuple
            .as_ref()
            .map(|tu| {
                tu.element_type
                    .iter()
                    .map(|&e| match var_type_name(e) {
                        Some(_) => Ok(e),
                        None => Err(gerr(format!("tuple: unknown VarType.Type value {e}"))),
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?,
        string: opt_tensor(&t.string, "string")?,
        strings: opt_tensor(&t.strings, "strings")?,
        vocab: opt_tensor(&t.vocab, "vocab")?,
        sparse_coo: opt_tensor(&t.sparse_coo, "sparse_coo")?,
        sparse_csr: opt_tensor(&t.sparse_csr, "sparse_csr")?,
    };
    let (dtype, shape, lod_level) = match main_slot(n).and_then(|s| take_slot(&mut extra, s)) {
        Some(d) => (Some(d.tensor.dtype), d.tensor.dims, d.lod_level),
        None => (None, Vec::new(), None),
    };
    let attrs = v
        .attrs
        .iter()
        .map(|a| var_attr_from_proto(a).map_err(|e| in_where(e, &format!("attr {:?}", a.name))))
        .collect::<Result<Vec<_>>>()?;
    Ok(Var {
        name: v.name.clone(),
        kind: classify(n, v.persistable, v.need_check_feed, v.is_parameter),
        dtype,
        shape,
        lod_level,
        persistable: v.persistable,
        need_check_feed: v.need_check_feed,
        is_parameter: v.is_parameter,
        stop_gradient: v.stop_gradient,
        attrs,
        extra,
    })
}

fn opt_tensor(t: &Option<pb::var_type::TensorDesc>, what: &str) -> Result<Option<TensorDesc>> {
    t.as_ref().map(|d| tensor_from_proto(d, what)).transpose()
}

/// Removes the description in `slot` from `extra`, as a dense description.
fn take_slot(extra: &mut VarTypeExtra, slot: TensorSlot) -> Option<DenseTensorDesc> {
    let plain = |t: Option<TensorDesc>| {
        t.map(|tensor| DenseTensorDesc {
            tensor,
            lod_level: None,
        })
    };
    match slot {
        TensorSlot::DenseTensor => extra.dense_tensor.take(),
        TensorSlot::TensorArray => extra.tensor_array.take(),
        TensorSlot::SelectedRows => plain(extra.selected_rows.take()),
        TensorSlot::String => plain(extra.string.take()),
        TensorSlot::Strings => plain(extra.strings.take()),
        TensorSlot::Vocab => plain(extra.vocab.take()),
        TensorSlot::SparseCoo => plain(extra.sparse_coo.take()),
        TensorSlot::SparseCsr => plain(extra.sparse_csr.take()),
    }
}

fn var_attr_from_proto(a: &pb::var_desc::Attr) -> Result<Attr> {
    let mut set = Vec::new();
    if a.i.is_some() {
        set.push("i");
    }
    if a.s.is_some() {
        set.push("s");
    }
    if !a.ints.is_empty() {
        set.push("ints");
    }
    let (field, value) = match a.r#type {
        0 => ("i", a.i.map(AttrValue::Int)),
        2 => ("s", a.s.clone().map(AttrValue::String)),
        3 => ("ints", Some(AttrValue::Ints(a.ints.clone()))),
        n => {
            return Err(match attr_type_name(n) {
                Some(name) => gerr(format!("variable attribute type {name} is not supported")),
                None => gerr(format!("unknown AttrType value {n}")),
            });
        }
    };
    only_field(&set, field)?;
    let value = value.ok_or_else(|| gerr(format!("value field {field} is missing")))?;
    Ok(Attr {
        name: a.name.clone(),
        value,
    })
}

/// Fails when a field other than `field` carries a value.
fn only_field(set: &[&str], field: &str) -> Result<()> {
    match set.iter().find(|f| **f != field) {
        Some(other) => Err(gerr(format!(
            "field {other} is set but the type uses field {field}"
        ))),
        None => Ok(()),
    }
}

fn op_attr_fields(a: &pb::op_desc::Attr) -> Vec<&'static str> {
    let flags = [
        (a.i.is_some(), "i"),
        (a.f.is_some(), "f"),
        (a.s.is_some(), "s"),
        (!a.ints.is_empty(), "ints"),
        (!a.floats.is_empty(), "floats"),
        (!a.strings.is_empty(), "strings"),
        (a.b.is_some(), "b"),
        (!a.bools.is_empty(), "bools"),
        (a.block_idx.is_some(), "block_idx"),
        (a.l.is_some(), "l"),
        (!a.blocks_idx.is_empty(), "blocks_idx"),
        (!a.longs.is_empty(), "longs"),
        (!a.float64s.is_empty(), "float64s"),
        (a.var_name.is_some(), "var_name"),
        (!a.vars_name.is_empty(), "vars_name"),
        (a.float64.is_some(), "float64"),
        (a.scalar.is_some(), "scalar"),
        (!a.scalars.is_empty(), "scalars"),
    ];
    flags
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect()
}

fn scalar_from_proto(s: &pb::Scalar) -> Result<Scalar> {
    let kind = ScalarType::from_code(s.r#type)
        .ok_or_else(|| gerr(format!("unknown Scalar.Type value {}", s.r#type)))?;
    Ok(Scalar {
        kind,
        b: s.b,
        i: s.i,
        r: s.r,
        c: s.c.as_ref().map(|c| (c.r, c.i)),
    })
}

fn op_attr_from_proto(a: &pb::op_desc::Attr) -> Result<AttrValue> {
    let set = op_attr_fields(a);
    let missing = |f: &str| gerr(format!("value field {f} is missing"));
    let (field, value) = match a.r#type {
        0 => ("i", AttrValue::Int(a.i.ok_or_else(|| missing("i"))?)),
        1 => ("f", AttrValue::Float(a.f.ok_or_else(|| missing("f"))?)),
        2 => (
            "s",
            AttrValue::String(a.s.clone().ok_or_else(|| missing("s"))?),
        ),
        3 => ("ints", AttrValue::Ints(a.ints.clone())),
        4 => ("floats", AttrValue::Floats(a.floats.clone())),
        5 => ("strings", AttrValue::Strings(a.strings.clone())),
        6 => ("b", AttrValue::Bool(a.b.ok_or_else(|| missing("b"))?)),
        7 => ("bools", AttrValue::Bools(a.bools.clone())),
        8 => (
            "block_idx",
            AttrValue::Block(a.block_idx.ok_or_else(|| missing("block_idx"))?),
        ),
        9 => ("l", AttrValue::Long(a.l.ok_or_else(|| missing("l"))?)),
        10 => ("blocks_idx", AttrValue::Blocks(a.blocks_idx.clone())),
        11 => ("longs", AttrValue::Longs(a.longs.clone())),
        12 => ("float64s", AttrValue::Float64s(a.float64s.clone())),
        13 => (
            "var_name",
            AttrValue::Var(a.var_name.clone().ok_or_else(|| missing("var_name"))?),
        ),
        14 => ("vars_name", AttrValue::Vars(a.vars_name.clone())),
        15 => (
            "float64",
            AttrValue::Float64(a.float64.ok_or_else(|| missing("float64"))?),
        ),
        16 => (
            "scalar",
            AttrValue::Scalar(scalar_from_proto(
                a.scalar.as_ref().ok_or_else(|| missing("scalar"))?,
            )?),
        ),
        17 => (
            "scalars",
            AttrValue::Scalars(
                a.scalars
                    .iter()
                    .map(scalar_from_proto)
                    .collect::<Result<Vec<_>>>()?,
            ),
        ),
        n => return Err(gerr(format!("unknown AttrType value {n}"))),
    };
    only_field(&set, field)?;
    Ok(value)
}

fn slots_from_proto(vars: &[pb::op_desc::Var]) -> Vec<Slot> {
    vars.iter()
        .map(|v| Slot {
            name: v.parameter.clone(),
            args: v.arguments.clone(),
        })
        .collect()
}

fn op_from_proto(o: &pb::OpDesc) -> Result<Op> {
    let mut attrs = o
        .attrs
        .iter()
        .map(|a| {
            op_attr_from_proto(a)
                .map(|value| Attr {
                    name: a.name.clone(),
                    value,
                })
                .map_err(|e| in_where(e, &format!("attr {:?}", a.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut name = String::new();
    if let Some((op_name, dtype_attrs)) = modelzip_attr(&attrs) {
        attrs.pop();
        for k in dtype_attrs {
            if let AttrValue::Int(i) = attrs[k].value
                && let Ok(d) = DType::from_code(i.into())
            {
                attrs[k].value = AttrValue::DataType(d);
            }
        }
        name = op_name;
    }
    Ok(Op {
        name,
        op_type: o.r#type.clone(),
        inputs: slots_from_proto(&o.inputs),
        outputs: slots_from_proto(&o.outputs),
        attrs,
        is_target: o.is_target,
    })
}

/// The (op name, positions of the data-type attributes) of a trailing
/// [`MODELZIP_ATTR`], when it is exactly what [`encode`] would write for the attributes
/// before it; otherwise the attribute is an ordinary one and stays.
fn modelzip_attr(attrs: &[Attr]) -> Option<(String, Vec<usize>)> {
    let (last, rest) = attrs.split_last()?;
    let AttrValue::String(json) = &last.value else {
        return None;
    };
    if last.name != MODELZIP_ATTR {
        return None;
    }
    // One written by `encode` costs a few times its size once parsed; text that would cost
    // far more (millions of `0,`: an 8 MB one took 929 MB) is an ordinary attribute, not
    // parsed.
    crate::json_cost::check_json_cost(json.as_bytes(), "@modelzip attribute").ok()?;
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    let obj = value.as_object()?;
    if obj.keys().any(|k| k != "name" && k != "dtype_args") {
        return None;
    }
    let name = match obj.get("name") {
        Some(v) => v.as_str()?.to_string(),
        None => String::new(),
    };
    let dtype_args: Vec<String> = match obj.get("dtype_args") {
        Some(v) => v
            .as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<_>>()?,
        None => Vec::new(),
    };
    // Each listed name must be listed once and be the name of exactly one attribute, an
    // INT holding a dtype number, listed in attribute order (`encode` refuses a
    // data-type attribute sharing its name): then re-encoding writes the same JSON. A
    // set, built once: many attributes and names cost their number, not its square.
    let mut listed: KeyedSet<&str> = KeyedSet::default();
    if !dtype_args.iter().all(|n| listed.insert(n.as_str())) {
        return None;
    }
    let mut named: KeyedSet<&str> = KeyedSet::default();
    let mut found = Vec::with_capacity(dtype_args.len());
    for (k, a) in rest.iter().enumerate() {
        if !listed.contains(a.name.as_str()) {
            continue;
        }
        if !named.insert(a.name.as_str())
            || !matches!(a.value, AttrValue::Int(i) if DType::from_code(i.into()).is_ok())
            || dtype_args.get(found.len()) != Some(&a.name)
        {
            return None;
        }
        found.push(k);
    }
    if found.len() != dtype_args.len()
        || modelzip_json(&name, &dtype_args).as_deref() != Some(json)
    {
        return None;
    }
    Some((name, found))
}
