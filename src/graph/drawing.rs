//! A graph as nodes and edges, for drawing: what `graph --format dot` prints and what
//! `modelzip view` lays out. Every graph kind builds one ([`crate::dump::drawing`]), so
//! a drawing is made once, from the decoded graph, and never read back from DOT text.

use std::fmt::Write as _;

/// What a node of a drawing stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    /// An operation (a Paddle op, a TensorFlow node, an ONNX node, a PIR op).
    Op,
    /// A value operations read and write: a Paddle variable, an ONNX graph input or
    /// initializer, a PIR parameter.
    Value,
}

/// How a node is drawn in DOT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeShape {
    /// `ellipse`: an operation.
    Ellipse,
    /// `ellipse`, filled grey: a Paddle operation.
    FilledEllipse,
    /// `box`: a parameter or persistable variable.
    Box,
    /// `box`, rounded: a summary.
    RoundedBox,
    /// `plaintext`: a temporary variable.
    Plaintext,
    /// `invhouse`: a graph input.
    InvHouse,
}

/// One node.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawNode {
    /// A DOT identifier, unique in the drawing (`b0o3`, `n7`, ...).
    pub id: String,
    /// Operation or value.
    pub role: NodeRole,
    /// How DOT draws it.
    pub shape: NodeShape,
    /// The label, lines separated by `\n`; an operation's first line is its op.
    pub label: String,
    /// The block an operation runs in (Paddle programs), else `None`.
    pub block: Option<usize>,
    /// An operation's inputs as (slot, arguments); empty when the kind has no slots.
    pub inputs: Vec<(String, Vec<String>)>,
    /// An operation's outputs as (slot, arguments).
    pub outputs: Vec<(String, Vec<String>)>,
    /// An operation's attributes as (name, value in words).
    pub attrs: Vec<(String, String)>,
}

impl DrawNode {
    /// A node with a label and nothing else.
    pub(crate) fn new(id: String, role: NodeRole, shape: NodeShape, label: String) -> DrawNode {
        DrawNode {
            id,
            role,
            shape,
            label,
            block: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: Vec::new(),
        }
    }

    /// The first line of the label: an operation's op.
    pub fn op(&self) -> &str {
        self.label.lines().next().unwrap_or("")
    }
}

/// One edge, by node index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrawEdge {
    /// The node the edge leaves.
    pub from: usize,
    /// The node it enters.
    pub to: usize,
    /// A control dependency (drawn dashed).
    pub control: bool,
}

/// A graph's nodes and edges.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Drawing {
    /// The nodes, in the graph's order.
    pub nodes: Vec<DrawNode>,
    /// The edges, in the graph's order.
    pub edges: Vec<DrawEdge>,
}

impl Drawing {
    /// Adds a node and returns its index.
    pub(crate) fn push(&mut self, node: DrawNode) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Adds an edge between two node indexes.
    pub(crate) fn edge(&mut self, from: usize, to: usize, control: bool) {
        self.edges.push(DrawEdge { from, to, control });
    }

    /// The drawing as Graphviz DOT (`dot -Tsvg` draws it).
    pub(crate) fn to_dot(&self) -> String {
        let mut out = String::from("digraph G {\n  rankdir=TB;\n  node [fontsize=10];\n");
        for n in &self.nodes {
            let shape = match n.shape {
                NodeShape::Ellipse => "ellipse",
                NodeShape::FilledEllipse => "ellipse, style=filled, fillcolor=lightgrey",
                NodeShape::Box => "box",
                NodeShape::RoundedBox => "box, style=rounded",
                NodeShape::Plaintext => "plaintext",
                NodeShape::InvHouse => "invhouse",
            };
            let _ = writeln!(
                out,
                "  {} [shape={shape}, label={}];",
                n.id,
                quote(&n.label)
            );
        }
        for e in &self.edges {
            let (Some(from), Some(to)) = (self.nodes.get(e.from), self.nodes.get(e.to)) else {
                continue;
            };
            let style = if e.control { " [style=dashed]" } else { "" };
            let _ = writeln!(out, "  {} -> {}{style};", from.id, to.id);
        }
        out.push_str("}\n");
        out
    }
}

/// A DOT string literal.
pub(crate) fn quote(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_quotes_hostile_names() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }

    #[test]
    fn dot_lists_nodes_then_edges() {
        let mut d = Drawing::default();
        let a = d.push(DrawNode::new(
            "a".into(),
            NodeRole::Op,
            NodeShape::FilledEllipse,
            "mul".into(),
        ));
        let b = d.push(DrawNode::new(
            "b".into(),
            NodeRole::Value,
            NodeShape::Box,
            "w\n[2]".into(),
        ));
        d.edge(b, a, false);
        d.edge(a, b, true);
        assert_eq!(
            d.to_dot(),
            "digraph G {\n  rankdir=TB;\n  node [fontsize=10];\n  a [shape=ellipse, style=filled, fillcolor=lightgrey, label=\"mul\"];\n  b [shape=box, label=\"w\\n[2]\"];\n  b -> a;\n  a -> b [style=dashed];\n}\n"
        );
    }
}
