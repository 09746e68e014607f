//! Graphs: one model ([`Graph`]) and its two encodings, graph.fb and graph.pdmodel.
//!
//! ```
//! use modelzip::graph::{AttrValue, Op, Program, Var, VarKind};
//! use modelzip::{Graph, GraphFormat};
//! use modelzip::DType;
//!
//! let mut p = Program::default();
//! let main = &mut p.blocks[0];
//! main.vars.push(Var::new("x", VarKind::Placeholder, DType::Fp32, vec![-1, 4]));
//! main.vars.push(Var::new("w", VarKind::Parameter, DType::Fp32, vec![4, 2]));
//! main.vars.push(Var::new("y", VarKind::Variable, DType::Fp32, vec![-1, 2]));
//! main.ops.push(
//!     Op::new("mm", "matmul_v2")
//!         .input("X", &["x"])
//!         .input("Y", &["w"])
//!         .output("Out", &["y"])
//!         .attr("trans_x", AttrValue::Bool(false)),
//! );
//! let g = Graph::from(p);
//! let fb = g.encode(GraphFormat::FlatBuffers)?;
//! assert_eq!(Graph::decode(GraphFormat::FlatBuffers, &fb)?, g);
//! let pd = g.encode(GraphFormat::ProgramDesc)?;
//! assert_eq!(Graph::decode(GraphFormat::ProgramDesc, &pd)?, g);
//! # Ok::<(), modelzip::Error>(())
//! ```

pub(crate) mod clean;
pub(crate) mod drawing;
pub(crate) mod dump;
pub(crate) mod format;
internal_mod!(flatbuffers);
mod generated;
pub(crate) mod model;
internal_mod!(pir);
internal_mod!(programdesc);
pub(crate) mod training_config;

// [`Graph`], [`GraphFormat`] and [`TrainingConfig`] are public at the crate root only.
pub(crate) use format::GraphFormat;
pub(crate) use model::Graph;
pub use model::{
    Attr, AttrValue, Block, OnnxGraph, Op, Program, Scalar, ScalarType, Slot, TfGraph, Var, VarKind,
};
internal! {
    pub use model::{
        DenseTensorDesc, OnnxInit, TensorDesc, TfAttr, TfNode, TfParamRef, VarTypeExtra,
    };
}
pub use pir::{PirGraph, looks_like_pir};
pub(crate) use training_config::TrainingConfig;
pub use training_config::{HyperParam, Regularization};

use crate::error::{Error, ErrorKind, Result};

impl Graph {
    /// [`Graph::decode`] of ProgramDesc bytes.
    pub(crate) fn from_programdesc(bytes: &[u8]) -> Result<Graph> {
        programdesc::decode(bytes).map(Graph::Program)
    }

    /// [`Graph::encode`] as a ProgramDesc.
    pub(crate) fn to_programdesc(&self) -> Result<Vec<u8>> {
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

    /// [`Graph::decode`] of graph.fb bytes.
    pub(crate) fn from_flatbuffers(bytes: &[u8]) -> Result<Graph> {
        flatbuffers::decode(bytes)
    }

    /// A graph holding Paddle PIR JSON program bytes as they are, after checking them
    /// with the bounded PIR reader (docs/PADDLE.md).
    pub fn from_pir_json(bytes: &[u8]) -> Result<Graph> {
        pir::parse(bytes)?;
        Ok(Graph::Pir(PirGraph {
            json: bytes.to_vec(),
        }))
    }

    /// [`Graph::encode`] as graph.fb.
    pub(crate) fn to_flatbuffers(&self) -> Result<Vec<u8>> {
        flatbuffers::encode(self)
    }

    /// Decodes graph bytes in `format`: Paddle `.pdmodel` (ProgramDesc protobuf) bytes,
    /// checking required fields and enum values, or graph.fb bytes, verified with the
    /// FlatBuffers verifier first.
    pub fn decode(format: GraphFormat, bytes: &[u8]) -> Result<Graph> {
        match format {
            GraphFormat::FlatBuffers => Graph::from_flatbuffers(bytes),
            GraphFormat::ProgramDesc => Graph::from_programdesc(bytes),
        }
    }

    /// Encodes the graph in `format`: graph.fb holds every graph kind but PIR; a Paddle
    /// `.pdmodel` (ProgramDesc) only a [`Graph::Program`].
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
