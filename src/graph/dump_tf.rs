//! Renderings of TensorFlow graphs ([`TfGraph`]) and the Graphviz DOT rendering of any
//! graph, used by [`super::dump`].

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::clean::clean;
use super::model::{Graph, TfAttr, TfGraph};
use crate::tf_proto as pb;

/// Most list items shown in text; the rest are counted.
const MAX_ITEMS: usize = 8;
/// Longest string shown whole in text.
const MAX_STRING: usize = 60;

fn dtype_name(n: i32) -> String {
    pb::DataType::try_from(n)
        .map(|d| {
            d.as_str_name()
                .trim_start_matches("DT_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| format!("dtype {n}"))
}

fn shape_text(s: &pb::TensorShapeProto) -> String {
    if s.unknown_rank {
        return "[?]".into();
    }
    let dims: Vec<String> = s
        .dim
        .iter()
        .map(|d| {
            if d.size < 0 {
                "?".into()
            } else {
                d.size.to_string()
            }
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

fn bytes_text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    match s.char_indices().nth(MAX_STRING) {
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
        None => format!("{s:?}"),
    }
}

fn list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let mut shown: Vec<String> = items.iter().take(MAX_ITEMS).map(show).collect();
    if items.len() > MAX_ITEMS {
        shown.push(format!("… {} more", items.len() - MAX_ITEMS));
    }
    format!("[{}]", shown.join(", "))
}

fn tensor_text(t: &pb::TensorProto) -> String {
    let shape = t
        .tensor_shape
        .as_ref()
        .map(shape_text)
        .unwrap_or_else(|| "[]".into());
    format!("tensor {}{shape}", dtype_name(t.dtype))
}

fn func_text(f: &pb::NameAttrList) -> String {
    if f.attr.is_empty() {
        format!("func {}", clean(&f.name))
    } else {
        format!("func {}({} attr(s))", clean(&f.name), f.attr.len())
    }
}

fn value_text(v: &pb::AttrValue) -> String {
    use pb::attr_value::Value as V;
    match &v.value {
        None => "none".into(),
        Some(V::S(s)) => bytes_text(s),
        Some(V::I(i)) => i.to_string(),
        Some(V::F(f)) => f.to_string(),
        Some(V::B(b)) => b.to_string(),
        Some(V::Type(t)) => dtype_name(*t),
        Some(V::Shape(s)) => shape_text(s),
        Some(V::Tensor(t)) => tensor_text(t),
        Some(V::Func(f)) => func_text(f),
        Some(V::Placeholder(p)) => format!("${}", clean(p)),
        Some(V::List(l)) => {
            let parts = [
                (!l.s.is_empty()).then(|| list(&l.s, |s| bytes_text(s))),
                (!l.i.is_empty()).then(|| list(&l.i, i64::to_string)),
                (!l.f.is_empty()).then(|| list(&l.f, f32::to_string)),
                (!l.b.is_empty()).then(|| list(&l.b, bool::to_string)),
                (!l.r#type.is_empty()).then(|| list(&l.r#type, |t| dtype_name(*t))),
                (!l.shape.is_empty()).then(|| list(&l.shape, shape_text)),
                (!l.tensor.is_empty()).then(|| list(&l.tensor, tensor_text)),
                (!l.func.is_empty()).then(|| list(&l.func, func_text)),
            ];
            let parts: Vec<String> = parts.into_iter().flatten().collect();
            if parts.is_empty() {
                "[]".into()
            } else {
                parts.join(" ")
            }
        }
    }
}

/// An attribute as `name=value`; a tensor stored as a parameter shows which.
fn attr_text(a: &TfAttr) -> String {
    let v = match crate::interop::tf::decode_stored_tf::<pb::AttrValue>(
        &a.value,
        "tensorflow.AttrValue",
    ) {
        Ok(v) => value_text(&v),
        Err(_) => format!("<{} undecodable bytes>", a.value.len()),
    };
    match &a.param {
        Some(p) => format!("{}={v} (param {})", clean(&a.name), clean(&p.param)),
        None => format!("{}={v}", clean(&a.name)),
    }
}

/// The library and versions a TensorFlow graph keeps besides its nodes.
fn rest(g: &TfGraph) -> Option<pb::GraphDef> {
    crate::interop::tf::decode_stored_tf::<pb::GraphDef>(&g.rest, "tensorflow.GraphDef").ok()
}

/// A listing of a TensorFlow graph: versions, the function library, then each node as
/// `name = Op(inputs)  attrs  @device`.
pub fn text(g: &TfGraph) -> String {
    let mut out = String::new();
    let r = rest(g);
    let versions = r
        .as_ref()
        .and_then(|r| r.versions.as_ref())
        .map(|v| format!("producer {}, min consumer {}", v.producer, v.min_consumer))
        .unwrap_or_else(|| "none".into());
    let _ = writeln!(
        out,
        "TensorFlow graph: {} node(s), versions {versions}",
        g.nodes.len()
    );
    if let Some(lib) = r.as_ref().and_then(|r| r.library.as_ref()) {
        let names: Vec<String> = lib
            .function
            .iter()
            .map(|f| {
                let name = f.signature.as_ref().map(|s| s.name.as_str()).unwrap_or("?");
                format!("{} ({} node(s))", clean(name), f.node_def.len())
            })
            .collect();
        let _ = writeln!(
            out,
            "library: {} function(s) {}",
            names.len(),
            list(&names, String::clone)
        );
    }
    for n in &g.nodes {
        let inputs: Vec<String> = n.inputs.iter().map(|i| clean(i).into_owned()).collect();
        let _ = write!(
            out,
            "  {} = {}({})",
            clean(&n.name),
            clean(&n.op),
            inputs.join(", ")
        );
        let attrs: Vec<String> = n.attrs.iter().map(attr_text).collect();
        if !attrs.is_empty() {
            let _ = write!(out, "  {}", attrs.join(" "));
        }
        if !n.device.is_empty() {
            let _ = write!(out, "  @{}", clean(&n.device));
        }
        out.push('\n');
    }
    out
}

/// A TensorFlow graph as JSON: nodes with their attributes in text form (a tensor
/// stored as a parameter names it), and the library and versions in protobuf text
/// format.
pub fn json(g: &TfGraph) -> Value {
    let nodes: Vec<Value> = g
        .nodes
        .iter()
        .map(|n| {
            let attrs: serde_json::Map<String, Value> = n
                .attrs
                .iter()
                .map(|a| {
                    let v = crate::interop::tf::decode_stored_tf::<pb::AttrValue>(
                        &a.value,
                        "tensorflow.AttrValue",
                    )
                    .map(|v| value_text(&v))
                    .unwrap_or_default();
                    let mut m = json!({"value": v});
                    if let (Some(p), Some(obj)) = (&a.param, m.as_object_mut()) {
                        obj.insert("param".into(), json!(p.param));
                        obj.insert("typed_count".into(), json!(p.typed_count));
                    }
                    (a.name.clone(), m)
                })
                .collect();
            json!({
                "name": n.name,
                "op": n.op,
                "inputs": n.inputs,
                "device": n.device,
                "attrs": attrs,
            })
        })
        .collect();
    let r = rest(g);
    let lib = r.as_ref().and_then(|r| r.library.as_ref());
    json!({
        "nodes": nodes,
        "versions": r.as_ref().and_then(|r| r.versions.as_ref()).map(|v| json!({
            "producer": v.producer, "min_consumer": v.min_consumer, "bad_consumers": v.bad_consumers,
        })),
        "library_functions": lib.map(|l| l.function.iter().map(|f| {
            json!({
                "name": f.signature.as_ref().map(|s| s.name.clone()),
                "nodes": f.node_def.len(),
            })
        }).collect::<Vec<_>>()),
    })
}

/// A DOT string literal.
fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The node a TensorFlow input names: `^ctrl` → `ctrl`, `name:1` → `name`.
fn source(input: &str) -> &str {
    let s = input.strip_prefix('^').unwrap_or(input);
    match s.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => s,
    }
}

fn tf_dot(g: &TfGraph, out: &mut String) {
    for (i, n) in g.nodes.iter().enumerate() {
        let param = n.attrs.iter().find_map(|a| {
            let p = a.param.as_ref()?;
            let v = crate::interop::tf::decode_stored_tf::<pb::AttrValue>(
                &a.value,
                "tensorflow.AttrValue",
            )
            .ok()?;
            Some((p.param.clone(), value_text(&v)))
        });
        let (shape, label) = match param {
            Some((p, t)) => (
                "box",
                format!("{}\n{}\n{}", n.op, p, t.trim_start_matches("tensor ")),
            ),
            None if n.op == "Placeholder" => ("invhouse", format!("{}\n{}", n.op, n.name)),
            None => ("ellipse", format!("{}\n{}", n.op, n.name)),
        };
        let _ = writeln!(out, "  n{i} [shape={shape}, label={}];", q(&label));
    }
    let index: HashMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    for (i, n) in g.nodes.iter().enumerate() {
        for input in &n.inputs {
            if let Some(&from) = index.get(source(input)) {
                let style = if input.starts_with('^') {
                    " [style=dashed]"
                } else {
                    ""
                };
                let _ = writeln!(out, "  n{from} -> n{i}{style};");
            }
        }
    }
}

fn paddle_dot(g: &Graph, out: &mut String) {
    for (b, block) in g.blocks.iter().enumerate() {
        let mut ids: HashMap<&str, String> = HashMap::new();
        for (k, v) in block.vars.iter().enumerate() {
            let id = format!("b{b}v{k}");
            ids.insert(v.name.as_str(), id.clone());
            let dims = v
                .dtype
                .map(|d| format!("{d}{:?}", v.shape))
                .unwrap_or_default();
            let shape = if v.is_persistable() {
                "box"
            } else {
                "plaintext"
            };
            let _ = writeln!(
                out,
                "  {id} [shape={shape}, label={}];",
                q(&format!("{}\n{dims}", v.name))
            );
        }
        for (k, op) in block.ops.iter().enumerate() {
            let id = format!("b{b}o{k}");
            let _ = writeln!(
                out,
                "  {id} [shape=ellipse, style=filled, fillcolor=lightgrey, label={}];",
                q(&op.op_type)
            );
            for s in &op.inputs {
                for a in &s.args {
                    if let Some(v) = ids.get(a.as_str()) {
                        let _ = writeln!(out, "  {v} -> {id};");
                    }
                }
            }
            for s in &op.outputs {
                for a in &s.args {
                    if let Some(v) = ids.get(a.as_str()) {
                        let _ = writeln!(out, "  {id} -> {v};");
                    }
                }
            }
        }
    }
}

/// Any graph as Graphviz DOT (`dot -Tsvg` draws it): TensorFlow nodes labelled with
/// their op and name (constants stored as parameters with dtype and dims, control
/// inputs dashed); Paddle operations as grey ellipses between their variables
/// (persistable ones boxed, with dtype and dims).
pub fn dot(g: &Graph) -> String {
    let mut out = String::from("digraph G {\n  rankdir=TB;\n  node [fontsize=10];\n");
    match (&g.tf, &g.onnx, &g.pir) {
        (Some(tf), _, _) => tf_dot(tf, &mut out),
        (None, Some(onnx), _) => super::dump_onnx::dot(onnx, &mut out, q),
        (None, None, Some(pir)) => super::pir::dot(pir, &mut out, q),
        (None, None, None) => paddle_dot(g, &mut out),
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_name_their_source_node() {
        assert_eq!(source("^init"), "init");
        assert_eq!(source("split:1"), "split");
        assert_eq!(source("a:b"), "a:b");
        assert_eq!(source("x"), "x");
    }

    #[test]
    fn dot_quotes_hostile_names() {
        assert_eq!(q("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }
}
