//! Renderings of a Paddle / SameDiff [`Program`]: a text listing, JSON, a drawing, and
//! the protobuf text format of ProgramDesc bytes. [`crate::dump`] renders every graph
//! kind and calls these for programs.

use std::borrow::Cow;
use std::fmt::Write as _;

use prost_reflect::text_format::FormatOptions;
use serde_json::{Value, json};

use super::clean::clean;
use super::drawing::{DrawNode, Drawing, NodeRole, NodeShape};
use super::model::{Attr, AttrValue, Program, Scalar, Slot, Var, VarTypeExtra};
use super::programdesc::decode_dynamic;
use crate::error::Result;

/// Longest string shown whole in [`text`]; longer ones are cut with `…`.
const MAX_TEXT_STRING: usize = 60;
/// Most list items shown in [`text`]; the rest are counted.
const MAX_TEXT_ITEMS: usize = 8;

/// A listing for people: per block, the variables (kind, dtype, shape, flags) and the
/// operations in order as `type(inputs) -> outputs  attrs`. Long strings and lists
/// (such as `op_callstack`) are abbreviated; the JSON has everything.
pub(crate) fn text(g: &Program) -> String {
    let mut out = String::new();
    let version = g
        .version
        .map_or_else(|| "none".to_string(), |v| v.to_string());
    let _ = writeln!(
        out,
        "graph: {} block(s), program version {version}",
        g.blocks.len()
    );
    if let Some(map) = &g.op_version_map {
        let _ = writeln!(out, "op versions: {} op(s)", map.len());
    }
    for b in &g.blocks {
        let _ = write!(out, "\nblock {} (parent {}", b.idx, b.parent_idx);
        if let Some(f) = b.forward_block_idx {
            let _ = write!(out, ", forward {f}");
        }
        let _ = writeln!(out, "): {} var(s), {} op(s)", b.vars.len(), b.ops.len());
        let names: Vec<Cow<'_, str>> = b.vars.iter().map(|v| clean(&v.name)).collect();
        let width = names
            .iter()
            .map(|n| n.chars().count())
            .max()
            .unwrap_or(0)
            .min(40);
        for (v, name) in b.vars.iter().zip(&names) {
            let _ = writeln!(out, "  var {name:width$}  {}", var_summary(v));
        }
        for (i, op) in b.ops.iter().enumerate() {
            let _ = write!(out, "  op {i:>3} ");
            if !op.name.is_empty() {
                let _ = write!(out, "{} = ", clean(&op.name));
            }
            let _ = write!(
                out,
                "{}({}) -> {}",
                clean(&op.op_type),
                slots(&op.inputs),
                slots(&op.outputs)
            );
            if !op.attrs.is_empty() {
                let attrs: Vec<String> = op.attrs.iter().map(attr_text).collect();
                let _ = write!(out, "  {}", attrs.join(" "));
            }
            if op.is_target == Some(true) {
                out.push_str("  [target]");
            }
            out.push('\n');
        }
    }
    out
}

fn var_summary(v: &Var) -> String {
    let mut parts = vec![v.kind.name()];
    if let Some(d) = v.dtype {
        parts.push(format!("{d}{:?}", v.shape));
    }
    if let Some(l) = v.lod_level.filter(|l| *l != 0) {
        parts.push(format!("lod_level={l}"));
    }
    for (flag, set) in [
        ("persistable", v.persistable),
        ("need_check_feed", v.need_check_feed),
        ("is_parameter", v.is_parameter),
        ("stop_gradient", v.stop_gradient),
    ] {
        if set == Some(true) {
            parts.push(flag.to_string());
        }
    }
    if !v.attrs.is_empty() {
        let attrs: Vec<String> = v.attrs.iter().map(attr_text).collect();
        parts.push(attrs.join(" "));
    }
    parts.join(" ")
}

fn slots(s: &[Slot]) -> String {
    s.iter()
        .map(|s| {
            let args: Vec<Cow<'_, str>> = s.args.iter().map(|a| clean(a)).collect();
            format!("{}=[{}]", clean(&s.name), args.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn short(s: &str) -> String {
    match s.char_indices().nth(MAX_TEXT_STRING) {
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
        None => format!("{s:?}"),
    }
}

fn list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let mut shown: Vec<String> = items.iter().take(MAX_TEXT_ITEMS).map(show).collect();
    if items.len() > MAX_TEXT_ITEMS {
        shown.push(format!("… {} more", items.len() - MAX_TEXT_ITEMS));
    }
    format!("[{}]", shown.join(", "))
}

fn scalar_text(s: &Scalar) -> String {
    match (s.b, s.i, s.r, s.c) {
        (Some(b), _, _, _) => b.to_string(),
        (_, Some(i), _, _) => i.to_string(),
        (_, _, Some(r), _) => r.to_string(),
        (_, _, _, Some((r, i))) => format!("{r}{i:+}i"),
        _ => "?".into(),
    }
}

fn attr_text(a: &Attr) -> String {
    // Python tracebacks: noise in a listing, kept whole in the JSON.
    if let ("op_callstack", AttrValue::Strings(v)) = (a.name.as_str(), &a.value) {
        return format!("op_callstack=({} lines)", v.len());
    }
    format!("{}={}", clean(&a.name), attr_value_text(&a.value))
}

/// An attribute's value in words (long strings and lists abbreviated).
pub(crate) fn attr_value_text(value: &AttrValue) -> String {
    match value {
        AttrValue::Int(x) | AttrValue::Block(x) => x.to_string(),
        AttrValue::Long(x) => x.to_string(),
        AttrValue::Float(x) => x.to_string(),
        AttrValue::Float64(x) => x.to_string(),
        AttrValue::Bool(x) => x.to_string(),
        AttrValue::String(s) | AttrValue::Var(s) => short(s),
        AttrValue::Ints(v) | AttrValue::Blocks(v) => list(v, i32::to_string),
        AttrValue::Floats(v) => list(v, f32::to_string),
        AttrValue::Strings(v) | AttrValue::Vars(v) => list(v, |s| short(s)),
        AttrValue::Bools(v) => list(v, bool::to_string),
        AttrValue::Longs(v) => list(v, i64::to_string),
        AttrValue::Float64s(v) => list(v, f64::to_string),
        AttrValue::Scalar(s) => scalar_text(s),
        AttrValue::Scalars(v) => list(v, scalar_text),
        AttrValue::DataType(d) => d.to_string(),
    }
}

/// The whole program as a JSON value (every field; shape documented in docs/GRAPH.md).
pub(crate) fn json_value(g: &Program) -> Value {
    json!({
        "version": g.version,
        "op_version_map": g.op_version_map.as_ref().map(|m| {
            m.iter().map(|(op, v)| json!({"op": op, "version": v})).collect::<Vec<_>>()
        }),
        "blocks": g.blocks.iter().map(|b| json!({
            "idx": b.idx,
            "parent_idx": b.parent_idx,
            "forward_block_idx": b.forward_block_idx,
            "vars": b.vars.iter().map(var_json).collect::<Vec<_>>(),
            "ops": b.ops.iter().map(|o| json!({
                "name": o.name,
                "type": o.op_type,
                "inputs": o.inputs.iter().map(slot_json).collect::<Vec<_>>(),
                "outputs": o.outputs.iter().map(slot_json).collect::<Vec<_>>(),
                "attrs": o.attrs.iter().map(attr_json).collect::<Vec<_>>(),
                "is_target": o.is_target,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn slot_json(s: &Slot) -> Value {
    json!({"slot": s.name, "args": s.args})
}

fn var_json(v: &Var) -> Value {
    let mut obj = json!({
        "name": v.name,
        "kind": v.kind.name(),
        "paddle_type": v.kind.paddle_type(),
        "dtype": v.dtype.map(|d| d.name()),
        "shape": v.shape,
        "lod_level": v.lod_level,
        "persistable": v.persistable,
        "need_check_feed": v.need_check_feed,
        "is_parameter": v.is_parameter,
        "stop_gradient": v.stop_gradient,
        "attrs": v.attrs.iter().map(attr_json).collect::<Vec<_>>(),
    });
    if !v.extra.is_empty()
        && let Some(map) = obj.as_object_mut()
    {
        map.insert("extra".into(), extra_json(&v.extra));
    }
    obj
}

fn tensor_json(t: &super::model::TensorDesc) -> Value {
    json!({"dtype": t.dtype.name(), "dims": t.dims})
}

fn dense_json(d: &super::model::DenseTensorDesc) -> Value {
    json!({"dtype": d.tensor.dtype.name(), "dims": d.tensor.dims, "lod_level": d.lod_level})
}

fn extra_json(x: &VarTypeExtra) -> Value {
    json!({
        "selected_rows": x.selected_rows.as_ref().map(tensor_json),
        "dense_tensor": x.dense_tensor.as_ref().map(dense_json),
        "tensor_array": x.tensor_array.as_ref().map(dense_json),
        "reader": x.reader.as_ref().map(|r| r.iter().map(dense_json).collect::<Vec<_>>()),
        "tuple": x.tuple,
        "string": x.string.as_ref().map(tensor_json),
        "strings": x.strings.as_ref().map(tensor_json),
        "vocab": x.vocab.as_ref().map(tensor_json),
        "sparse_coo": x.sparse_coo.as_ref().map(tensor_json),
        "sparse_csr": x.sparse_csr.as_ref().map(tensor_json),
    })
}

fn scalar_json(s: &Scalar) -> Value {
    json!({
        "type": s.kind.code(),
        "b": s.b,
        "i": s.i,
        "r": s.r,
        "c": s.c.map(|(r, i)| [r, i]),
    })
}

fn attr_json(a: &Attr) -> Value {
    let value = match &a.value {
        AttrValue::Int(x) | AttrValue::Block(x) => json!(x),
        AttrValue::Long(x) => json!(x),
        AttrValue::Float(x) => json!(x),
        AttrValue::Float64(x) => json!(x),
        AttrValue::Bool(x) => json!(x),
        AttrValue::String(s) | AttrValue::Var(s) => json!(s),
        AttrValue::Ints(v) | AttrValue::Blocks(v) => json!(v),
        AttrValue::Floats(v) => json!(v),
        AttrValue::Strings(v) | AttrValue::Vars(v) => json!(v),
        AttrValue::Bools(v) => json!(v),
        AttrValue::Longs(v) => json!(v),
        AttrValue::Float64s(v) => json!(v),
        AttrValue::Scalar(s) => scalar_json(s),
        AttrValue::Scalars(v) => Value::Array(v.iter().map(scalar_json).collect()),
        AttrValue::DataType(d) => json!(d.name()),
    };
    json!({"name": a.name, "type": a.value.type_name(), "value": value})
}

/// A program's drawing: operations as grey ellipses between their variables
/// (persistable ones boxed, with dtype and dims), each operation with its inputs,
/// outputs and attributes.
pub(crate) fn drawing(g: &Program) -> Drawing {
    use std::collections::HashMap;
    let mut d = Drawing::default();
    for (b, block) in g.blocks.iter().enumerate() {
        let mut ids: HashMap<&str, usize> = HashMap::new();
        for (k, v) in block.vars.iter().enumerate() {
            let dims = v
                .dtype
                .map(|t| format!("{t}{:?}", v.shape))
                .unwrap_or_default();
            let shape = if v.is_persistable() {
                NodeShape::Box
            } else {
                NodeShape::Plaintext
            };
            let i = d.push(DrawNode::new(
                format!("b{b}v{k}"),
                NodeRole::Value,
                shape,
                format!("{}\n{dims}", v.name),
            ));
            ids.insert(v.name.as_str(), i);
        }
        for (k, op) in block.ops.iter().enumerate() {
            let mut node = DrawNode::new(
                format!("b{b}o{k}"),
                NodeRole::Op,
                NodeShape::FilledEllipse,
                op.op_type.clone(),
            );
            node.block = Some(b);
            let pairs = |s: &[Slot]| -> Vec<(String, Vec<String>)> {
                s.iter().map(|s| (s.name.clone(), s.args.clone())).collect()
            };
            node.inputs = pairs(&op.inputs);
            node.outputs = pairs(&op.outputs);
            node.attrs = op
                .attrs
                .iter()
                .map(|a| (a.name.clone(), attr_value_text(&a.value)))
                .collect();
            let id = d.push(node);
            for s in &op.inputs {
                for a in &s.args {
                    if let Some(&v) = ids.get(a.as_str()) {
                        d.edge(v, id, false);
                    }
                }
            }
            for s in &op.outputs {
                for a in &s.args {
                    if let Some(&v) = ids.get(a.as_str()) {
                        d.edge(id, v, false);
                    }
                }
            }
        }
    }
    d
}

/// The protobuf text format of ProgramDesc bytes (pretty-printed, fields in
/// field-number order). The bytes are decoded and checked as by
/// [`Graph::from_programdesc`](crate::Graph::from_programdesc) first.
pub(crate) fn pbtxt(programdesc_bytes: &[u8]) -> Result<String> {
    super::programdesc::decode(programdesc_bytes)?;
    let msg = decode_dynamic(programdesc_bytes)?;
    Ok(msg.to_text_format_with_options(&FormatOptions::new().pretty(true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Op, Var, VarKind};
    use crate::tensor::DType;

    fn sample() -> Program {
        let mut g = Program {
            version: Some(2006002),
            ..Program::default()
        };
        let b = &mut g.blocks[0];
        b.vars.push(Var::new(
            "x",
            VarKind::Placeholder,
            DType::Fp32,
            vec![-1, 4],
        ));
        b.vars
            .push(Var::new("w", VarKind::Parameter, DType::Fp32, vec![4, 2]));
        b.ops.push(
            Op::new("", "matmul_v2")
                .input("X", &["x"])
                .input("Y", &["w"])
                .output("Out", &["y"])
                .attr("trans_x", AttrValue::Bool(false))
                .attr(
                    "op_callstack",
                    AttrValue::Strings(vec!["a".repeat(200); 20]),
                )
                .attr("names", AttrValue::Strings(vec!["a".repeat(200); 20])),
        );
        g
    }

    #[test]
    fn text_lists_vars_and_ops() {
        let t = text(&sample());
        assert!(
            t.contains("var x  placeholder FP32[-1, 4] need_check_feed"),
            "{t}"
        );
        assert!(
            t.contains("var w  parameter FP32[4, 2] persistable is_parameter"),
            "{t}"
        );
        assert!(
            t.contains("matmul_v2(X=[x] Y=[w]) -> Out=[y]  trans_x=false"),
            "{t}"
        );
        assert!(t.contains("… 12 more"), "{t}");
        assert!(t.contains("op_callstack=(20 lines)"), "{t}");
    }

    #[test]
    fn text_escapes_control_characters_in_names() {
        let mut g = Program::default();
        let b = &mut g.blocks[0];
        b.vars.push(Var::new(
            "evil\u{1b}[31m\nvar fake",
            VarKind::Parameter,
            DType::Fp32,
            vec![1],
        ));
        b.ops.push(
            Op::new("op\u{202e}", "relu\u{7}")
                .input("X\r", &["evil\u{1b}[31m\nvar fake"])
                .output("Out", &["y"])
                .attr("a\u{9b}", AttrValue::String("s\u{1b}".into())),
        );
        let t = text(&g);
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        assert!(
            t.contains("var evil\\u{1b}[31m\\nvar fake  parameter"),
            "{t}"
        );
        assert!(
            t.contains("op\\u{202e} = relu\\u{7}(X\\r=[evil\\u{1b}[31m\\nvar fake])"),
            "{t}"
        );
        assert!(t.contains("a\\u{9b}=\"s\\u{1b}\""), "{t}");
        // One line per var and op, no more.
        assert_eq!(
            t.lines()
                .filter(|l| l.trim_start().starts_with("var "))
                .count(),
            1
        );
    }

    #[test]
    fn json_has_every_field() {
        let j = json_value(&sample());
        assert_eq!(j["version"], 2006002);
        assert_eq!(j["blocks"][0]["vars"][0]["kind"], "placeholder");
        assert_eq!(j["blocks"][0]["vars"][1]["dtype"], "FP32");
        assert_eq!(j["blocks"][0]["ops"][0]["attrs"][0]["type"], "BOOLEAN");
        assert_eq!(j["blocks"][0]["ops"][0]["inputs"][1]["args"][0], "w");
    }

    #[test]
    fn pbtxt_renders_programdesc() {
        let bytes = crate::Graph::from(sample()).to_programdesc().unwrap();
        let t = pbtxt(&bytes).unwrap();
        assert!(t.contains("type: \"matmul_v2\""), "{t}");
        assert!(t.contains("version: 2006002"), "{t}");
        assert!(pbtxt(b"\xff\xff").is_err());
    }
}
