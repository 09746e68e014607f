//! Renderings of TensorFlow graphs ([`TfGraph`]) for [`crate::dump`]: a listing, JSON
//! and a drawing.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::graph::clean::clean;
use crate::graph::drawing::{DrawNode, Drawing, NodeRole, NodeShape};
use crate::graph::{TfAttr, TfGraph};
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
    let v = match super::decode_stored_tf::<pb::AttrValue>(&a.value, "tensorflow.AttrValue") {
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
    super::decode_stored_tf::<pb::GraphDef>(&g.rest, "tensorflow.GraphDef").ok()
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
                    let v =
                        super::decode_stored_tf::<pb::AttrValue>(&a.value, "tensorflow.AttrValue")
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

/// The node a TensorFlow input names: `^ctrl` → `ctrl`, `name:1` → `name`.
fn source(input: &str) -> &str {
    let s = input.strip_prefix('^').unwrap_or(input);
    match s.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => s,
    }
}

/// The graph's drawing: nodes labelled with their op and name (constants stored as
/// parameters with dtype and dims), control inputs dashed.
pub(crate) fn drawing(g: &TfGraph) -> Drawing {
    let mut d = Drawing::default();
    for (i, n) in g.nodes.iter().enumerate() {
        let param = n.attrs.iter().find_map(|a| {
            let p = a.param.as_ref()?;
            let v =
                super::decode_stored_tf::<pb::AttrValue>(&a.value, "tensorflow.AttrValue").ok()?;
            Some((p.param.clone(), value_text(&v)))
        });
        let (shape, label) = match param {
            Some((p, t)) => (
                NodeShape::Box,
                format!("{}\n{}\n{}", n.op, p, t.trim_start_matches("tensor ")),
            ),
            None if n.op == "Placeholder" => (NodeShape::InvHouse, format!("{}\n{}", n.op, n.name)),
            None => (NodeShape::Ellipse, format!("{}\n{}", n.op, n.name)),
        };
        let mut node = DrawNode::new(format!("n{i}"), NodeRole::Op, shape, label);
        if !n.inputs.is_empty() {
            node.inputs = vec![("inputs".to_string(), n.inputs.clone())];
        }
        node.attrs = n
            .attrs
            .iter()
            .map(|a| {
                let v = super::decode_stored_tf::<pb::AttrValue>(&a.value, "tensorflow.AttrValue")
                    .map_or_else(|e| format!("(does not decode: {e})"), |v| value_text(&v));
                (a.name.clone(), v)
            })
            .collect();
        d.push(node);
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
                d.edge(from, i, input.starts_with('^'));
            }
        }
    }
    d
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
}
