//! [`Program`] to ProgramDesc, fields in field-number order as Paddle writes them.

use super::common::{MODELZIP_ATTR, classify, gerr, in_where, modelzip_json};
use prost::Message;

use crate::error::Result;
use crate::keyed::KeyedMap;
use crate::graph::model::{
    Attr, AttrValue, Block, Op, Program, Scalar, Slot, TensorDesc, TensorSlot, Var, VarKind,
    main_slot,
};
use crate::paddle_proto as pb;

/// Encodes a [`Program`] as `.pdmodel` bytes.
pub fn encode(program: &Program) -> Result<Vec<u8>> {
    Ok(to_proto(program)?.encode_to_vec())
}

/// Converts the program into prost's ProgramDesc.
pub(crate) fn to_proto(g: &Program) -> Result<pb::ProgramDesc> {
    if g.blocks.is_empty() {
        return Err(gerr("graph has no blocks"));
    }
    let blocks = g
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_to_proto(b).map_err(|e| in_where(e, &format!("block {i}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(pb::ProgramDesc {
        blocks,
        version: g.version.map(|v| pb::Version { version: Some(v) }),
        op_version_map: g.op_version_map.as_ref().map(|pairs| pb::OpVersionMap {
            pair: pairs
                .iter()
                .map(|(name, v)| pb::op_version_map::OpVersionPair {
                    op_name: name.clone(),
                    op_version: pb::OpVersion { version: *v },
                })
                .collect(),
        }),
    })
}

fn block_to_proto(b: &Block) -> Result<pb::BlockDesc> {
    Ok(pb::BlockDesc {
        idx: b.idx,
        parent_idx: b.parent_idx,
        vars: b
            .vars
            .iter()
            .map(|v| var_to_proto(v).map_err(|e| in_where(e, &format!("var {:?}", v.name))))
            .collect::<Result<Vec<_>>>()?,
        ops: b
            .ops
            .iter()
            .enumerate()
            .map(|(i, o)| {
                op_to_proto(o).map_err(|e| in_where(e, &format!("op {i} ({})", o.op_type)))
            })
            .collect::<Result<Vec<_>>>()?,
        forward_block_idx: b.forward_block_idx,
    })
}

fn tensor_to_proto(t: &TensorDesc) -> pb::var_type::TensorDesc {
    pb::var_type::TensorDesc {
        data_type: t.dtype.code(),
        dims: t.dims.clone(),
    }
}

/// The (persistable, need_check_feed, is_parameter) flags written for `v`: the ones it
/// holds, plus any its kind implies and it left unset. Contradictions are errors,
/// because the variable would read back as another kind.
pub(crate) fn kind_flags(v: &Var) -> Result<(Option<bool>, Option<bool>, Option<bool>)> {
    let (mut p, mut n, mut ip) = (v.persistable, v.need_check_feed, v.is_parameter);
    match v.kind {
        VarKind::Placeholder => {
            n.get_or_insert(true);
        }
        VarKind::Parameter => {
            p.get_or_insert(true);
            ip.get_or_insert(true);
        }
        VarKind::Constant => {
            p.get_or_insert(true);
        }
        VarKind::Variable | VarKind::Array | VarKind::Other(_) => {}
    }
    let reads_as = classify(v.kind.paddle_type(), p, n, ip);
    if reads_as != v.kind {
        return Err(gerr(format!(
            "kind {} contradicts its flags (persistable {p:?}, need_check_feed {n:?}, is_parameter {ip:?}), which read as {}",
            v.kind.name(),
            reads_as.name()
        )));
    }
    Ok((p, n, ip))
}

fn var_to_proto(v: &Var) -> Result<pb::VarDesc> {
    let n = v.kind.paddle_type();
    let x = &v.extra;
    let mut t = pb::VarType {
        r#type: n,
        selected_rows: x.selected_rows.as_ref().map(tensor_to_proto),
        dense_tensor: x
            .dense_tensor
            .as_ref()
            .map(|d| pb::var_type::DenseTensorDesc {
                tensor: tensor_to_proto(&d.tensor),
                legacy_lod_level: d.lod_level,
            }),
        tensor_array: x
            .tensor_array
            .as_ref()
            .map(|d| pb::var_type::DenseTensorArrayDesc {
                tensor: tensor_to_proto(&d.tensor),
                legacy_lod_level: d.lod_level,
            }),
        reader: x.reader.as_ref().map(|r| pb::var_type::ReaderDesc {
            dense_tensor: r
                .iter()
                .map(|d| pb::var_type::DenseTensorDesc {
                    tensor: tensor_to_proto(&d.tensor),
                    legacy_lod_level: d.lod_level,
                })
                .collect(),
        }),
        tuple: x.tuple.as_ref().map(|e| pb::var_type::Tuple {
            element_type: e.clone(),
        }),
        string: x.string.as_ref().map(tensor_to_proto),
        strings: x.strings.as_ref().map(tensor_to_proto),
        vocab: x.vocab.as_ref().map(tensor_to_proto),
        sparse_coo: x.sparse_coo.as_ref().map(tensor_to_proto),
        sparse_csr: x.sparse_csr.as_ref().map(tensor_to_proto),
    };
    match (v.dtype, main_slot(n)) {
        (Some(dtype), Some(slot)) => {
            if v.lod_level.is_some() && !slot.has_lod() {
                return Err(gerr("lod_level is set but the variable type has no LoD"));
            }
            let tensor = pb::var_type::TensorDesc {
                data_type: dtype.code(),
                dims: v.shape.clone(),
            };
            let dense = |tensor| pb::var_type::DenseTensorDesc {
                tensor,
                legacy_lod_level: v.lod_level,
            };
            let clash = match slot {
                TensorSlot::DenseTensor => t.dense_tensor.replace(dense(tensor)).is_some(),
                TensorSlot::TensorArray => t
                    .tensor_array
                    .replace(pb::var_type::DenseTensorArrayDesc {
                        tensor,
                        legacy_lod_level: v.lod_level,
                    })
                    .is_some(),
                TensorSlot::SelectedRows => t.selected_rows.replace(tensor).is_some(),
                TensorSlot::String => t.string.replace(tensor).is_some(),
                TensorSlot::Strings => t.strings.replace(tensor).is_some(),
                TensorSlot::Vocab => t.vocab.replace(tensor).is_some(),
                TensorSlot::SparseCoo => t.sparse_coo.replace(tensor).is_some(),
                TensorSlot::SparseCsr => t.sparse_csr.replace(tensor).is_some(),
            };
            if clash {
                return Err(gerr(
                    "extra holds the variable's main tensor description as well as dtype/shape",
                ));
            }
        }
        (Some(_), None) => {
            return Err(gerr(format!(
                "dtype is set but variable type {n} has no tensor description"
            )));
        }
        (None, _) => {
            if !v.shape.is_empty() || v.lod_level.is_some() {
                return Err(gerr("shape or lod_level is set without a dtype"));
            }
        }
    }
    let (persistable, need_check_feed, is_parameter) = kind_flags(v)?;
    Ok(pb::VarDesc {
        name: v.name.clone(),
        r#type: t,
        persistable,
        need_check_feed,
        is_parameter,
        stop_gradient: v.stop_gradient,
        attrs: v
            .attrs
            .iter()
            .map(|a| var_attr_to_proto(a).map_err(|e| in_where(e, &format!("attr {:?}", a.name))))
            .collect::<Result<Vec<_>>>()?,
    })
}

fn var_attr_to_proto(a: &Attr) -> Result<pb::var_desc::Attr> {
    let mut out = pb::var_desc::Attr {
        name: a.name.clone(),
        r#type: a.value.paddle_type(),
        i: None,
        s: None,
        ints: Vec::new(),
    };
    match &a.value {
        AttrValue::Int(i) => out.i = Some(*i),
        AttrValue::String(s) => out.s = Some(s.clone()),
        AttrValue::Ints(v) => out.ints = v.clone(),
        other => {
            return Err(gerr(format!(
                "variable attributes hold INT, STRING or INTS, not {}",
                other.type_name()
            )));
        }
    }
    Ok(out)
}

fn scalar_to_proto(s: &Scalar) -> pb::Scalar {
    pb::Scalar {
        r#type: s.kind.code(),
        b: s.b,
        i: s.i,
        r: s.r,
        c: s.c.map(|(r, i)| pb::Complex { r, i }),
    }
}

fn op_attr_to_proto(name: &str, v: &AttrValue) -> pb::op_desc::Attr {
    let mut a = pb::op_desc::Attr {
        name: name.to_string(),
        r#type: v.paddle_type(),
        ..Default::default()
    };
    match v {
        AttrValue::Int(i) => a.i = Some(*i),
        AttrValue::DataType(d) => a.i = Some(d.code()),
        AttrValue::Float(f) => a.f = Some(*f),
        AttrValue::String(s) => a.s = Some(s.clone()),
        AttrValue::Ints(x) => a.ints = x.clone(),
        AttrValue::Floats(x) => a.floats = x.clone(),
        AttrValue::Strings(x) => a.strings = x.clone(),
        AttrValue::Bool(b) => a.b = Some(*b),
        AttrValue::Bools(x) => a.bools = x.clone(),
        AttrValue::Block(i) => a.block_idx = Some(*i),
        AttrValue::Long(l) => a.l = Some(*l),
        AttrValue::Blocks(x) => a.blocks_idx = x.clone(),
        AttrValue::Longs(x) => a.longs = x.clone(),
        AttrValue::Float64s(x) => a.float64s = x.clone(),
        AttrValue::Var(s) => a.var_name = Some(s.clone()),
        AttrValue::Vars(x) => a.vars_name = x.clone(),
        AttrValue::Float64(f) => a.float64 = Some(*f),
        AttrValue::Scalar(s) => a.scalar = Some(scalar_to_proto(s)),
        AttrValue::Scalars(x) => a.scalars = x.iter().map(scalar_to_proto).collect(),
    }
    a
}

fn slots_to_proto(slots: &[Slot]) -> Vec<pb::op_desc::Var> {
    slots
        .iter()
        .map(|s| pb::op_desc::Var {
            parameter: s.name.clone(),
            arguments: s.args.clone(),
        })
        .collect()
}

fn op_to_proto(o: &Op) -> Result<pb::OpDesc> {
    let mut attrs: Vec<pb::op_desc::Attr> = o
        .attrs
        .iter()
        .map(|a| op_attr_to_proto(&a.name, &a.value))
        .collect();
    let dtype_args: Vec<String> = o
        .attrs
        .iter()
        .filter(|a| matches!(a.value, AttrValue::DataType(_)))
        .map(|a| a.name.clone())
        .collect();
    if !dtype_args.is_empty() {
        // One counting pass over the attributes: a scan per data-type attribute was
        // quadratic in an op of many.
        let mut count: KeyedMap<&str, usize> = KeyedMap::default();
        for a in &o.attrs {
            *count.entry(a.name.as_str()).or_default() += 1;
        }
        if let Some(name) = dtype_args.iter().find(|n| count[n.as_str()] > 1) {
            return Err(gerr(format!(
                "data-type attribute {name:?} shares its name with another attribute"
            )));
        }
    }
    if let Some(json) = modelzip_json(&o.name, &dtype_args) {
        attrs.push(op_attr_to_proto(MODELZIP_ATTR, &AttrValue::String(json)));
    }
    Ok(pb::OpDesc {
        r#type: o.op_type.clone(),
        inputs: slots_to_proto(&o.inputs),
        outputs: slots_to_proto(&o.outputs),
        attrs,
        is_target: o.is_target,
    })
}
