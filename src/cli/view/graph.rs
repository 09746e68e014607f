//! A graph as the page draws it: the nodes and edges of the drawing `graph --format dot`
//! prints ([`modelzip::graph::dump::dot`]), operations as nodes and variables folded
//! into the edges between the operations that write and read them. Paddle operations
//! also carry their inputs, outputs and attributes from the decoded graph.

use modelzip::Graph;
use modelzip::graph::dump;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Graphs with more operations than this are listed, not drawn (the page says so).
pub const MAX_DRAWN: usize = 2000;
/// The most edges a document carries (folding a variable read by many operations and
/// written by many multiplies them).
const MAX_EDGES: usize = 20_000;
/// Attribute values are shortened to this many characters.
const MAX_ATTR: usize = 200;

/// One `ID [shape=S, ..., label="..."];` line of the drawing.
struct DotNode {
    id: String,
    shape: String,
    label: String,
}

/// Reads the drawing [`dump::dot`] writes: one node or edge statement a line. Lines of
/// any other form are skipped (the drawing has none but its header).
fn parse(dot: &str) -> (Vec<DotNode>, Vec<(String, String)>) {
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for line in dot.lines() {
        let line = line.trim();
        let Some(body) = line.strip_suffix(';') else {
            continue;
        };
        if let Some((from, rest)) = body.split_once(" -> ") {
            let to = rest.split([' ', '[']).next().unwrap_or("");
            if is_id(from) && is_id(to) {
                edges.push((from.to_string(), to.to_string()));
            }
            continue;
        }
        let Some((id, attrs)) = body.split_once(" [") else {
            continue;
        };
        // (`node [...]`, `graph [...]`, `edge [...]` set defaults: no node)
        if !is_id(id) || matches!(id, "node" | "graph" | "edge") {
            continue;
        }
        let shape = attrs
            .split_once("shape=")
            .and_then(|(_, r)| r.split([',', ']']).next())
            .unwrap_or("")
            .to_string();
        let label = attrs
            .split_once("label=")
            .map(|(_, r)| unquote(r))
            .unwrap_or_default();
        nodes.push(DotNode {
            id: id.to_string(),
            shape,
            label,
        });
    }
    (nodes, edges)
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The text of a quoted DOT string at the start of `s` (the escapes `q` writes).
fn unquote(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.strip_prefix('"').unwrap_or(s).chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    out
}

/// Whether a node of the drawing is a variable or value (folded into edges) rather
/// than an operation: Paddle variables and ONNX inputs and initializers. TensorFlow
/// nodes, constants included, are all operations; a PIR program (whose operations
/// modelzip counts but does not decode) is one node, its summary.
fn is_variable(g: &Graph, id: &str, shape: &str) -> bool {
    if g.pir.is_some() {
        // The summary box is the node; the parameter boxes linked to it are values.
        return id != "pir";
    }
    if g.tf.is_some() {
        return false;
    }
    matches!(shape, "box" | "plaintext" | "invhouse")
}

fn short(s: String) -> String {
    if s.chars().count() <= MAX_ATTR {
        return s;
    }
    let mut t: String = s.chars().take(MAX_ATTR).collect();
    t.push('…');
    t
}

/// The Paddle operation a node id `b{B}o{K}` of the drawing names, if any.
fn paddle_op<'g>(g: &'g Graph, id: &str) -> Option<&'g modelzip::graph::Op> {
    if g.tf.is_some() || g.onnx.is_some() || g.pir.is_some() {
        return None;
    }
    let (b, k) = id.strip_prefix('b')?.split_once('o')?;
    g.blocks
        .get(b.parse::<usize>().ok()?)?
        .ops
        .get(k.parse::<usize>().ok()?)
}

fn slots(s: &[modelzip::graph::Slot]) -> Value {
    Value::Array(
        s.iter()
            .map(|s| json!({"name": s.name, "args": s.args}))
            .collect(),
    )
}

/// `{kind, ops, drawn, nodes: [{id, op, label, block?, inputs?, outputs?, attrs?}],
/// edges: [[from, to], ...], variables}`: every operation of every block (feed and fetch
/// included), variables folded into operation-to-operation edges.
pub fn nodes(g: &Graph) -> Value {
    let kind = match (&g.tf, &g.onnx, &g.pir) {
        (Some(_), _, _) => "tensorflow",
        (None, Some(_), _) => "onnx",
        (None, None, Some(_)) => "pir",
        _ => "paddle",
    };
    let (dot_nodes, dot_edges) = parse(&dump::dot(g));
    let variable: HashMap<&str, bool> = dot_nodes
        .iter()
        .map(|n| (n.id.as_str(), is_variable(g, &n.id, &n.shape)))
        .collect();
    let is_var = |id: &str| variable.get(id).copied().unwrap_or(true);
    // Operation-to-operation edges, and each variable's writers and readers.
    let mut edges: Vec<(String, String)> = Vec::new();
    let mut writers: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut readers: HashMap<&str, Vec<&str>> = HashMap::new();
    for (from, to) in &dot_edges {
        match (is_var(from), is_var(to)) {
            (false, false) => edges.push((from.clone(), to.clone())),
            (false, true) => writers.entry(to).or_default().push(from),
            (true, false) => readers.entry(from).or_default().push(to),
            (true, true) => {}
        }
    }
    let mut truncated = false;
    for (var, ws) in &writers {
        for r in readers.get(var).map(Vec::as_slice).unwrap_or_default() {
            for w in ws {
                if edges.len() >= MAX_EDGES {
                    truncated = true;
                    break;
                }
                edges.push((w.to_string(), r.to_string()));
            }
        }
    }
    edges.sort();
    edges.dedup();
    let mut out_nodes = Vec::new();
    let mut variables = 0usize;
    for n in &dot_nodes {
        if is_var(&n.id) {
            variables += 1;
            continue;
        }
        let op = n.label.lines().next().unwrap_or("").to_string();
        let mut node = json!({"id": n.id, "op": op, "label": n.label});
        if let (Some(o), Value::Object(m)) = (paddle_op(g, &n.id), &mut node) {
            let block =
                n.id.strip_prefix('b')
                    .and_then(|r| r.split('o').next())
                    .and_then(|b| b.parse::<usize>().ok());
            m.insert("block".into(), json!(block));
            m.insert("inputs".into(), slots(&o.inputs));
            m.insert("outputs".into(), slots(&o.outputs));
            let attrs: Vec<Value> = o
                .attrs
                .iter()
                .map(|a| json!({"name": a.name, "value": short(format!("{:?}", a.value))}))
                .collect();
            m.insert("attrs".into(), Value::Array(attrs));
        }
        if let (Some(pir), Value::Object(m)) = (&g.pir, &mut node)
            && let Ok(p) = pir.program()
        {
            // The op counts per op name, as the node's attributes.
            let attrs: Vec<Value> = p
                .op_counts
                .iter()
                .map(|(op, n)| json!({"name": op, "value": n.to_string()}))
                .collect();
            m.insert("attrs".into(), Value::Array(attrs));
        }
        out_nodes.push(node);
    }
    json!({
        "kind": kind,
        "ops": out_nodes.len(),
        "variables": variables,
        "drawn": out_nodes.len() <= MAX_DRAWN,
        "max_drawn": MAX_DRAWN,
        "edges_truncated": truncated,
        "nodes": out_nodes,
        "edges": edges.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_drawing_lines() {
        let (n, e) = parse(
            "digraph G {\n  rankdir=TB;\n  b0v0 [shape=box, label=\"w\\n\\\"q\\\"\"];\n  b0o0 [shape=ellipse, style=filled, label=\"mul\"];\n  b0v0 -> b0o0;\n  n1 -> n2 [style=dashed];\n}\n",
        );
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].label, "w\n\"q\"");
        assert_eq!(n[0].shape, "box");
        assert_eq!(n[1].shape, "ellipse");
        assert_eq!(
            e,
            [("b0v0".into(), "b0o0".into()), ("n1".into(), "n2".into())]
        );
    }
}
