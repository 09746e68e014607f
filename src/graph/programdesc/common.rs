//! What both directions share: the limits, the wire-level and proto2 required-field
//! checks decoding starts with, error helpers, how a variable's kind is read, and the
//! JSON of the [`MODELZIP_ATTR`] attribute.

use std::borrow::Cow;
use std::sync::OnceLock;

use prost_reflect::{
    Cardinality, DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage, Value,
};

use crate::error::{Error, ErrorKind, Result};
use crate::graph::model::VarKind;
use crate::paddle_proto as pb;

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
pub(super) fn count_items(bytes: &[u8]) -> u64 {
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
    // Millions of empty blocks or attributes (2 bytes each) cost about 130 bytes each
    // decoded: walked first, against a budget far above what real programs need (their
    // estimate is under 10 times their size).
    let budget = (bytes.len() as u64)
        .saturating_mul(32)
        .saturating_add(64 << 20)
        .max(1 << 30);
    crate::proto_walk::walk_within(
        bytes,
        &program_descriptor()?,
        budget,
        "ProgramDesc",
        "estimated decoded ProgramDesc size",
    )?;
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
        "this is JSON, not a ProgramDesc protobuf; a Paddle 3 PIR program (.json, what \
         Paddle 3 saves by default) is read as one when it starts with {\"base_code\" or \
         {\"program\" (Graph::from_pir_json)",
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

/// Prefixes a graph error's message with where it happened.
pub(crate) fn in_where(e: Error, place: &str) -> Error {
    match e.kind() {
        ErrorKind::Graph(msg) => gerr(format!("{place}: {msg}")),
        _ => e,
    }
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

/// The canonical JSON of the [`MODELZIP_ATTR`] attribute, or `None` when not needed.
pub(super) fn modelzip_json(name: &str, dtype_args: &[String]) -> Option<String> {
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
