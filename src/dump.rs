//! Human-readable renderings of any graph: a text listing, JSON, a drawing (Graphviz
//! DOT, or the operations and the edges between them as JSON, what `modelzip view`
//! lays out), and the protobuf text format of ProgramDesc bytes.
//!
//! One `match` over [`Graph`]'s kinds sends each to the module that understands it: a
//! Paddle / SameDiff program and a PIR program to [`crate::graph`], a TensorFlow graph
//! and an ONNX model to their formats' folders under [`crate::interop`]. All functions
//! return data; the library never prints. The JSON shape is documented in docs/GRAPH.md.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

use crate::error::Result;
use crate::graph::{Graph, dump as program, pir};
use crate::interop::{onnx, tf};

pub use crate::graph::clean::clean;
use crate::graph::drawing::{Drawing, NodeRole};

/// A listing for people. For a program: per block, the variables (kind, dtype, shape,
/// flags) and the operations in order as `type(inputs) -> outputs  attrs`; long strings
/// and lists (such as `op_callstack`) are abbreviated; use [`json()`] for everything.
pub fn text(g: &Graph) -> String {
    match g {
        Graph::Program(p) => program::text(p),
        Graph::Tf(t) => tf::dump::text(t),
        Graph::Onnx(o) => onnx::dump::text(o),
        Graph::Pir(p) => pir::text(p),
    }
}

/// The whole graph as a JSON document, compact (every field; shape documented in
/// docs/GRAPH.md).
pub fn json(g: &Graph) -> String {
    json_value(g).to_string()
}

/// [`json()`] as a value.
pub(crate) fn json_value(g: &Graph) -> Value {
    match g {
        Graph::Program(p) => program::json_value(p),
        Graph::Tf(t) => json!({ "tensorflow": tf::dump::json(t) }),
        Graph::Onnx(o) => json!({ "onnx": onnx::dump::json(o) }),
        Graph::Pir(p) => json!({ "pir": pir::json(p) }),
    }
}

/// The graph's nodes and edges: Paddle operations between their variables, TensorFlow
/// nodes, ONNX nodes between their inputs and initializers, a PIR program's summary
/// and parameters.
pub(crate) fn drawing(g: &Graph) -> Drawing {
    match g {
        Graph::Program(p) => program::drawing(p),
        Graph::Tf(t) => tf::dump::drawing(t),
        Graph::Onnx(o) => onnx::dump::drawing(o),
        Graph::Pir(p) => pir::drawing(p),
    }
}

/// Any graph as Graphviz DOT (`dot -Tsvg` draws it): the graph's nodes and edges written
/// out.
/// TensorFlow nodes are labelled with their op and name (constants stored as parameters
/// with dtype and dims, control inputs dashed); Paddle operations are grey ellipses
/// between their variables (persistable ones boxed, with dtype and dims).
pub fn dot(g: &Graph) -> String {
    drawing(g).to_dot()
}

/// The graph as operations and the edges between them, a compact JSON document (what
/// `modelzip view` draws): `{kind, ops, variables, drawn, max_drawn, edges_truncated,
/// nodes: [{id, op, label, block?, inputs?: [{name, args}], outputs?, attrs: [{name,
/// value}]}], edges: [[from_id, to_id], ...]}`. Every operation of every block (feed and
/// fetch included) is a node; the values between operations are folded into
/// operation-to-operation edges (`variables` counts them). `kind` is `paddle`,
/// `tensorflow`, `onnx` or `pir`; attribute values are text, shortened past 200
/// characters; past 2,000 operations `drawn` is false (list them, do not draw them);
/// at most 20,000 distinct edges are kept, and the fold looks at most at 1,280,000
/// writer-reader pairs (`edges_truncated` says either). The same document for the same
/// graph on every machine.
pub fn op_graph(g: &Graph) -> String {
    op_graph_value(g).to_string()
}

/// Graphs with more operations than this are listed, not drawn (the page says so).
const MAX_DRAWN: usize = 2000;
/// The most edges a document carries (folding a variable read by many operations and
/// written by many multiplies them).
const MAX_EDGES: usize = 20_000;
/// The most writer-reader pairs folding the values into edges looks at.
const MAX_FOLD_STEPS: usize = 64 * MAX_EDGES;
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

/// [`op_graph`] as a value.
pub(crate) fn op_graph_value(g: &Graph) -> Value {
    let kind = match g {
        Graph::Program(_) => "paddle",
        Graph::Tf(_) => "tensorflow",
        Graph::Onnx(_) => "onnx",
        Graph::Pir(_) => "pir",
    };
    let d = drawing(g);
    let is_value = |i: usize| d.nodes.get(i).is_none_or(|n| n.role == NodeRole::Value);
    // Operation-to-operation edges, and each value's writers and readers.
    let mut edges: Vec<(usize, usize)> = Vec::new();
    // Ordered maps: which edges a truncated document keeps is the same on every run.
    let mut writers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut readers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for e in &d.edges {
        match (is_value(e.from), is_value(e.to)) {
            (false, false) => edges.push((e.from, e.to)),
            (false, true) => writers.entry(e.to).or_default().push(e.from),
            (true, false) => readers.entry(e.from).or_default().push(e.to),
            (true, true) => {}
        }
    }
    // Direct edges (TensorFlow, ONNX and PIR nodes read nodes) count against the cap too.
    edges.sort_unstable();
    edges.dedup();
    let mut truncated = edges.len() > MAX_EDGES;
    edges.truncate(MAX_EDGES);
    // An operation naming one value many times is one edge: the lists deduplicated, so
    // copies of one edge do not fill the cap. The fold stops at the cap of distinct
    // edges, or after MAX_FOLD_STEPS pairs (values with many writers and readers in
    // common make pairs that are mostly edges already kept).
    for list in writers.values_mut().chain(readers.values_mut()) {
        list.sort_unstable();
        list.dedup();
    }
    let mut kept: BTreeSet<(usize, usize)> = edges.iter().copied().collect();
    let mut steps = 0usize;
    'fold: for (value, ws) in &writers {
        for r in readers.get(value).map(Vec::as_slice).unwrap_or_default() {
            for w in ws {
                steps += 1;
                if steps > MAX_FOLD_STEPS {
                    truncated = true;
                    break 'fold;
                }
                if kept.contains(&(*w, *r)) {
                    continue;
                }
                if kept.len() >= MAX_EDGES {
                    truncated = true;
                    break 'fold;
                }
                kept.insert((*w, *r));
            }
        }
    }
    let edges: Vec<(usize, usize)> = kept.into_iter().collect();
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

/// The protobuf text format of ProgramDesc bytes (pretty-printed, fields in
/// field-number order). The bytes are decoded and checked as by [`Graph::decode`]
/// first.
pub fn pbtxt(programdesc_bytes: &[u8]) -> Result<String> {
    program::pbtxt(programdesc_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;
    use crate::graph::{AttrValue, Op, Program, Var, VarKind};

    /// Variables fold into op-to-op edges; attributes read as values, not Rust syntax.
    #[test]
    fn variables_fold_into_edges_between_ops() {
        let mut p = Program::default();
        let b = &mut p.blocks[0];
        b.vars.push(Var::new(
            "x",
            VarKind::Placeholder,
            DType::Fp32,
            vec![-1, 4],
        ));
        b.vars
            .push(Var::new("w", VarKind::Parameter, DType::Fp32, vec![4, 2]));
        b.vars
            .push(Var::new("y", VarKind::Variable, DType::Fp32, vec![-1, 2]));
        b.vars
            .push(Var::new("z", VarKind::Variable, DType::Fp32, vec![-1, 2]));
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
        let v = op_graph_value(&Graph::from(p));
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

    /// An operation reading one value 30,000 times makes one edge, not 30,000 copies of
    /// it that fill the cap and leave the other edges out.
    #[test]
    fn a_value_named_many_times_is_one_edge() {
        let mut p = Program::default();
        let b = &mut p.blocks[0];
        for name in ["v", "u", "w"] {
            b.vars
                .push(Var::new(name, VarKind::Variable, DType::Fp32, vec![2]));
        }
        b.ops.push(Op::new("", "fill").output("Out", &["v"]));
        let many = vec!["v"; 30_000];
        b.ops
            .push(Op::new("", "sum").input("X", &many).output("Out", &["u"]));
        b.ops
            .push(Op::new("", "relu").input("X", &["u"]).output("Out", &["w"]));
        b.ops.push(Op::new("", "scale").input("X", &["w"]));
        let v = op_graph_value(&Graph::from(p));
        assert_eq!(
            v["edges"],
            json!([["b0o0", "b0o1"], ["b0o1", "b0o2"], ["b0o2", "b0o3"]])
        );
        assert_eq!(v["edges_truncated"], false);
    }
}
