//! Renderings of ONNX models ([`OnnxGraph`]) for `modelzip graph`: a listing for
//! people and JSON. The stored ModelProto is decoded; initializers that are tag
//! parameters are shown by name (their values are in the tag).

use crate::graph::OnnxGraph;
use crate::graph::clean::clean;
use crate::graph::drawing::{DrawNode, Drawing, NodeRole, NodeShape};
use crate::onnx_proto as pb;
use serde_json::{Value, json};

fn decode(g: &OnnxGraph) -> Option<pb::ModelProto> {
    // Walked first: a few KiB of deflated graph.fb can hold millions of empty messages.
    super::decode_stored_model(g).ok()
}

/// A listing: the model's versions and opsets, inputs, outputs, the nodes in order as
/// `op_type(inputs) -> outputs  name`, and the initializers.
pub fn text(g: &OnnxGraph) -> String {
    let Some(m) = decode(g) else {
        return "ONNX model: the stored ModelProto does not decode\n".to_string();
    };
    let mut out = format!(
        "ONNX model: ir_version {}, producer {:?} {:?}, opsets {}\n",
        m.ir_version(),
        m.producer_name(),
        m.producer_version(),
        m.opset_import
            .iter()
            .map(|o| format!("{}:{}", clean(o.domain()), o.version()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let Some(graph) = &m.graph else {
        return out;
    };
    let names = |v: &[pb::ValueInfoProto]| {
        v.iter()
            .map(|i| clean(i.name()).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    out.push_str(&format!("inputs: {}\n", names(&graph.input)));
    out.push_str(&format!("outputs: {}\n", names(&graph.output)));
    out.push_str(&format!(
        "{} node(s), {} initializer(s) ({} tag parameter(s)), {} function(s)\n\n",
        graph.node.len(),
        graph.initializer.len(),
        g.initializers.iter().filter(|i| i.param.is_some()).count(),
        m.functions.len()
    ));
    for n in &graph.node {
        // Names from the file, escaped (a listing is read in a terminal).
        let list = |v: &[String]| v.iter().map(|s| clean(s)).collect::<Vec<_>>().join(", ");
        let domain = if n.domain().is_empty() {
            String::new()
        } else {
            format!("{}.", clean(n.domain()))
        };
        let line = format!(
            "{domain}{}({}) -> {}  {}",
            clean(n.op_type()),
            list(&n.input),
            list(&n.output),
            clean(n.name())
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The model as JSON: versions, opsets, inputs, outputs, nodes (op, name, inputs,
/// outputs, attribute names) and initializers (name, parameter, form, the external
/// data entries they were imported from).
pub fn json(g: &OnnxGraph) -> Value {
    let Some(m) = decode(g) else {
        return json!({"error": "the stored ModelProto does not decode"});
    };
    let graph = m.graph.clone().unwrap_or_default();
    let inits: Vec<Value> = graph
        .initializer
        .iter()
        .zip(&g.initializers)
        .map(|(t, i)| {
            json!({
                "name": t.name(),
                "data_type": t.data_type(),
                "dims": t.dims,
                "param": i.param,
                "form": match (&i.param, i.typed) {
                    (None, _) => "in the model",
                    (Some(_), true) => "typed field",
                    (Some(_), false) => "raw_data",
                },
                // Where the values were imported from (and a plain export writes them).
                "external": (!i.external.is_empty()).then(|| {
                    i.external
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect::<serde_json::Map<String, Value>>()
                }),
            })
        })
        .collect();
    json!({
        "ir_version": m.ir_version(),
        "producer_name": m.producer_name(),
        "producer_version": m.producer_version(),
        "opset_import": m.opset_import.iter()
            .map(|o| json!({"domain": o.domain(), "version": o.version()}))
            .collect::<Vec<_>>(),
        "inputs": graph.input.iter().map(|i| i.name()).collect::<Vec<_>>(),
        "outputs": graph.output.iter().map(|i| i.name()).collect::<Vec<_>>(),
        "nodes": graph.node.iter().map(|n| json!({
            "op_type": n.op_type(),
            "domain": n.domain(),
            "name": n.name(),
            "inputs": n.input,
            "outputs": n.output,
            "attributes": n.attribute.iter().map(|a| a.name()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "initializers": inits,
        "functions": m.functions.iter().map(|f| f.name()).collect::<Vec<_>>(),
    })
}

/// The model's main graph drawn: graph inputs as houses, initializers as boxes (with
/// the parameter holding them), nodes as ellipses labelled with their op and name, an
/// edge for every value a node reads from a producer.
pub(crate) fn drawing(g: &OnnxGraph) -> Drawing {
    use std::collections::HashMap;
    let mut d = Drawing::default();
    let Some(graph) = decode(g).and_then(|m| m.graph) else {
        return d;
    };
    // Which node produces each value name.
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, v) in graph.input.iter().enumerate() {
        let n = d.push(DrawNode::new(
            format!("i{i}"),
            NodeRole::Value,
            NodeShape::InvHouse,
            v.name().to_string(),
        ));
        producer.insert(v.name(), n);
    }
    for (i, (t, init)) in graph.initializer.iter().zip(&g.initializers).enumerate() {
        let label = match &init.param {
            Some(p) => format!("{p}\n{:?}", t.dims),
            None => format!("{}\n{:?} (in the model)", t.name(), t.dims),
        };
        let n = d.push(DrawNode::new(
            format!("w{i}"),
            NodeRole::Value,
            NodeShape::Box,
            label,
        ));
        producer.insert(t.name(), n);
    }
    let mut ids = Vec::with_capacity(graph.node.len());
    for (i, n) in graph.node.iter().enumerate() {
        let mut node = DrawNode::new(
            format!("n{i}"),
            NodeRole::Op,
            NodeShape::Ellipse,
            format!("{}\n{}", n.op_type(), n.name()),
        );
        node.inputs = vec![("inputs".to_string(), n.input.clone())];
        node.outputs = vec![("outputs".to_string(), n.output.clone())];
        node.attrs = n
            .attribute
            .iter()
            .map(|a| (a.name().to_string(), attr_text(a)))
            .collect();
        let id = d.push(node);
        ids.push(id);
        for o in &n.output {
            producer.insert(o, id);
        }
    }
    for (n, &id) in graph.node.iter().zip(&ids) {
        for input in &n.input {
            if let Some(&from) = producer.get(input.as_str()) {
                d.edge(from, id, false);
            }
        }
    }
    d
}

/// An attribute's value in words: numbers and strings as they are (lists of more than 8
/// items cut), tensors and graphs by their shape.
fn attr_text(a: &pb::AttributeProto) -> String {
    fn list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
        let mut shown: Vec<String> = items.iter().take(8).map(show).collect();
        if items.len() > 8 {
            shown.push(format!("… {} more", items.len() - 8));
        }
        format!("[{}]", shown.join(", "))
    }
    let text = |b: &Vec<u8>| format!("{:?}", String::from_utf8_lossy(b));
    if let Some(f) = a.f {
        f.to_string()
    } else if let Some(i) = a.i {
        i.to_string()
    } else if let Some(s) = &a.s {
        text(s)
    } else if let Some(t) = &a.t {
        format!("tensor {:?}", t.dims)
    } else if let Some(g) = &a.g {
        format!("graph of {} node(s)", g.node.len())
    } else if !a.floats.is_empty() {
        list(&a.floats, f32::to_string)
    } else if !a.ints.is_empty() {
        list(&a.ints, i64::to_string)
    } else if !a.strings.is_empty() {
        list(&a.strings, text)
    } else {
        String::new()
    }
}
