//! The ProgramDesc codec: Paddle `.pdmodel` protobuf bytes ⇄ [`Graph`].
//!
//! Decoding uses the prost types of `paddle_proto`, then checks what prost does not:
//! proto2 required fields (through prost-reflect over the compiled descriptor set) and
//! enum values (an unknown number is an error naming it and where it was found).
//! Encoding writes fields in field-number order, as Paddle's C++ protobuf does, so a
//! decoded `.pdmodel` encodes back to the same bytes.
//!
//! Two things a ProgramDesc has no field for travel in one trailing op attribute named
//! [`MODELZIP_ATTR`] (a STRING holding canonical JSON): a SameDiff op name and which INT
//! attributes are data types. Paddle-written programs never carry it.

use std::borrow::Cow;
use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{
    Cardinality, DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage, Value,
};

use super::model::{
    Attr, AttrValue, Block, DenseTensorDesc, Graph, Op, Scalar, ScalarType, Slot, TensorDesc,
    TensorSlot, Var, VarKind, VarTypeExtra, attr_type_name, main_slot, var_type_name,
};
use crate::error::{Error, ErrorKind, Result};
use crate::paddle_proto as pb;
use crate::tensor::DType;

/// The name of the trailing STRING op attribute that carries a SameDiff op name and
/// the names of data-type attributes through a ProgramDesc.
pub const MODELZIP_ATTR: &str = "@modelzip";

/// Largest `.pdmodel` accepted (Paddle's own protobuf limit is 2 GiB).
pub const MAX_PROGRAMDESC_BYTES: usize = 1 << 31;

/// Most variables and ops a program may declare, over all its blocks. Real programs have
/// thousands (resnet50: ~900); decoding costs about 1 KiB of memory per item whatever its
/// encoded size, so a program of millions of 5-byte ops (16 MiB) would cost gigabytes.
pub const MAX_PROGRAM_ITEMS: u64 = 200_000;

/// Vars and ops over all blocks, counted from the wire format without decoding (a
/// malformed encoding stops the count; the decoder reports it).
fn count_items(bytes: &[u8]) -> u64 {
    let mut n = 0;
    for (field, payload) in delimited_fields(bytes) {
        if field == 1 {
            n += delimited_fields(payload)
                .filter(|(f, _)| *f == 3 || *f == 4)
                .count() as u64;
        }
    }
    n
}

/// The length-delimited fields of a protobuf message (number, payload); other wire types
/// are skipped; stops at the first malformed field.
pub(crate) fn delimited_fields(mut b: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&byte, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    std::iter::from_fn(move || {
        loop {
            let key = varint(&mut b)?;
            let skip = match key & 7 {
                0 => {
                    varint(&mut b)?;
                    0
                }
                1 => 8,
                5 => 4,
                2 => {
                    let len = usize::try_from(varint(&mut b)?).ok()?;
                    let payload = b.get(..len)?;
                    b = &b[len..];
                    return Some((key >> 3, payload));
                }
                _ => return None,
            };
            b = b.get(skip..)?;
        }
    })
}

pub(crate) fn gerr(msg: impl Into<String>) -> Error {
    ErrorKind::Graph(msg.into()).into()
}

fn pool() -> Result<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).ok())
        .as_ref()
        .ok_or_else(|| gerr("the compiled framework.proto descriptor set is unreadable"))
}

/// The reflection descriptor of `paddle.framework.proto.ProgramDesc`.
pub(crate) fn program_descriptor() -> Result<MessageDescriptor> {
    pool()?
        .get_message_by_name("paddle.framework.proto.ProgramDesc")
        .ok_or_else(|| gerr("ProgramDesc is missing from the descriptor set"))
}

/// Decodes ProgramDesc bytes as a reflective message, with required fields checked.
pub(crate) fn decode_dynamic(bytes: &[u8]) -> Result<DynamicMessage> {
    if bytes.len() > MAX_PROGRAMDESC_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "ProgramDesc size",
            size: bytes.len() as u64,
            limit: MAX_PROGRAMDESC_BYTES as u64,
        }
        .into());
    }
    let items = count_items(bytes);
    if items > MAX_PROGRAM_ITEMS {
        return Err(ErrorKind::LimitExceeded {
            what: "ProgramDesc variables and ops",
            size: items,
            limit: MAX_PROGRAM_ITEMS,
        }
        .into());
    }
    let msg = DynamicMessage::decode(program_descriptor()?, bytes)
        .map_err(|e| gerr(format!("invalid ProgramDesc protobuf: {e}")))
        .and_then(|msg| check_required(&msg, "ProgramDesc").map(|_| msg));
    msg.map_err(|e| {
        if looks_like_json(bytes) {
            pir_json_error()
        } else {
            e
        }
    })
}

/// Whether bytes that failed to decode as a ProgramDesc look like a JSON object: what
/// Paddle 3 writes by default (a PIR program, `model.json`).
fn looks_like_json(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn pir_json_error() -> Error {
    gerr(
        "this is JSON (a Paddle 3 PIR program, as Paddle 3 saves by default), not a ProgramDesc \
         protobuf; save the model with FLAGS_enable_pir_api=0 to get a .pdmodel",
    )
}

/// Fails on the first proto2 required field that is absent, naming its path.
fn check_required(msg: &DynamicMessage, path: &str) -> Result<()> {
    match missing_required(msg) {
        Some(rest) => Err(gerr(format!("{path}{rest}"))),
        None => Ok(()),
    }
}

/// The path (from `msg`) to the first absent required field and the complaint, if any.
/// The path is built only on the way back from a failure.
fn missing_required(msg: &DynamicMessage) -> Option<String> {
    first_fault(msg, &|_| None, &|field| {
        (field.cardinality() == Cardinality::Required)
            .then(|| format!(": required field {} is missing", field.name()))
    })
}

/// The path to the first protobuf field of a `.pdmodel` that framework.proto does not
/// declare (a newer or older Paddle's field), if any. Such a field is kept in
/// graph.pdmodel (stored byte for byte) but cannot survive a conversion.
pub fn unknown_field(bytes: &[u8]) -> Result<Option<String>> {
    let first_unknown = |m: &DynamicMessage| {
        m.unknown_fields()
            .next()
            .map(|f| format!(": field number {}", f.number()))
    };
    Ok(
        first_fault(&decode_dynamic(bytes)?, &first_unknown, &|_| None)
            .map(|p| format!("ProgramDesc{p}")),
    )
}

/// Walks `msg` and its nested messages in field order and returns the path to the first
/// fault: `in_message` looks at a message as a whole (before its fields), `absent` at
/// each field the message lacks. The path is built only on the way back.
fn first_fault(
    msg: &DynamicMessage,
    in_message: &dyn Fn(&DynamicMessage) -> Option<String>,
    absent: &dyn Fn(&prost_reflect::FieldDescriptor) -> Option<String>,
) -> Option<String> {
    if let Some(fault) = in_message(msg) {
        return Some(fault);
    }
    for field in msg.descriptor().fields() {
        if !msg.has_field(&field) {
            if let Some(fault) = absent(&field) {
                return Some(fault);
            }
            continue;
        }
        match msg.get_field(&field) {
            Cow::Borrowed(Value::Message(m)) => {
                if let Some(rest) = first_fault(m, in_message, absent) {
                    return Some(format!(".{}{rest}", field.name()));
                }
            }
            Cow::Borrowed(Value::List(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Message(m) = item
                        && let Some(rest) = first_fault(m, in_message, absent)
                    {
                        return Some(format!(".{}[{i}]{}{rest}", field.name(), label_of(m)));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// ` (name)` for messages with a name or type string, to make paths readable.
fn label_of(m: &DynamicMessage) -> String {
    for key in ["name", "type", "parameter", "op_name"] {
        if let Some(v) = m.get_field_by_name(key)
            && let Value::String(s) = v.as_ref()
            && m.has_field_by_name(key)
        {
            return format!(" ({s:?})");
        }
    }
    String::new()
}

/// Decodes `.pdmodel` bytes into a [`Graph`].
pub fn decode(bytes: &[u8]) -> Result<Graph> {
    decode_dynamic(bytes)?;
    let program = pb::ProgramDesc::decode(bytes)
        .map_err(|e| gerr(format!("invalid ProgramDesc protobuf: {e}")))?;
    from_proto(&program)
}

/// Encodes a [`Graph`] as `.pdmodel` bytes.
pub fn encode(graph: &Graph) -> Result<Vec<u8>> {
    Ok(to_proto(graph)?.encode_to_vec())
}

/// Converts a decoded ProgramDesc into the model, checking every enum value.
pub(crate) fn from_proto(p: &pb::ProgramDesc) -> Result<Graph> {
    if p.blocks.is_empty() {
        return Err(gerr("ProgramDesc has no blocks"));
    }
    let blocks = p
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_from_proto(b).map_err(|e| in_where(e, &format!("block {i}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(Graph {
        blocks,
        // An empty Version message reads as version 0, Paddle's default.
        version: p.version.as_ref().map(|v| v.version.unwrap_or(0)),
        op_version_map: p.op_version_map.as_ref().map(|m| {
            m.pair
                .iter()
                .map(|pair| (pair.op_name.clone(), pair.op_version.version))
                .collect()
        }),
        tf: None,
        onnx: None,
    })
}

/// Prefixes a graph error's message with where it happened.
pub(crate) fn in_where(e: Error, place: &str) -> Error {
    match e.kind() {
        ErrorKind::Graph(msg) => gerr(format!("{place}: {msg}")),
        _ => e,
    }
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

/// The SameDiff kind a Paddle variable of type `n` with these flags reads as.
pub(crate) fn classify(
    n: i32,
    persistable: Option<bool>,
    ncf: Option<bool>,
    ip: Option<bool>,
) -> VarKind {
    match n {
        7 if ncf == Some(true) => VarKind::Placeholder,
        7 if persistable == Some(true) && ip == Some(true) => VarKind::Parameter,
        7 if persistable == Some(true) => VarKind::Constant,
        7 => VarKind::Variable,
        13 => VarKind::Array,
        n => VarKind::Other(n),
    }
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
    if let Some((op_name, dtype_args)) = modelzip_attr(&attrs) {
        attrs.pop();
        for a in attrs.iter_mut() {
            if let AttrValue::Int(i) = a.value
                && dtype_args.contains(&a.name)
                && let Ok(d) = DType::from_code(i.into())
            {
                a.value = AttrValue::DataType(d);
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

/// The canonical JSON of the [`MODELZIP_ATTR`] attribute, or `None` when not needed.
fn modelzip_json(name: &str, dtype_args: &[String]) -> Option<String> {
    if name.is_empty() && dtype_args.is_empty() {
        return None;
    }
    let mut map = serde_json::Map::new();
    if !dtype_args.is_empty() {
        map.insert("dtype_args".into(), serde_json::json!(dtype_args));
    }
    if !name.is_empty() {
        map.insert("name".into(), serde_json::json!(name));
    }
    Some(serde_json::Value::Object(map).to_string())
}

/// The (op name, data-type attribute names) of a trailing [`MODELZIP_ATTR`], when it
/// is exactly what [`encode`] would write for the attributes before it; otherwise the
/// attribute is an ordinary one and stays.
fn modelzip_attr(attrs: &[Attr]) -> Option<(String, Vec<String>)> {
    let (last, rest) = attrs.split_last()?;
    let AttrValue::String(json) = &last.value else {
        return None;
    };
    if last.name != MODELZIP_ATTR {
        return None;
    }
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
    // Each listed name must be exactly one INT attribute holding a dtype number,
    // listed in attribute order: then re-encoding writes the same JSON.
    let expected: Vec<String> = rest
        .iter()
        .filter(|a| {
            matches!(a.value, AttrValue::Int(i) if DType::from_code(i.into()).is_ok())
                && dtype_args.contains(&a.name)
        })
        .map(|a| a.name.clone())
        .collect();
    if expected != dtype_args || modelzip_json(&name, &dtype_args).as_deref() != Some(json) {
        return None;
    }
    Some((name, dtype_args))
}

/// Converts the model into prost's ProgramDesc.
pub(crate) fn to_proto(g: &Graph) -> Result<pb::ProgramDesc> {
    if g.tf.is_some() {
        return Err(gerr(
            "the graph is a TensorFlow GraphDef, which has no Paddle ProgramDesc form",
        ));
    }
    if g.onnx.is_some() {
        return Err(gerr(
            "the graph is an ONNX model, which has no Paddle ProgramDesc form",
        ));
    }
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
    for name in &dtype_args {
        if o.attrs.iter().filter(|a| &a.name == name).count() > 1 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_count_from_the_wire_matches_the_decoded_program() {
        for v in ["2.6.2", "3.3.1"] {
            for m in ["mlp", "conv"] {
                let path = format!(
                    "{}/tests/fixtures/paddle/{v}/{m}.pdmodel",
                    env!("CARGO_MANIFEST_DIR")
                );
                let bytes = std::fs::read(&path).unwrap();
                let g = decode(&bytes).unwrap();
                let want: usize = g.blocks.iter().map(|b| b.vars.len() + b.ops.len()).sum();
                assert_eq!(count_items(&bytes), want as u64, "{path}");
            }
        }
    }

    #[test]
    fn a_program_of_too_many_tiny_ops_is_refused_before_decoding() {
        // One block of MAX_PROGRAM_ITEMS + 1 empty ops (2 bytes each on the wire).
        let ops = [0x22u8, 0x00].repeat(MAX_PROGRAM_ITEMS as usize + 1);
        let mut block = vec![0x08, 0x00, 0x10, 0x00];
        block.extend_from_slice(&ops);
        let mut program = vec![0x0a];
        let mut len = block.len();
        while len >= 0x80 {
            program.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        program.push(len as u8);
        program.extend_from_slice(&block);
        let e = decode(&program).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::LimitExceeded { size, .. } if *size == MAX_PROGRAM_ITEMS + 1),
            "{e}"
        );
    }
}
