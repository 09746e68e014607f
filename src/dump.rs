//! Human-readable renderings of any graph: a text listing, JSON, a drawing (Graphviz
//! DOT, or nodes and edges to lay out), and the protobuf text format of ProgramDesc
//! bytes.
//!
//! One `match` over [`Graph`]'s kinds sends each to the module that understands it: a
//! Paddle / SameDiff program and a PIR program to [`crate::graph`], a TensorFlow graph
//! and an ONNX model to their formats' folders under [`crate::interop`]. All functions
//! return data; the library never prints. The JSON shape is documented in docs/GRAPH.md.

use serde_json::{Value, json};

use crate::error::Result;
use crate::graph::{Graph, dump as program, pir};
use crate::interop::{onnx, tf};

pub use crate::graph::clean::clean;
pub use crate::graph::drawing::{DrawEdge, DrawNode, Drawing, NodeRole, NodeShape};

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
pub fn drawing(g: &Graph) -> Drawing {
    match g {
        Graph::Program(p) => program::drawing(p),
        Graph::Tf(t) => tf::dump::drawing(t),
        Graph::Onnx(o) => onnx::dump::drawing(o),
        Graph::Pir(p) => pir::drawing(p),
    }
}

/// Any graph as Graphviz DOT (`dot -Tsvg` draws it): [`drawing`] written out.
/// TensorFlow nodes are labelled with their op and name (constants stored as parameters
/// with dtype and dims, control inputs dashed); Paddle operations are grey ellipses
/// between their variables (persistable ones boxed, with dtype and dims).
pub fn dot(g: &Graph) -> String {
    drawing(g).to_dot()
}

/// The protobuf text format of ProgramDesc bytes (pretty-printed, fields in
/// field-number order). The bytes are decoded and checked as by
/// [`Graph::from_programdesc`] first.
pub fn pbtxt(programdesc_bytes: &[u8]) -> Result<String> {
    program::pbtxt(programdesc_bytes)
}
