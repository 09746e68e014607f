//! A graph as the page draws it: the library's drawing of the graph
//! ([`modelzip::dump::drawing`], what `graph --format dot` writes out), operations as
//! nodes and values folded into the edges between the operations that write and read
//! them. Each operation carries its inputs, outputs and attributes.

use modelzip::Graph;
use modelzip::dump::{self, NodeRole};
use serde_json::{Value, json};
use std::collections::HashMap;

/// Graphs with more operations than this are listed, not drawn (the page says so).
pub const MAX_DRAWN: usize = 2000;
/// The most edges a document carries (folding a variable read by many operations and
/// written by many multiplies them).
const MAX_EDGES: usize = 20_000;
/// Attribute values are shortened to this many characters.
const MAX_ATTR: usize = 200;

fn short(s: &str) -> String {
    if s.chars().count() <= MAX_ATTR {
        return s.to_string();
    }
    let mut t: String = s.chars().take(MAX_ATTR).collect();
    t.push('…');
    t
}

fn slots(s: &[(String, Vec<String>)]) -> Value {
    Value::Array(
        s.iter()
            .map(|(name, args)| json!({"name": name, "args": args}))
            .collect(),
    )
}

/// `{kind, ops, drawn, nodes: [{id, op, label, block?, inputs?, outputs?, attrs}],
/// edges: [[from, to], ...], variables}`: every operation of every block (feed and fetch
/// included), values folded into operation-to-operation edges.
pub fn nodes(g: &Graph) -> Value {
    let kind = match g {
        Graph::Program(_) => "paddle",
        Graph::Tf(_) => "tensorflow",
        Graph::Onnx(_) => "onnx",
        Graph::Pir(_) => "pir",
    };
    let d = dump::drawing(g);
    let is_value = |i: usize| d.nodes.get(i).is_none_or(|n| n.role == NodeRole::Value);
    // Operation-to-operation edges, and each value's writers and readers.
    let mut edges: Vec<(usize, usize)> = Vec::new();
    let mut writers: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut readers: HashMap<usize, Vec<usize>> = HashMap::new();
    for e in &d.edges {
        match (is_value(e.from), is_value(e.to)) {
            (false, false) => edges.push((e.from, e.to)),
            (false, true) => writers.entry(e.to).or_default().push(e.from),
            (true, false) => readers.entry(e.from).or_default().push(e.to),
            (true, true) => {}
        }
    }
    let mut truncated = false;
    'fold: for (value, ws) in &writers {
        for r in readers.get(value).map(Vec::as_slice).unwrap_or_default() {
            for w in ws {
                if edges.len() >= MAX_EDGES {
                    truncated = true;
                    break 'fold;
                }
                edges.push((*w, *r));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let mut out_nodes = Vec::new();
    let mut variables = 0usize;
    for n in &d.nodes {
        if n.role == NodeRole::Value {
            variables += 1;
            continue;
        }
        let attrs: Vec<Value> = n
            .attrs
            .iter()
            .map(|(name, value)| json!({"name": name, "value": short(value)}))
            .collect();
        let mut node = json!({"id": n.id, "op": n.op(), "label": n.label, "attrs": attrs});
        if let Value::Object(m) = &mut node {
            // Kinds without slots (a PIR summary) leave them out: the page then lists
            // the operations the edges connect.
            if let Some(b) = n.block {
                m.insert("block".into(), json!(b));
            }
            if !n.inputs.is_empty() {
                m.insert("inputs".into(), slots(&n.inputs));
            }
            if !n.outputs.is_empty() {
                m.insert("outputs".into(), slots(&n.outputs));
            }
        }
        out_nodes.push(node);
    }
    let id = |i: usize| d.nodes[i].id.as_str();
    json!({
        "kind": kind,
        "ops": out_nodes.len(),
        "variables": variables,
        "drawn": out_nodes.len() <= MAX_DRAWN,
        "max_drawn": MAX_DRAWN,
        "edges_truncated": truncated,
        "nodes": out_nodes,
        "edges": edges.iter().map(|&(a, b)| json!([id(a), id(b)])).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use modelzip::DType;
    use modelzip::graph::{AttrValue, Op, Program, Var};

    /// Variables fold into op-to-op edges; attributes read as values, not Rust syntax.
    #[test]
    fn variables_fold_into_edges_between_ops() {
        let mut p = Program::new();
        let b = &mut p.blocks[0];
        b.vars.push(Var::placeholder("x", DType::Fp32, vec![-1, 4]));
        b.vars.push(Var::parameter("w", DType::Fp32, vec![4, 2]));
        b.vars.push(Var::variable("y", DType::Fp32, vec![-1, 2]));
        b.vars.push(Var::variable("z", DType::Fp32, vec![-1, 2]));
        b.ops.push(
            Op::new("", "matmul_v2")
                .input("X", &["x"])
                .input("Y", &["w"])
                .output("Out", &["y"])
                .attr("trans_x", AttrValue::Bool(false))
                .attr("axes", AttrValue::Ints(vec![0, 1])),
        );
        b.ops
            .push(Op::new("", "relu").input("X", &["y"]).output("Out", &["z"]));
        let v = nodes(&Graph::from(p));
        assert_eq!(v["kind"], "paddle");
        assert_eq!(v["ops"], 2);
        assert_eq!(v["variables"], 4);
        assert_eq!(v["edges"], json!([["b0o0", "b0o1"]]));
        assert_eq!(v["nodes"][0]["op"], "matmul_v2");
        assert_eq!(v["nodes"][0]["block"], 0);
        assert_eq!(
            v["nodes"][0]["inputs"][1],
            json!({"name": "Y", "args": ["w"]})
        );
        assert_eq!(
            v["nodes"][0]["attrs"][0],
            json!({"name": "trans_x", "value": "false"})
        );
        assert_eq!(
            v["nodes"][0]["attrs"][1],
            json!({"name": "axes", "value": "[0, 1]"})
        );
    }
}
