//! Paddle 3 PIR programs: the `<prefix>.json` file `paddle.jit.save` and
//! `paddle.static.save_inference_model` write by default in Paddle 3.x.
//!
//! modelzip keeps the JSON bytes as they came ([`PirGraph`], in graph.fb) and reads from
//! them only what it needs: the op count and the parameters, i.e. the persistable
//! values Paddle saves to and loads from `<prefix>.pdiparams`. Those are the
//! `builtin.parameter` ops (written `"#":"p"`, the name the last element of `"A"`, the
//! `persistable` flag the first of `"OA"`) and the `pd_op.data` ops marked persistable.
//! Paddle (`save_vars_pir`, `load_vars_pir`, `jit.save`) orders the records of the
//! params file by the names sorted (Python `sorted`: by code point, the same as by
//! UTF-8 bytes); [`PirProgram::params`] is in that order.
//!
//! Parsing is bounded: at most [`MAX_PIR_JSON_BYTES`] bytes, walked as a stream (regions,
//! blocks and ops nest at most 128 levels deep, serde_json's limit; everything else is
//! skipped without recursion or allocation), only the `"A"`/`"O"`/`"OA"` fields of
//! parameter and data ops built into values (at most 64 KiB each), at most 4096 distinct
//! op names, and nothing allocated from a number in the file.

use crate::error::{Error, ErrorKind, Result};
use crate::graph::drawing::{DrawNode, Drawing, NodeRole, NodeShape};
use crate::graph::programdesc::gerr;
use crate::tensor::DType;
use serde::de::{
    self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Largest PIR JSON program accepted (256 MiB).
pub const MAX_PIR_JSON_BYTES: usize = 256 << 20;

internal_fields! {
    /// A Paddle PIR program as graph.fb keeps it: the `.json` bytes, verbatim.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PirGraph {
        /// The program file's bytes.
        json: Vec<u8>,
    }
}

/// What modelzip reads from a PIR program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PirProgram {
    /// `base_code.version`: the PIR serialization version.
    pub version: i64,
    /// `base_code.trainable`, when present.
    pub trainable: Option<bool>,
    /// Every op, nested regions included.
    pub ops: usize,
    /// Op count per op name as the file spells it (`1.matmul`, `p`, ...).
    pub op_counts: BTreeMap<String, usize>,
    /// The values the params file holds, in its record order (names sorted by bytes).
    pub params: Vec<PirParam>,
}

/// One persistable value of a PIR program: a record of its params file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PirParam {
    /// The value's name (`linear_0.w_0`).
    pub name: String,
    /// The element type the program declares; `None` when its type is not a dense
    /// tensor type modelzip reads (then any dtype is accepted).
    pub dtype: Option<DType>,
    /// The dims the program declares (-1 is any extent); `None` like `dtype`.
    pub dims: Option<Vec<i64>>,
}

impl PirGraph {
    /// The program file's bytes, as Paddle wrote them.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Parses and checks the program (see [`parse`]).
    pub(crate) fn program(&self) -> Result<PirProgram> {
        parse(&self.json)
    }
}

/// Whether bytes look like a PIR program: a JSON object that starts with one of
/// Paddle's two top-level keys. A cheap sniff, not a check.
pub fn looks_like_pir(bytes: &[u8]) -> bool {
    let text = &bytes[..bytes.len().min(64)];
    let mut rest = text.iter().skip_while(|b| b.is_ascii_whitespace());
    rest.next() == Some(&b'{') && {
        let s = String::from_utf8_lossy(text);
        s.contains("\"base_code\"") || s.contains("\"program\"")
    }
}

/// The Paddle element type of a PIR type id (`0.t_f32`), if modelzip knows it.
fn dtype_of(id: &str) -> Option<DType> {
    Some(match id.strip_prefix("0.")? {
        "t_bool" => DType::Bool,
        "t_i8" => DType::Int8,
        "t_ui8" => DType::Uint8,
        "t_i16" => DType::Int16,
        "t_ui16" => DType::Uint16,
        "t_i32" => DType::Int32,
        "t_ui32" => DType::Uint32,
        "t_i64" => DType::Int64,
        "t_ui64" => DType::Uint64,
        "t_f16" => DType::Fp16,
        "t_bf16" => DType::Bf16,
        "t_f32" => DType::Fp32,
        "t_f64" => DType::Fp64,
        "t_c64" => DType::Complex64,
        "t_c128" => DType::Complex128,
        "t_f8e4m3fn" => DType::Fp8E4m3fn,
        "t_f8e5m2" => DType::Fp8E5m2,
        _ => return None,
    })
}

fn arr<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a Vec<Value>> {
    v.and_then(Value::as_array).ok_or_else(|| {
        gerr(format!(
            "PIR program: {what} is missing or not a JSON array"
        ))
    })
}

/// Largest `"A"`, `"O"` or `"OA"` of a parameter or data op read (real ones are under
/// a few hundred bytes); only these are built into JSON values, so memory stays bounded
/// whatever the rest of the file holds.
const MAX_PARAM_OP_FIELD: usize = 64 << 10;

/// Most distinct op names counted (Paddle has about a thousand op types).
const MAX_OP_NAMES: usize = 4096;

/// Most ops whose operands and results a drawing reads ([`parse_ops`]); a program with
/// more is drawn as its summary.
pub(crate) const MAX_DRAWN_OPS: usize = 20_000;
/// Longest operand or result list read for a drawing (bytes of JSON); longer lists are
/// left out of the op's edges.
const MAX_OPERANDS_FIELD: usize = 64 << 10;

/// One op of a program as a drawing needs it: its name, where it is, and the value ids
/// (`"%"`) it reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PirOp {
    /// The op name as the file spells it (`1.matmul`, `p`).
    pub(crate) name: String,
    /// Where it is (`region 0, block 0, op 5`).
    pub(crate) at: String,
    /// The value ids of its operands (`"I"`), in order.
    pub(crate) inputs: Vec<i64>,
    /// The value ids of its results (`"O"`), in order.
    pub(crate) outputs: Vec<i64>,
    /// A parameter op's parameter name.
    pub(crate) param: Option<String>,
}

/// Parses PIR JSON bytes and reads the op count and the parameters, checking the
/// structure on the way: the `base_code` magic, regions of blocks of ops, each op named,
/// each parameter op with a name and, for a dense tensor, a known element type and
/// integer dims. The same name declared twice with different types is an error.
///
/// The file is walked as a stream: everything but the parameter and data ops' fields is
/// skipped without being built, so memory is a small multiple of the parameter list,
/// not of the file.
pub fn parse(bytes: &[u8]) -> Result<PirProgram> {
    walk(bytes, false).map(|(p, _)| p)
}

/// [`parse`], plus the first [`MAX_DRAWN_OPS`] ops with their operands and results
/// (`None` when the program has more): the same walk, for drawing the program.
pub(crate) fn parse_ops(bytes: &[u8]) -> Result<(PirProgram, Option<Vec<PirOp>>)> {
    walk(bytes, true)
}

/// The value ids (`"%"`) of an op's operand or result field: a list of values or one
/// value (results of a parameter op). Unreadable or overlong fields give none.
fn value_ids(fields: &[(&str, &RawValue)], key: &str) -> Vec<i64> {
    let Some((_, raw)) = fields.iter().find(|(k, _)| *k == key) else {
        return Vec::new();
    };
    if raw.get().len() > MAX_OPERANDS_FIELD {
        return Vec::new();
    }
    let id = |v: &Value| v.get("%").and_then(Value::as_i64);
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::Array(items)) => items.iter().filter_map(id).collect(),
        Ok(v @ Value::Object(_)) => id(&v).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn walk(bytes: &[u8], draw: bool) -> Result<(PirProgram, Option<Vec<PirOp>>)> {
    if bytes.len() > MAX_PIR_JSON_BYTES {
        return Err(gerr(format!(
            "PIR program is {} bytes, more than the {MAX_PIR_JSON_BYTES} this build reads",
            bytes.len()
        )));
    }
    let mut walk = Walk {
        drawn: draw.then(Vec::new),
        ops: 0,
        op_counts: BTreeMap::new(),
        params: BTreeMap::new(),
    };
    // serde_json refuses nesting deeper than 128 levels (its recursion limit), skipped
    // values included, so the walk recurses at most that deep too.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let top = TopSeed(&mut walk)
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top))
        .map_err(|e| {
            let msg = if e.is_data() {
                // Our own checks and type mismatches, with serde_json's position.
                let text = e.to_string();
                if text.starts_with("PIR program") {
                    text
                } else {
                    format!("PIR program: {text}")
                }
            } else {
                format!("PIR program is not valid JSON: {e}")
            };
            Error::new(ErrorKind::Graph(msg)).at_line(e.line())
        })?;
    let program = PirProgram {
        version: top.version,
        trainable: top.trainable,
        ops: walk.ops,
        op_counts: walk.op_counts,
        params: walk.params.into_values().collect(),
    };
    Ok((program, walk.drawn))
}

struct Top {
    version: i64,
    trainable: Option<bool>,
}

type DeResult<T, E> = std::result::Result<T, E>;

fn custom<E: de::Error>(msg: impl std::fmt::Display) -> E {
    E::custom(format!("PIR program: {msg}"))
}

/// Declares a visitor for a JSON object (`$expect`) whose keys go to `$body`.
macro_rules! object_seed {
    ($seed:ty, $out:ty, $expect:literal, |$self_:ident, $map:ident| $body:block) => {
        impl<'de> DeserializeSeed<'de> for $seed {
            type Value = $out;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> DeResult<$out, D::Error> {
                d.deserialize_map(self)
            }
        }
        impl<'de> Visitor<'de> for $seed {
            type Value = $out;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str($expect)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut $map: A) -> DeResult<$out, A::Error> {
                let $self_ = self;
                $body
            }
        }
    };
}

/// Declares a visitor for a JSON array whose elements each go to `$elem(self, i)`.
macro_rules! array_seed {
    ($seed:ty, $expect:literal, |$self_:ident, $i:ident| $elem:expr) => {
        impl<'de> DeserializeSeed<'de> for $seed {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> DeResult<(), D::Error> {
                d.deserialize_seq(self)
            }
        }
        impl<'de> Visitor<'de> for $seed {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str($expect)
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> DeResult<(), S::Error> {
                let $self_ = self;
                let mut $i = 0usize;
                while seq.next_element_seed($elem)?.is_some() {
                    $i += 1;
                }
                Ok(())
            }
        }
    };
}

struct TopSeed<'w>(&'w mut Walk);

object_seed!(
    TopSeed<'_>,
    Top,
    "a PIR program (a JSON object)",
    |this, map| {
        let mut base = None;
        let mut program = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "base_code" => base = Some(map.next_value_seed(BaseSeed)?),
                "program" => {
                    map.next_value_seed(ProgramSeed(&mut *this.0))?;
                    program = true;
                }
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        let Some((magic, version, trainable)) = base else {
            return Err(custom("no \"base_code\" (is this a Paddle PIR .json?)"));
        };
        if magic.as_deref() != Some("pir") {
            return Err(custom(
                "\"base_code\".\"magic\" is not \"pir\" (is this a Paddle PIR .json?)",
            ));
        }
        let Some(version) = version else {
            return Err(custom("\"base_code\".\"version\" is missing"));
        };
        if !program {
            return Err(custom("no \"program\""));
        }
        Ok(Top { version, trainable })
    }
);

struct BaseSeed;

object_seed!(
    BaseSeed,
    (Option<String>, Option<i64>, Option<bool>),
    "\"base_code\" (a JSON object)",
    |_this, map| {
        let (mut magic, mut version, mut trainable) = (None, None, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "magic" => magic = Some(map.next_value::<String>()?),
                "version" => version = Some(map.next_value::<i64>()?),
                "trainable" => trainable = Some(map.next_value::<bool>()?),
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok((magic, version, trainable))
    }
);

struct ProgramSeed<'w>(&'w mut Walk);

object_seed!(
    ProgramSeed<'_>,
    (),
    "\"program\" (a JSON object)",
    |this, map| {
        let mut regions = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "regions" => {
                    map.next_value_seed(RegionsSeed(&mut *this.0, String::new()))?;
                    regions = true;
                }
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        if !regions {
            return Err(custom("\"program\" has no \"regions\""));
        }
        Ok(())
    }
);

/// The regions of the program (prefix `""`) or of an op (prefix `"<op path>, "`).
struct RegionsSeed<'w>(&'w mut Walk, String);

array_seed!(RegionsSeed<'_>, "a JSON array of regions", |this, i| {
    RegionSeed(&mut *this.0, format!("{}region {i}", this.1))
});

struct RegionSeed<'w>(&'w mut Walk, String);

object_seed!(
    RegionSeed<'_>,
    (),
    "a region (a JSON object)",
    |this, map| {
        let mut blocks = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "blocks" => {
                    map.next_value_seed(BlocksSeed(&mut *this.0, this.1.clone()))?;
                    blocks = true;
                }
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        if !blocks {
            return Err(custom(format!("{} has no \"blocks\"", this.1)));
        }
        Ok(())
    }
);

struct BlocksSeed<'w>(&'w mut Walk, String);

array_seed!(BlocksSeed<'_>, "a JSON array of blocks", |this, i| {
    BlockSeed(&mut *this.0, format!("{}, block {i}", this.1))
});

struct BlockSeed<'w>(&'w mut Walk, String);

object_seed!(BlockSeed<'_>, (), "a block (a JSON object)", |this, map| {
    let mut ops = false;
    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
        match &*key {
            "ops" => {
                map.next_value_seed(OpsSeed(&mut *this.0, this.1.clone()))?;
                ops = true;
            }
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
    }
    if !ops {
        return Err(custom(format!("{} has no \"ops\"", this.1)));
    }
    Ok(())
});

struct OpsSeed<'w>(&'w mut Walk, String);

array_seed!(OpsSeed<'_>, "a JSON array of ops", |this, i| OpSeed(
    &mut *this.0,
    format!("{}, op {i}", this.1)
));

struct OpSeed<'w>(&'w mut Walk, String);

object_seed!(OpSeed<'_>, (), "an op (a JSON object)", |this, map| {
    let at = this.1;
    let walk = this.0;
    let mut name: Option<String> = None;
    // Kept as slices of the input (no copy) until the op's name says whether they are
    // read at all.
    let mut fields: Vec<(&'static str, &'de RawValue)> = Vec::new();
    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
        match &*key {
            "#" => name = Some(map.next_value::<String>()?),
            k @ ("A" | "I" | "O" | "OA") => {
                let k = match k {
                    "A" => "A",
                    "I" => "I",
                    "O" => "O",
                    _ => "OA",
                };
                let raw = map.next_value::<&'de RawValue>()?;
                fields.retain(|(f, _)| *f != k);
                fields.push((k, raw));
            }
            "regions" => map.next_value_seed(RegionsSeed(&mut *walk, format!("{at}, ")))?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
    }
    let Some(name) = name else {
        return Err(custom(format!("{at} has no op name (\"#\")")));
    };
    walk.op(&name, &at, &fields)
        .map_err(|e| A::Error::custom(crate::graph::graph_error_why(&e)))
});

struct Walk {
    /// The ops read for a drawing: `Some` when asked for ([`parse_ops`]), until
    /// [`MAX_DRAWN_OPS`]; `None` past it or when not asked for.
    drawn: Option<Vec<PirOp>>,
    ops: usize,
    op_counts: BTreeMap<String, usize>,
    /// By name bytes: the params file's order (String's Ord is byte order).
    params: BTreeMap<String, PirParam>,
}

impl Walk {
    fn op(&mut self, name: &str, at: &str, fields: &[(&str, &RawValue)]) -> Result<()> {
        self.ops += 1;
        let distinct = self.op_counts.len();
        match self.op_counts.get_mut(name) {
            Some(n) => *n += 1,
            None if distinct >= MAX_OP_NAMES => {
                return Err(gerr(format!(
                    "PIR program: {at}: more than {MAX_OP_NAMES} distinct op names"
                )));
            }
            None => {
                self.op_counts.insert(name.to_string(), 1);
            }
        }
        let param_op = name == "p" || name == "1.data";
        if let Some(drawn) = &mut self.drawn {
            if drawn.len() >= MAX_DRAWN_OPS {
                self.drawn = None;
            } else {
                drawn.push(PirOp {
                    name: name.to_string(),
                    at: at.to_string(),
                    inputs: value_ids(fields, "I"),
                    outputs: value_ids(fields, "O"),
                    param: None,
                });
            }
        }
        if !param_op {
            return Ok(());
        }
        let mut op = serde_json::Map::new();
        for (key, raw) in fields.iter().filter(|(k, _)| *k != "I") {
            let text = raw.get();
            if text.len() > MAX_PARAM_OP_FIELD {
                return Err(gerr(format!(
                    "PIR program: {at} ({name}): \"{key}\" is {} bytes, more than the \
                     {MAX_PARAM_OP_FIELD} read",
                    text.len()
                )));
            }
            let v: Value = serde_json::from_str(text)
                .map_err(|e| gerr(format!("PIR program: {at}: \"{key}\": {e}")))?;
            op.insert((*key).to_string(), v);
        }
        if name == "p"
            && let Some(last) = self.drawn.as_mut().and_then(|d| d.last_mut())
        {
            // Persistable or not, a parameter op is a named value in a drawing.
            last.param = op
                .get("A")
                .and_then(Value::as_array)
                .and_then(|a| a.last())
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        let param = if name == "p" {
            parameter_op(&op, at)?
        } else {
            data_op(&op, at)?
        };
        if let Some(p) = param {
            match self.params.get(&p.name) {
                Some(old) if *old != p => {
                    return Err(gerr(format!(
                        "PIR program: {at} declares parameter {:?} again with another type \
                         ({} {:?}, before {} {:?})",
                        p.name,
                        type_text(p.dtype),
                        p.dims,
                        type_text(old.dtype),
                        old.dims
                    )));
                }
                Some(_) => {}
                None => {
                    self.params.insert(p.name.clone(), p);
                }
            }
        }
        Ok(())
    }
}

fn type_text(d: Option<DType>) -> &'static str {
    d.map_or("an unread type", DType::name)
}

/// A `builtin.parameter` op (`"#":"p"`): `"A"` ends with the name, `"OA"` starts with
/// the persistable flag (absent when the program was saved without `trainable`),
/// `"O"` is the one result. `None` when the op is marked not persistable (Paddle does
/// not save it).
fn parameter_op(op: &serde_json::Map<String, Value>, at: &str) -> Result<Option<PirParam>> {
    let name = arr(op.get("A"), &format!("{at} (a parameter): \"A\""))?
        .last()
        .and_then(Value::as_str)
        .ok_or_else(|| {
            gerr(format!(
                "PIR program: {at} (a parameter): \"A\" does not end with the parameter's name"
            ))
        })?;
    let persistable = match op.get("OA").and_then(Value::as_array) {
        Some(flags) => flags.first().and_then(Value::as_i64) != Some(0),
        None => true,
    };
    if !persistable {
        return Ok(None);
    }
    let at = format!("{at} (parameter {name:?})");
    let (dtype, dims) = result_type(op.get("O"), &at)?;
    Ok(Some(PirParam {
        name: name.to_string(),
        dtype,
        dims,
    }))
}

/// A `pd_op.data` op: a parameter when `"OA"` marks it persistable (optimizer state in
/// a training program); its name is attribute `name`.
fn data_op(op: &serde_json::Map<String, Value>, at: &str) -> Result<Option<PirParam>> {
    let attr = |list: Option<&Value>, want: &str| -> Option<Value> {
        list.and_then(Value::as_array)?
            .iter()
            .find(|a| a.get("N").and_then(Value::as_str) == Some(want))
            .and_then(|a| a.get("AT")?.get("D").cloned())
    };
    let persistable = attr(op.get("OA"), "persistable")
        .and_then(|d| d.as_array()?.first()?.get("D")?.as_bool())
        .unwrap_or(false);
    if !persistable {
        return Ok(None);
    }
    let Some(Value::String(name)) = attr(op.get("A"), "name") else {
        return Err(gerr(format!(
            "PIR program: {at} (a persistable data op) has no string attribute \"name\""
        )));
    };
    let at = format!("{at} (persistable data {name:?})");
    let result = arr(op.get("O"), &format!("{at}: \"O\""))?.first();
    let (dtype, dims) = result_type(result, &at)?;
    Ok(Some(PirParam { name, dtype, dims }))
}

/// The element type and dims of an op result `{"%": id, "TT": {"#": "0.t_dtensor",
/// "D": [{"#": dtype}, dims, layout, lod, offset]}}`; (None, None) for another type.
fn result_type(result: Option<&Value>, at: &str) -> Result<(Option<DType>, Option<Vec<i64>>)> {
    let tt = result.and_then(|r| r.get("TT")).ok_or_else(|| {
        gerr(format!(
            "PIR program: {at} has no result type (\"O\".\"TT\")"
        ))
    })?;
    if tt.get("#").and_then(Value::as_str) != Some("0.t_dtensor") {
        return Ok((None, None));
    }
    let d = arr(tt.get("D"), &format!("{at}: the result type's \"D\""))?;
    let id = d
        .first()
        .and_then(|t| t.get("#"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            gerr(format!(
                "PIR program: {at}: the result type has no element type"
            ))
        })?;
    let dtype = dtype_of(id).ok_or_else(|| {
        gerr(format!(
            "PIR program: {at}: element type {id:?} is not one a Paddle params file holds"
        ))
    })?;
    let dims = arr(d.get(1), &format!("{at}: the result type's dims"))?
        .iter()
        .map(Value::as_i64)
        .collect::<Option<Vec<i64>>>()
        .ok_or_else(|| gerr(format!("PIR program: {at}: the dims are not all integers")))?;
    Ok((Some(dtype), Some(dims)))
}

/// The listing `modelzip graph` prints: what the program is, its op count by op name
/// and its parameters in params-file order. (The JSON itself is the full program.)
pub(crate) fn text(g: &PirGraph) -> String {
    use std::fmt::Write;
    let p = match g.program() {
        Ok(p) => p,
        Err(e) => {
            return format!(
                "PIR program ({} bytes) that does not parse: {e}\n",
                g.json.len()
            );
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "graph: Paddle PIR program (JSON, {} bytes, serialization version {}{}), {} op(s), \
         {} parameter(s)",
        g.json.len(),
        p.version,
        match p.trainable {
            Some(true) => ", trainable",
            Some(false) => ", not trainable",
            None => "",
        },
        p.ops,
        p.params.len()
    );
    let _ = writeln!(out, "\nops by name:");
    for (name, n) in &p.op_counts {
        let _ = writeln!(out, "  {:<24} {n}", crate::graph::clean::clean(name));
    }
    let _ = writeln!(out, "\nparameters (in .pdiparams record order):");
    for q in &p.params {
        let _ = writeln!(
            out,
            "  {}  {}  {}",
            crate::graph::clean::clean(&q.name),
            q.dtype.map_or("?", DType::name),
            q.dims
                .as_ref()
                .map_or_else(|| "?".to_string(), |d| format!("{d:?}"))
        );
    }
    out
}

/// [`text`] as a JSON value (`modelzip graph --format json`).
pub(crate) fn json(g: &PirGraph) -> Value {
    match g.program() {
        Ok(p) => serde_json::json!({
            "bytes": g.json.len(),
            "version": p.version,
            "trainable": p.trainable,
            "ops": p.ops,
            "op_counts": p.op_counts,
            "params": p.params.iter().map(|q| serde_json::json!({
                "name": q.name,
                "dtype": q.dtype.map(DType::name),
                "dims": q.dims,
            })).collect::<Vec<_>>(),
        }),
        Err(e) => serde_json::json!({ "bytes": g.json.len(), "error": e.to_string() }),
    }
}

/// The program drawn op by op: each op a node labelled with its name as the file spells
/// it (`1.matmul`), parameters (`p` ops) as boxes with their dtype and dims, an edge from
/// the op that produces each value to each op that reads it. A program of more than
/// [`MAX_DRAWN_OPS`] ops is drawn as its summary: one rounded box saying what it is,
/// linked to one box per parameter.
pub(crate) fn drawing(g: &PirGraph) -> Drawing {
    let mut d = Drawing::default();
    let Ok((p, ops)) = parse_ops(&g.json) else {
        d.push(DrawNode::new(
            "pir".into(),
            NodeRole::Op,
            NodeShape::Box,
            "PIR program (does not parse)".into(),
        ));
        return d;
    };
    // `params` is in name order (a map's values): a search, not a scan per parameter (a
    // summary of 2 million would have compared names 10^12 times).
    let declared = |name: &str| {
        let found = p.params.binary_search_by(|q| q.name.as_str().cmp(name)).ok();
        found.map(|i| &p.params[i]).map_or_else(
            || "?".to_string(),
            |q| {
                let dims = q
                    .dims
                    .as_ref()
                    .map_or_else(|| "?".into(), |d| format!("{d:?}"));
                format!("{} {dims}", q.dtype.map_or("?", DType::name))
            },
        )
    };
    let Some(ops) = ops else {
        let mut summary = DrawNode::new(
            "pir".into(),
            NodeRole::Op,
            NodeShape::RoundedBox,
            format!("Paddle PIR program\n{} op(s)", p.ops),
        );
        summary.attrs = p
            .op_counts
            .iter()
            .map(|(op, n)| (op.clone(), n.to_string()))
            .collect();
        let root = d.push(summary);
        for (i, prm) in p.params.iter().enumerate() {
            let label = format!("{}\n{}", prm.name, declared(&prm.name));
            let n = d.push(DrawNode::new(format!("p{i}"), NodeRole::Value, NodeShape::Box, label));
            d.edge(n, root, false);
        }
        return d;
    };
    let ids = |v: &[i64]| v.iter().map(|i| format!("%{i}")).collect::<Vec<_>>();
    let mut producer: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    let mut nodes = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let node = match op.param.as_ref().filter(|_| op.name == "p") {
            Some(name) => DrawNode::new(
                format!("o{i}"),
                NodeRole::Value,
                NodeShape::Box,
                format!("{name}\n{}", declared(name)),
            ),
            None => {
                let mut n = DrawNode::new(
                    format!("o{i}"),
                    NodeRole::Op,
                    if op.name == "1.data" {
                        NodeShape::InvHouse
                    } else {
                        NodeShape::FilledEllipse
                    },
                    op.name.clone(),
                );
                if !op.inputs.is_empty() {
                    n.inputs = vec![("operands".into(), ids(&op.inputs))];
                }
                if !op.outputs.is_empty() {
                    n.outputs = vec![("results".into(), ids(&op.outputs))];
                }
                n.attrs = vec![("at".into(), op.at.clone())];
                n
            }
        };
        let n = d.push(node);
        nodes.push(n);
        for &v in &op.outputs {
            producer.insert(v, n);
        }
    }
    for (op, &n) in ops.iter().zip(&nodes) {
        for v in &op.inputs {
            if let Some(&from) = producer.get(v) {
                d.edge(from, n, false);
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const MLP: &[u8] = br##"{"base_code":{"magic":"pir","trainable":true,"version":4},"program":{"regions":[{"#":"region_0","blocks":[{"#":"block_0","args":[],"ops":[
{"#":"p","A":[0,1,1,"b.w"],"DA":[],"O":{"%":1,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[4,2],"NCHW",[],0]}},"OA":[1,0,1],"QA":[]},
{"#":"p","A":[0,1,1,"a.w"],"DA":[],"O":{"%":2,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f64"},[3],"NCHW",[],0]}},"OA":[1,0,1],"QA":[]},
{"#":"p","A":[0,1,1,"off"],"DA":[],"O":{"%":3,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f64"},[3],"NCHW",[],0]}},"OA":[0,0,1],"QA":[]},
{"#":"1.relu","A":[],"I":[{"%":1}],"O":[{"%":4}]}]}]}]}}"##;

    /// The drawing reads each op's operands and results: parameters are values, every
    /// other op a node, an edge from each value's producer to its readers.
    #[test]
    fn ops_are_drawn_with_their_operands() {
        let d = drawing(&PirGraph {
            json: MLP.to_vec(),
        });
        let ops: Vec<&str> = d
            .nodes
            .iter()
            .filter(|n| n.role == NodeRole::Op)
            .map(|n| n.label.as_str())
            .collect();
        assert_eq!(ops, ["1.relu"]);
        let values: Vec<&str> = d
            .nodes
            .iter()
            .filter(|n| n.role == NodeRole::Value)
            .map(|n| n.op())
            .collect();
        assert_eq!(values, ["b.w", "a.w", "off"]);
        // relu reads %1, the result of the first parameter op (b.w, FP32 [4, 2]).
        assert_eq!(d.nodes[0].label, "b.w\nFP32 [4, 2]");
        assert_eq!(d.edges.len(), 1);
        assert_eq!((d.edges[0].from, d.edges[0].to), (0, 3));
        assert_eq!(d.nodes[3].inputs, [("operands".to_string(), vec!["%1".to_string()])]);
        assert_eq!(d.nodes[3].outputs, [("results".to_string(), vec!["%4".to_string()])]);
    }

    #[test]
    fn params_are_the_persistable_parameters_sorted_by_name() {
        let p = parse(MLP).unwrap();
        assert_eq!(p.version, 4);
        assert_eq!(p.ops, 4);
        assert_eq!(p.op_counts["p"], 3);
        let names: Vec<&str> = p.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a.w", "b.w"]);
        assert_eq!(p.params[0].dtype, Some(DType::Fp64));
        assert_eq!(p.params[1].dims, Some(vec![4, 2]));
    }

    /// Control flow (`1.if`, `1.while`) nests regions in ops: their ops count, and a
    /// malformed nested block is named by its path.
    #[test]
    fn ops_in_nested_regions_are_walked() {
        let nested = br##"{"base_code":{"magic":"pir","version":4},"program":{"regions":[{"blocks":[{"ops":[
{"#":"1.if","regions":[{"blocks":[{"ops":[{"#":"1.relu"},{"#":"2.yield"}]}]},{"blocks":[{"ops":[{"#":"2.yield"}]}]}]}]}]}]}}"##;
        let p = parse(nested).unwrap();
        assert_eq!(p.ops, 4);
        assert_eq!(p.op_counts["2.yield"], 2);
        let bad = String::from_utf8(nested.to_vec())
            .unwrap()
            .replace(r##"{"#":"1.relu"}"##, r##"{"name":"1.relu"}"##);
        let e = parse(bad.as_bytes()).unwrap_err();
        assert!(
            e.to_string()
                .contains("region 0, block 0, op 0, region 0, block 0, op 0 has no op name"),
            "{e}"
        );
    }

    #[test]
    fn not_pir_is_refused_saying_what() {
        let e = parse(br#"{"base_code":{"magic":"onnx","version":1},"program":{"regions":[]}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("magic"), "{e}");
        let e = parse(b"{\"base_code\":\n{\"magic\":").unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
        assert_eq!(e.location().line, Some(2), "{e}");
    }

    #[test]
    fn nesting_past_the_limit_is_an_error_not_a_stack_overflow() {
        // Regions in ops in regions: walked, so held to serde_json's 128 levels.
        let level = r##"{"#":"1.if","regions":[{"blocks":[{"ops":["##;
        let close = "]}]}]}";
        let deep = format!(
            r##"{{"base_code":{{"magic":"pir","version":4}},"program":{{"regions":[{{"blocks":[{{"ops":[{}{}]}}]}}]}}}}"##,
            level.repeat(10_000),
            close.repeat(10_000)
        );
        let e = parse(deep.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("recursion limit"), "{e}");
        // A deep value where nothing is read (an op's attributes) is skipped without
        // recursion, whatever its depth.
        let skipped = format!(
            r##"{{"base_code":{{"magic":"pir","version":4}},"program":{{"regions":[{{"blocks":[{{"ops":[{{"#":"1.x","A":{}{}}}]}}]}}]}}}}"##,
            "[".repeat(1_000_000),
            "]".repeat(1_000_000)
        );
        assert_eq!(parse(skipped.as_bytes()).unwrap().ops, 1);
        // Unless it is a parameter's: then its size is bounded first.
        let param = skipped.replace(r##""#":"1.x""##, r##""#":"p""##);
        let e = parse(param.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("\"A\" is 2000000 bytes"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_an_object_or_has_trailing_bytes_is_refused() {
        let e = parse(b"[1]").unwrap_err();
        assert!(e.to_string().contains("expected a PIR program"), "{e}");
        let mut two = MLP.to_vec();
        two.extend_from_slice(b" {}");
        let e = parse(&two).unwrap_err();
        assert!(e.to_string().contains("trailing characters"), "{e}");
    }

    #[test]
    fn a_parameter_declared_twice_differently_is_refused() {
        let twice = String::from_utf8(MLP.to_vec())
            .unwrap()
            .replace("\"off\"],\"DA\":[],\"O\":{\"%\":3,\"TT\":{\"#\":\"0.t_dtensor\",\"D\":[{\"#\":\"0.t_f64\"},[3]", "\"a.w\"],\"DA\":[],\"O\":{\"%\":3,\"TT\":{\"#\":\"0.t_dtensor\",\"D\":[{\"#\":\"0.t_f64\"},[5]")
            .replace("\"OA\":[0,0,1]", "\"OA\":[1,0,1]");
        let e = parse(twice.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("\"a.w\" again"), "{e}");
    }
}
