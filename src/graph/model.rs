//! The one graph model that both encodings (ProgramDesc and graph.fb) map onto.
//!
//! The model mirrors Paddle's ProgramDesc closely enough that a `.pdmodel` survives
//! `ProgramDesc → Graph → ProgramDesc` byte for byte: proto2 optional fields that Paddle
//! may or may not write are `Option`s (`None` = not written), lists keep their order.
//! SameDiff-style graphs (one block; placeholders, constants, variables; long, double,
//! bool and data-type arguments) are built with the constructors on [`Var`] and [`Op`].

use crate::tensor::DType;

/// A graph: one of the kinds an archive stores. Each kind is one variant, so a graph
/// is exactly one kind and a `match` names every place a new kind must be handled.
///
/// The Paddle / SameDiff [`Program`] is modelzip's own model (both encodings hold it);
/// the other kinds are foreign formats' graphs as graph.fb keeps them, understood by
/// their format's module under [`crate::interop`].
#[derive(Debug, Clone, PartialEq)]
pub enum Graph {
    /// A Paddle ProgramDesc or SameDiff program: nested blocks of variables and ops.
    Program(Program),
    /// A TensorFlow GraphDef (imported by `interop::tf`).
    Tf(TfGraph),
    /// An ONNX model (imported by `interop::onnx`).
    Onnx(OnnxGraph),
    /// A Paddle 3 PIR program, `.json` (imported by `interop::paddle`).
    Pir(super::pir::PirGraph),
}

/// A whole Paddle / SameDiff program: nested blocks of variables and operations.
/// `Program::default()` is one empty main block.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// The blocks; block 0 is the main (global) block.
    pub blocks: Vec<Block>,
    /// `ProgramDesc.version.version` (2006002 from Paddle 2.6, 3003001 from 3.3.1).
    pub version: Option<i64>,
    /// `ProgramDesc.op_version_map` as (op name, version) pairs in file order;
    /// `None` when the map is absent, `Some(vec![])` when present but empty.
    pub op_version_map: Option<Vec<(String, i32)>>,
}

internal_fields! {
    /// An ONNX ModelProto as graph.fb keeps it: the model's protobuf with the values of the
    /// initializers that are tag parameters removed.
    #[derive(Debug, Clone, PartialEq, Default)]
    pub struct OnnxGraph {
        /// The ModelProto, encoded, with those initializers' values removed.
        model: Vec<u8>,
        /// One entry per top-level initializer (`GraphProto.initializer`), in order.
        initializers: Vec<OnnxInit>,
    }
}

internal_fields! {
    /// Where one top-level ONNX initializer's values are.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub(crate) struct OnnxInit {
        /// The tag parameter holding the values; `None` when the initializer is kept whole
        /// in the model (strings, values the parameters cannot hold as they came).
        param: Option<String>,
        /// The values were in the dtype's typed field (`float_data`, `int32_data`, ...),
        /// not `raw_data`.
        typed: bool,
        /// The values came from external data: its `external_data` entries (`location`,
        /// `offset`, `length`, `checksum`) as (key, value) pairs, as they came; empty when
        /// they were in the model. A plain export writes them back there.
        external: Vec<(String, String)>,
    }
}

internal_fields! {
    /// A TensorFlow GraphDef as graph.fb keeps it: the nodes field by field, attribute
    /// values as TensorFlow's `AttrValue` protobuf, everything else as protobuf bytes.
    #[derive(Debug, Clone, PartialEq, Default)]
    pub struct TfGraph {
        /// The nodes, in GraphDef order.
        nodes: Vec<TfNode>,
        /// The GraphDef without its nodes (versions, function library, debug info), encoded.
        rest: Vec<u8>,
    }
}

internal_fields! {
    /// A TensorFlow NodeDef.
    #[derive(Debug, Clone, PartialEq, Default)]
    pub(crate) struct TfNode {
        /// The node name.
        name: String,
        /// The op (`Const`, `MatMul`, ...).
        op: String,
        /// Inputs in order: `node`, `node:port`, control inputs `^node`.
        inputs: Vec<String>,
        /// The requested device, `""` when none.
        device: String,
        /// The attributes, in key order.
        attrs: Vec<TfAttr>,
        /// The NodeDef's other fields (experimental debug info and type), encoded; empty
        /// when none.
        rest: Vec<u8>,
    }
}

internal_fields! {
    /// A TensorFlow node attribute.
    #[derive(Debug, Clone, PartialEq, Default)]
    pub(crate) struct TfAttr {
        /// The key.
        name: String,
        /// The `AttrValue` protobuf; for a tensor stored as a parameter, the AttrValue with
        /// the tensor's values removed.
        value: Vec<u8>,
        /// Where the tensor's values are, when they are a tag parameter.
        param: Option<TfParamRef>,
    }
}

internal_fields! {
    /// A Const tensor whose values are a tag parameter.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct TfParamRef {
        /// The parameter's name.
        param: String,
        /// How the values were written: `None` in `tensor_content`; `Some(n)` as the first
        /// `n` values in the dtype's typed field (`float_val`, ...), fewer than the element
        /// count when TensorFlow repeats the last one (the splat form).
        typed_count: Option<u64>,
    }
}

/// One block: a scope with its variables and the operations that run in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The block's index in the program.
    pub idx: i32,
    /// The parent block's index (-1 for the main block).
    pub parent_idx: i32,
    /// The forward block of a backward block (Paddle writes `-1` or omits it).
    pub forward_block_idx: Option<i32>,
    /// The block's variables, in declaration order.
    pub vars: Vec<Var>,
    /// The block's operations, in execution order.
    pub ops: Vec<Op>,
}

impl Block {
    /// An empty main block: index 0, parent -1.
    pub fn main() -> Block {
        Block {
            idx: 0,
            parent_idx: -1,
            forward_block_idx: None,
            vars: Vec::new(),
            ops: Vec::new(),
        }
    }
}

/// What a variable is.
///
/// The first five are SameDiff's kinds. In a ProgramDesc they are Paddle variables of
/// type `DENSE_TENSOR` (7) told apart by their flags, or `DENSE_TENSOR_ARRAY` (13):
/// a placeholder has `need_check_feed` true; a parameter is persistable with
/// `is_parameter` true; a constant is persistable without it; anything else is a
/// variable. Every other Paddle `VarType.Type` number is kept as [`VarKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VarKind {
    /// An input fed at run time.
    Placeholder,
    /// A persistable, non-trainable tensor.
    Constant,
    /// An intermediate value computed by an operation (SameDiff's ARRAY kind).
    Variable,
    /// A trainable, persistable tensor (SameDiff's VARIABLE kind).
    Parameter,
    /// A Paddle tensor array (`DENSE_TENSOR_ARRAY`), a list of tensors.
    Array,
    /// Any other Paddle `VarType.Type` number (FEED_MINIBATCH 9, FETCH_LIST 10, READER 15, ...).
    Other(i32),
}

/// Paddle's `VarType.Type` number for a dense tensor.
pub const DENSE_TENSOR: i32 = 7;
/// Paddle's `VarType.Type` number for a dense tensor array.
pub const DENSE_TENSOR_ARRAY: i32 = 13;

impl VarKind {
    /// The Paddle `VarType.Type` number this kind is written as.
    pub(crate) fn paddle_type(self) -> i32 {
        match self {
            VarKind::Placeholder | VarKind::Constant | VarKind::Variable | VarKind::Parameter => {
                DENSE_TENSOR
            }
            VarKind::Array => DENSE_TENSOR_ARRAY,
            VarKind::Other(n) => n,
        }
    }

    /// A short lower-case name (`placeholder`, ..., or Paddle's type name for others).
    pub fn name(self) -> String {
        match self {
            VarKind::Placeholder => "placeholder".into(),
            VarKind::Constant => "constant".into(),
            VarKind::Variable => "variable".into(),
            VarKind::Parameter => "parameter".into(),
            VarKind::Array => "array".into(),
            VarKind::Other(n) => var_type_name(n)
                .map(str::to_ascii_lowercase)
                .unwrap_or_else(|| format!("type {n}")),
        }
    }
}

/// Paddle's name for a `VarType.Type` number, if it is one.
pub fn var_type_name(n: i32) -> Option<&'static str> {
    if let Ok(d) = DType::from_code(n.into()) {
        return Some(d.name());
    }
    Some(match n {
        7 => "DENSE_TENSOR",
        8 => "SELECTED_ROWS",
        9 => "FEED_MINIBATCH",
        10 => "FETCH_LIST",
        11 => "STEP_SCOPES",
        12 => "LOD_RANK_TABLE",
        13 => "DENSE_TENSOR_ARRAY",
        14 => "PLACE_LIST",
        15 => "READER",
        17 => "RAW",
        18 => "TUPLE",
        25 => "STRING",
        26 => "STRINGS",
        27 => "VOCAB",
        28 => "FEED_LIST",
        29 => "PSTRING",
        30 => "SPARSE_COO",
        31 => "SPARSE_CSR",
        _ => return None,
    })
}

/// Which `VarType` field holds the main tensor description of a variable of type `n`.
pub(crate) fn main_slot(n: i32) -> Option<TensorSlot> {
    Some(match n {
        7 => TensorSlot::DenseTensor,
        13 => TensorSlot::TensorArray,
        8 => TensorSlot::SelectedRows,
        25 => TensorSlot::String,
        26 => TensorSlot::Strings,
        27 => TensorSlot::Vocab,
        30 => TensorSlot::SparseCoo,
        31 => TensorSlot::SparseCsr,
        _ => return None,
    })
}

/// The tensor-description fields of Paddle's `VarType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TensorSlot {
    SelectedRows,
    DenseTensor,
    TensorArray,
    String,
    Strings,
    Vocab,
    SparseCoo,
    SparseCsr,
}

impl TensorSlot {
    /// Whether the slot carries a `legacy_lod_level`.
    pub(crate) fn has_lod(self) -> bool {
        matches!(self, TensorSlot::DenseTensor | TensorSlot::TensorArray)
    }
}

/// A variable: a named tensor (or other Paddle variable type) of a block.
#[derive(Debug, Clone, PartialEq)]
pub struct Var {
    /// The variable's name, unique in its block.
    pub name: String,
    /// What it is (see [`VarKind`] for how this maps onto Paddle's flags).
    pub kind: VarKind,
    /// Element type of the main tensor description; `None` when the variable has none.
    pub dtype: Option<DType>,
    /// Dimensions of the main tensor description; -1 is an unknown extent.
    pub shape: Vec<i64>,
    /// `legacy_lod_level` of a dense tensor / tensor array; `None` when not written.
    pub lod_level: Option<i32>,
    /// Kept across runs (parameters, constants, feed/fetch holders); `None` = not written.
    pub persistable: Option<bool>,
    /// Paddle checks the fed tensor against dtype and shape; `None` = not written.
    pub need_check_feed: Option<bool>,
    /// A trainable parameter; `None` = not written.
    pub is_parameter: Option<bool>,
    /// No gradient flows through it; `None` = not written.
    pub stop_gradient: Option<bool>,
    /// `VarDesc.attrs` in file order (Paddle allows INT, STRING and INTS values).
    pub attrs: Vec<Attr>,
    /// `VarType` descriptions other than the main one (rare; kept so nothing is lost
    /// between the two encodings; the JSON dump shows them). Crate-private: a Paddle
    /// detail users neither build nor read (so a `Var` is built with [`Var::new`] and its
    /// kin, then its public fields set).
    #[cfg(feature = "test-internals")]
    #[doc(hidden)]
    pub extra: VarTypeExtra,
    /// (See above.)
    #[cfg(not(feature = "test-internals"))]
    pub(crate) extra: VarTypeExtra,
}

impl Var {
    /// A variable of `kind` with dtype and shape, and the flags its kind implies (what
    /// decoding a graph that holds it gives back): a placeholder needs a feed and is not
    /// persistable, a constant is persistable, a parameter persistable and a parameter, a
    /// variable not persistable; an array or another Paddle type gets no flags. The
    /// other fields are public to change.
    pub fn new(name: impl Into<String>, kind: VarKind, dtype: DType, shape: Vec<i64>) -> Var {
        let (persistable, need_check_feed, is_parameter) = match kind {
            VarKind::Placeholder => (Some(false), Some(true), None),
            VarKind::Constant => (Some(true), None, None),
            VarKind::Parameter => (Some(true), None, Some(true)),
            VarKind::Variable => (Some(false), None, None),
            VarKind::Array | VarKind::Other(_) => (None, None, None),
        };
        Var {
            name: name.into(),
            kind,
            dtype: Some(dtype),
            shape,
            lod_level: None,
            persistable,
            need_check_feed,
            is_parameter,
            stop_gradient: None,
            attrs: Vec::new(),
            extra: VarTypeExtra::default(),
        }
    }

    /// Whether the variable is persistable (absent means false, as in Paddle).
    pub fn is_persistable(&self) -> bool {
        self.persistable.unwrap_or(false)
    }
}

/// A Paddle `TensorDesc`: element type and dims.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDesc {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, -1 unknown.
    pub dims: Vec<i64>,
}

/// A Paddle `DenseTensorDesc` / `DenseTensorArrayDesc`.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseTensorDesc {
    /// The tensor description.
    pub tensor: TensorDesc,
    /// `legacy_lod_level`, `None` when not written.
    pub lod_level: Option<i32>,
}

/// The `VarType` fields not folded into [`Var::dtype`] / [`Var::shape`].
///
/// The field that holds the variable's main description (for example `dense_tensor`
/// of a `DENSE_TENSOR`) is always `None` here.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VarTypeExtra {
    /// `selected_rows`.
    pub selected_rows: Option<TensorDesc>,
    /// `dense_tensor`.
    pub dense_tensor: Option<DenseTensorDesc>,
    /// `tensor_array`.
    pub tensor_array: Option<DenseTensorDesc>,
    /// `reader.dense_tensor`; `Some` when the reader message is present.
    pub reader: Option<Vec<DenseTensorDesc>>,
    /// `tuple.element_type` as Paddle `VarType.Type` numbers; `Some` when present.
    pub tuple: Option<Vec<i32>>,
    /// `string`.
    pub string: Option<TensorDesc>,
    /// `strings`.
    pub strings: Option<TensorDesc>,
    /// `vocab`.
    pub vocab: Option<TensorDesc>,
    /// `sparse_coo`.
    pub sparse_coo: Option<TensorDesc>,
    /// `sparse_csr`.
    pub sparse_csr: Option<TensorDesc>,
}

impl VarTypeExtra {
    /// Whether no extra description is present.
    pub fn is_empty(&self) -> bool {
        *self == VarTypeExtra::default()
    }
}

/// An operation: a type, named input and output slots, and attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// The operation's own name (SameDiff names ops; Paddle does not, so it is `""`).
    pub name: String,
    /// The op type (`matmul_v2`, `conv2d`, `feed`, ...).
    pub op_type: String,
    /// Input slots in file order.
    pub inputs: Vec<Slot>,
    /// Output slots in file order.
    pub outputs: Vec<Slot>,
    /// Attributes in file order.
    pub attrs: Vec<Attr>,
    /// `OpDesc.is_target`; `None` when not written.
    pub is_target: Option<bool>,
}

impl Op {
    /// An operation with no slots or attributes.
    pub fn new(name: impl Into<String>, op_type: impl Into<String>) -> Op {
        Op {
            name: name.into(),
            op_type: op_type.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: Vec::new(),
            is_target: None,
        }
    }

    /// Adds an input slot.
    pub fn input(mut self, slot: impl Into<String>, args: &[&str]) -> Op {
        self.inputs.push(Slot::new(slot, args));
        self
    }

    /// Adds an output slot.
    pub fn output(mut self, slot: impl Into<String>, args: &[&str]) -> Op {
        self.outputs.push(Slot::new(slot, args));
        self
    }

    /// Adds an attribute.
    pub fn attr(mut self, name: impl Into<String>, value: AttrValue) -> Op {
        self.attrs.push(Attr {
            name: name.into(),
            value,
        });
        self
    }

    /// The attribute named `name`, if any.
    pub fn get_attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|a| a.name == name).map(|a| &a.value)
    }
}

/// A named input or output slot and the variable names bound to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// The slot name (`X`, `Filter`, `Out`, ...).
    pub name: String,
    /// Variable names, in order.
    pub args: Vec<String>,
}

impl Slot {
    /// A slot from borrowed names.
    pub fn new(name: impl Into<String>, args: &[&str]) -> Slot {
        Slot {
            name: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A named attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    /// The name.
    pub name: String,
    /// The value, with its exact Paddle type.
    pub value: AttrValue,
}

/// An attribute value: one variant per Paddle `AttrType`, plus [`AttrValue::DataType`]
/// for SameDiff's data-type arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// INT (0).
    Int(i32),
    /// FLOAT (1).
    Float(f32),
    /// STRING (2).
    String(String),
    /// INTS (3).
    Ints(Vec<i32>),
    /// FLOATS (4).
    Floats(Vec<f32>),
    /// STRINGS (5).
    Strings(Vec<String>),
    /// BOOLEAN (6).
    Bool(bool),
    /// BOOLEANS (7).
    Bools(Vec<bool>),
    /// BLOCK (8): a block index.
    Block(i32),
    /// LONG (9).
    Long(i64),
    /// BLOCKS (10): block indices.
    Blocks(Vec<i32>),
    /// LONGS (11).
    Longs(Vec<i64>),
    /// FLOAT64S (12).
    Float64s(Vec<f64>),
    /// VAR (13): a variable name.
    Var(String),
    /// VARS (14): variable names.
    Vars(Vec<String>),
    /// FLOAT64 (15).
    Float64(f64),
    /// SCALAR (16).
    Scalar(Scalar),
    /// SCALARS (17).
    Scalars(Vec<Scalar>),
    /// A data type (SameDiff `d_args`); in a ProgramDesc an INT holding the dtype number.
    DataType(DType),
}

impl AttrValue {
    /// Paddle's `AttrType` number of the value as written in a ProgramDesc
    /// (a [`AttrValue::DataType`] is written as INT).
    pub(crate) fn paddle_type(&self) -> i32 {
        match self {
            AttrValue::Int(_) | AttrValue::DataType(_) => 0,
            AttrValue::Float(_) => 1,
            AttrValue::String(_) => 2,
            AttrValue::Ints(_) => 3,
            AttrValue::Floats(_) => 4,
            AttrValue::Strings(_) => 5,
            AttrValue::Bool(_) => 6,
            AttrValue::Bools(_) => 7,
            AttrValue::Block(_) => 8,
            AttrValue::Long(_) => 9,
            AttrValue::Blocks(_) => 10,
            AttrValue::Longs(_) => 11,
            AttrValue::Float64s(_) => 12,
            AttrValue::Var(_) => 13,
            AttrValue::Vars(_) => 14,
            AttrValue::Float64(_) => 15,
            AttrValue::Scalar(_) => 16,
            AttrValue::Scalars(_) => 17,
        }
    }

    /// The type's name (`INT`, ..., `SCALARS`, or `DATA_TYPE`).
    pub fn type_name(&self) -> &'static str {
        if let AttrValue::DataType(_) = self {
            return "DATA_TYPE";
        }
        attr_type_name(self.paddle_type()).unwrap_or("?")
    }
}

/// Paddle's name for an `AttrType` number, if it is one.
pub fn attr_type_name(n: i32) -> Option<&'static str> {
    const NAMES: [&str; 18] = [
        "INT", "FLOAT", "STRING", "INTS", "FLOATS", "STRINGS", "BOOLEAN", "BOOLEANS", "BLOCK",
        "LONG", "BLOCKS", "LONGS", "FLOAT64S", "VAR", "VARS", "FLOAT64", "SCALAR", "SCALARS",
    ];
    usize::try_from(n).ok().and_then(|i| NAMES.get(i).copied())
}

/// The kind of a [`Scalar`] (Paddle's `Scalar.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// BOOLEAN (1).
    Bool,
    /// LONG (2).
    Long,
    /// FLOAT64 (3).
    Float64,
    /// COMPLEX128 (4).
    Complex128,
}

impl ScalarType {
    /// Paddle's number.
    pub(crate) fn code(self) -> i32 {
        match self {
            ScalarType::Bool => 1,
            ScalarType::Long => 2,
            ScalarType::Float64 => 3,
            ScalarType::Complex128 => 4,
        }
    }

    /// The type with Paddle number `n`.
    pub(crate) fn from_code(n: i32) -> Option<ScalarType> {
        Some(match n {
            1 => ScalarType::Bool,
            2 => ScalarType::Long,
            3 => ScalarType::Float64,
            4 => ScalarType::Complex128,
            _ => return None,
        })
    }
}

/// Paddle's `Scalar` message, field by field (each value field may be present or not).
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// Which value the scalar holds.
    pub kind: ScalarType,
    /// `b`.
    pub b: Option<bool>,
    /// `i`.
    pub i: Option<i64>,
    /// `r`.
    pub r: Option<f64>,
    /// `c` as (real, imaginary).
    pub c: Option<(f64, f64)>,
}

impl Program {
    /// Block 0, the main block, if the program has one.
    /// (Decoded programs always have one.)
    pub(crate) fn main_block(&self) -> Option<&Block> {
        self.blocks.first()
    }
}

impl Default for Program {
    /// A program with one empty main block and no version.
    fn default() -> Program {
        Program {
            blocks: vec![Block::main()],
            version: None,
            op_version_map: None,
        }
    }
}

impl From<Program> for Graph {
    fn from(p: Program) -> Graph {
        Graph::Program(p)
    }
}

impl Graph {
    /// The Paddle / SameDiff program, when the graph is one.
    pub fn program(&self) -> Option<&Program> {
        match self {
            Graph::Program(p) => Some(p),
            Graph::Tf(_) | Graph::Onnx(_) | Graph::Pir(_) => None,
        }
    }

    /// The program, mutably, when the graph is one.
    pub fn program_mut(&mut self) -> Option<&mut Program> {
        match self {
            Graph::Program(p) => Some(p),
            Graph::Tf(_) | Graph::Onnx(_) | Graph::Pir(_) => None,
        }
    }

    /// What the graph is, in words: `a Paddle program`, `a TensorFlow graph`,
    /// `an ONNX model`, `a Paddle PIR program`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Graph::Program(_) => "a Paddle program",
            Graph::Tf(_) => "a TensorFlow graph",
            Graph::Onnx(_) => "an ONNX model",
            Graph::Pir(_) => "a Paddle PIR program",
        }
    }
}
