//! Graphs: one model ([`Graph`]) and its two encodings, graph.fb and graph.pdmodel.
//!
//! ```
//! use modelzip::graph::{AttrValue, Graph, GraphFormat, Op, Program, Var};
//! use modelzip::DType;
//!
//! let mut p = Program::new();
//! let main = &mut p.blocks[0];
//! main.vars.push(Var::placeholder("x", DType::Fp32, vec![-1, 4]));
//! main.vars.push(Var::parameter("w", DType::Fp32, vec![4, 2]));
//! main.vars.push(Var::variable("y", DType::Fp32, vec![-1, 2]));
//! main.ops.push(
//!     Op::new("mm", "matmul_v2")
//!         .input("X", &["x"])
//!         .input("Y", &["w"])
//!         .output("Out", &["y"])
//!         .attr("trans_x", AttrValue::Bool(false)),
//! );
//! let g = Graph::from(p);
//! let fb = g.to_flatbuffers()?;
//! assert_eq!(Graph::decode(GraphFormat::FlatBuffers, &fb)?, g);
//! let pd = g.to_programdesc()?;
//! assert_eq!(Graph::decode(GraphFormat::ProgramDesc, &pd)?, g);
//! # Ok::<(), modelzip::Error>(())
//! ```

pub(crate) mod clean;
pub(crate) mod drawing;
pub(crate) mod dump;
pub mod flatbuffers;
mod generated;
pub(crate) mod model;
pub mod pir;
pub mod programdesc;
pub(crate) mod training_config;

pub use model::{
    Attr, AttrValue, Block, DENSE_TENSOR, DENSE_TENSOR_ARRAY, DenseTensorDesc, Graph, OnnxGraph,
    OnnxInit, Op, Program, Scalar, ScalarType, Slot, TensorDesc, TfAttr, TfGraph, TfNode,
    TfParamRef, Var, VarKind, VarTypeExtra, attr_type_name, var_type_name,
};
pub use pir::{PirGraph, PirParam, PirProgram};
pub use training_config::{HyperParam, Regularization, TrainingConfig};

use crate::error::{Error, ErrorKind, Result};

/// The two ways a graph is stored in an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphFormat {
    /// `graph.fb`: modelzip's FlatBuffers schema (schemas/graph.fbs).
    FlatBuffers,
    /// `graph.pdmodel`: a Paddle ProgramDesc protobuf.
    ProgramDesc,
}

impl GraphFormat {
    /// The entry file name inside a tag (`graph.fb` or `graph.pdmodel`).
    pub fn file_name(self) -> &'static str {
        match self {
            GraphFormat::FlatBuffers => "graph.fb",
            GraphFormat::ProgramDesc => "graph.pdmodel",
        }
    }

    /// Guesses the format of graph bytes: FlatBuffers when bytes 4..8 are graph.fb's
    /// identifier `MZGF`, otherwise ProgramDesc when the bytes start with the tag of
    /// `ProgramDesc.blocks` (field 1, length-delimited); `None` for anything else.
    pub fn sniff(bytes: &[u8]) -> Option<GraphFormat> {
        if bytes.get(4..8) == Some(flatbuffers::IDENTIFIER.as_bytes()) {
            Some(GraphFormat::FlatBuffers)
        } else if bytes.first() == Some(&0x0a) {
            Some(GraphFormat::ProgramDesc)
        } else {
            None
        }
    }

    /// The format of an entry file name, if it is one of the two.
    pub fn from_file_name(name: &str) -> Option<GraphFormat> {
        match name {
            "graph.fb" => Some(GraphFormat::FlatBuffers),
            "graph.pdmodel" => Some(GraphFormat::ProgramDesc),
            _ => None,
        }
    }
}

impl Graph {
    /// Decodes Paddle `.pdmodel` (ProgramDesc protobuf) bytes, checking required fields
    /// and enum values.
    pub fn from_programdesc(bytes: &[u8]) -> Result<Graph> {
        programdesc::decode(bytes).map(Graph::Program)
    }

    /// Encodes the graph as Paddle `.pdmodel` bytes; only a [`Graph::Program`] has that
    /// form.
    pub fn to_programdesc(&self) -> Result<Vec<u8>> {
        match self {
            Graph::Program(p) => programdesc::encode(p),
            Graph::Tf(_) => Err(programdesc::gerr(
                "the graph is a TensorFlow GraphDef, which has no Paddle ProgramDesc form",
            )),
            Graph::Onnx(_) => Err(programdesc::gerr(
                "the graph is an ONNX model, which has no Paddle ProgramDesc form",
            )),
            Graph::Pir(_) => Err(programdesc::gerr(
                "the graph is a Paddle PIR program, which is kept as the JSON Paddle wrote, \
                 not converted to a ProgramDesc",
            )),
        }
    }

    /// Decodes graph.fb bytes (verified with the FlatBuffers verifier first).
    pub fn from_flatbuffers(bytes: &[u8]) -> Result<Graph> {
        flatbuffers::decode(bytes)
    }

    /// A graph holding Paddle PIR JSON program bytes as they are (see [`pir`]), after
    /// checking them with [`pir::parse`].
    pub fn from_pir_json(bytes: &[u8]) -> Result<Graph> {
        pir::parse(bytes)?;
        Ok(Graph::Pir(PirGraph {
            json: bytes.to_vec(),
        }))
    }

    /// Encodes the graph as graph.fb bytes.
    pub fn to_flatbuffers(&self) -> Result<Vec<u8>> {
        flatbuffers::encode(self)
    }

    /// Decodes bytes in either format.
    pub fn decode(format: GraphFormat, bytes: &[u8]) -> Result<Graph> {
        match format {
            GraphFormat::FlatBuffers => Graph::from_flatbuffers(bytes),
            GraphFormat::ProgramDesc => Graph::from_programdesc(bytes),
        }
    }

    /// Encodes the graph in either format.
    pub fn encode(&self, format: GraphFormat) -> Result<Vec<u8>> {
        match format {
            GraphFormat::FlatBuffers => self.to_flatbuffers(),
            GraphFormat::ProgramDesc => self.to_programdesc(),
        }
    }
}

/// Why a graph did not decode, without the `graph: ` prefix of [`ErrorKind::Graph`].
pub(crate) fn graph_error_why(e: &Error) -> String {
    match e.kind() {
        ErrorKind::Graph(m) => m.clone(),
        _ => e.to_string(),
    }
}
