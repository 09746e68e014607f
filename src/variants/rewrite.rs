//! Graph rewriting for variants: a parameter stored in another dtype is converted back
//! to FP32 by ops inserted after the feed ops, and every op that used it reads the
//! converted value instead.

use crate::error::{ErrorKind, Result};
use crate::graph::{Attr, AttrValue, Graph, Op, Program, Slot, Var, VarKind};
use crate::tensor::DType;
use std::collections::{HashMap, HashSet};

/// How one parameter is stored and turned back into FP32 in the graph.
#[derive(Debug, Clone)]
pub(crate) struct Conversion {
    /// The parameter (a variable of block 0).
    pub param: String,
    /// Its dtype in the variant.
    pub stored: DType,
    /// For INT8: the scale parameter's name, its dims, and the `elementwise_mul` axis.
    pub scale: Option<(String, Vec<u64>, i32)>,
}

impl Conversion {
    /// Name of the `cast` op's output.
    pub fn cast_out(&self) -> String {
        format!("{}@cast", self.param)
    }

    /// Name of the FP32 value the model's ops read.
    pub fn result(&self) -> String {
        match self.scale {
            Some(_) => format!("{}@dequant", self.param),
            None => self.cast_out(),
        }
    }
}

/// The attributes Paddle 2.6 / 3.3 give every op built from Python (what
/// `save_inference_model` keeps), so inserted ops look like Paddle's own.
fn common_attrs() -> Vec<Attr> {
    let a = |name: &str, value| Attr {
        name: name.into(),
        value,
    };
    vec![
        a("op_device", AttrValue::String(String::new())),
        a("op_namescope", AttrValue::String("/".into())),
        a("op_role", AttrValue::Int(0)),
        a("op_role_var", AttrValue::Strings(Vec::new())),
    ]
}

fn cast_op(input: &str, output: &str, from: DType) -> Op {
    let mut op = Op::new("", "cast")
        .input("X", &[input])
        .output("Out", &[output])
        .attr("in_dtype", AttrValue::Int(from.code()));
    op.attrs.extend(common_attrs());
    op.attrs.push(Attr {
        name: "out_dtype".into(),
        value: AttrValue::Int(DType::Fp32.code()),
    });
    op.attrs.push(Attr {
        name: "use_mkldnn".into(),
        value: AttrValue::Bool(false),
    });
    op.attrs.push(Attr {
        name: "with_quant_attr".into(),
        value: AttrValue::Bool(false),
    });
    op
}

fn mul_op(x: &str, y: &str, out: &str, axis: i32) -> Op {
    let mut op = Op::new("", "elementwise_mul")
        .input("X", &[x])
        .input("Y", &[y])
        .output("Out", &[out])
        .attr("axis", AttrValue::Int(axis));
    op.attrs.extend(common_attrs());
    op
}

/// A non-persistable FP32 variable shaped like `like`.
fn temp_var(like: &Var, name: String) -> Var {
    Var {
        name,
        kind: VarKind::Variable,
        dtype: Some(DType::Fp32),
        persistable: Some(false),
        need_check_feed: None,
        is_parameter: None,
        stop_gradient: like.stop_gradient,
        ..like.clone()
    }
}

/// Names every block declares.
fn declared(graph: &Program) -> HashSet<&str> {
    graph
        .blocks
        .iter()
        .flat_map(|b| b.vars.iter().map(|v| v.name.as_str()))
        .collect()
}

/// Rewrites `graph` for `convs`: changes each parameter's dtype, declares the scale and
/// temporaries, points every use (inputs and outputs of every op, in every block) at the
/// converted value, and inserts the conversion ops after the last `feed` op of block 0.
/// The tag's graph with the conversions inserted, re-encoded as it was stored;
/// errors name the graph entry.
pub(crate) fn converted(
    tag: &str,
    enc: crate::archive::GraphFormat,
    mut graph: Graph,
    convs: &[Conversion],
) -> Result<Vec<u8>> {
    let entry = format!("{tag}/{}", enc.file_name());
    insert_conversions(&mut graph, convs).map_err(|e| e.in_entry(entry.clone()))?;
    graph.encode(enc).map_err(|e| e.in_entry(entry))
}

pub(crate) fn insert_conversions(graph: &mut Graph, convs: &[Conversion]) -> Result<()> {
    if convs.is_empty() {
        return Ok(());
    }
    let graph = match graph {
        Graph::Program(p) => p,
        // The JSON is kept as Paddle wrote it; its parameter types are declared there.
        Graph::Pir(_) => {
            return Err(ErrorKind::Graph(
                "the graph is a Paddle PIR program, whose declared parameter dtypes modelzip \
                 does not rewrite: convert the model in Paddle before importing it"
                    .into(),
            )
            .into());
        }
        Graph::Tf(_) | Graph::Onnx(_) => {
            return Err(ErrorKind::Graph(format!(
                "the graph is {}, whose declared parameter dtypes modelzip does not rewrite \
                 as ops: convert the model before importing it",
                graph.kind_name()
            ))
            .into());
        }
    };
    let names = declared(graph);
    for c in convs {
        let mut new_names = vec![c.cast_out()];
        if let Some((s, _, _)) = &c.scale {
            new_names.push(s.clone());
            new_names.push(c.result());
        }
        if let Some(n) = new_names.iter().find(|n| names.contains(n.as_str())) {
            return Err(ErrorKind::Graph(format!(
                "cannot convert {:?}: the graph already has a variable {n:?}",
                c.param
            ))
            .into());
        }
    }
    let renames: HashMap<&str, String> = convs
        .iter()
        .map(|c| (c.param.as_str(), c.result()))
        .collect();
    for block in &mut graph.blocks {
        for op in &mut block.ops {
            for slot in op.inputs.iter_mut().chain(op.outputs.iter_mut()) {
                rename_args(slot, &renames);
            }
        }
    }
    let Some(main) = graph.blocks.first_mut() else {
        return Err(ErrorKind::Graph("the graph has no blocks".into()).into());
    };
    let mut new_vars = Vec::new();
    let mut new_ops = Vec::new();
    // Each parameter's variable found by name once (not by a scan of block 0 per
    // conversion); the first of a name, as a scan found it.
    let mut var_of: HashMap<String, usize> = HashMap::with_capacity(main.vars.len());
    for (i, v) in main.vars.iter().enumerate() {
        var_of.entry(v.name.clone()).or_insert(i);
    }
    for c in convs {
        let Some(var) = var_of.get(&c.param).map(|&i| &mut main.vars[i]) else {
            return Err(ErrorKind::Graph(format!(
                "parameter {:?} is not a variable of block 0",
                c.param
            ))
            .into());
        };
        let from = c.stored;
        var.dtype = Some(from);
        let like = var.clone();
        new_vars.push(temp_var(&like, c.cast_out()));
        new_ops.push(cast_op(&c.param, &c.cast_out(), from));
        if let Some((scale, dims, axis)) = &c.scale {
            let shape = dims
                .iter()
                .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
                .collect();
            new_vars.push(Var {
                name: scale.clone(),
                dtype: Some(DType::Fp32),
                shape,
                ..like.clone()
            });
            new_vars.push(temp_var(&like, c.result()));
            new_ops.push(mul_op(&c.cast_out(), scale, &c.result(), *axis));
        }
    }
    main.vars.extend(new_vars);
    let at = main
        .ops
        .iter()
        .rposition(|op| op.op_type == "feed")
        .map_or(0, |i| i + 1);
    main.ops.splice(at..at, new_ops);
    Ok(())
}

fn rename_args(slot: &mut Slot, renames: &HashMap<&str, String>) {
    for arg in &mut slot.args {
        if let Some(n) = renames.get(arg.as_str()) {
            *arg = n.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph() -> Graph {
        let mut g = Program::default();
        let b = &mut g.blocks[0];
        b.vars.push(Var::new(
            "x",
            VarKind::Placeholder,
            DType::Fp32,
            vec![-1, 4],
        ));
        b.vars
            .push(Var::new("w", VarKind::Constant, DType::Fp32, vec![4, 3]));
        b.vars
            .push(Var::new("y", VarKind::Variable, DType::Fp32, vec![-1, 3]));
        b.ops.push(Op::new("", "feed").output("Out", &["x"]));
        b.ops.push(
            Op::new("", "matmul_v2")
                .input("X", &["x"])
                .input("Y", &["w"])
                .output("Out", &["y"]),
        );
        Graph::from(g)
    }

    #[test]
    fn inserts_dequant_after_feed_and_renames_uses() {
        let mut g = graph();
        let c = Conversion {
            param: "w".into(),
            stored: DType::Int8,
            scale: Some(("w@scale".into(), vec![3], 1)),
        };
        insert_conversions(&mut g, &[c]).unwrap();
        let b = &g.program().unwrap().blocks[0];
        let types: Vec<_> = b.ops.iter().map(|o| o.op_type.as_str()).collect();
        assert_eq!(types, ["feed", "cast", "elementwise_mul", "matmul_v2"]);
        assert_eq!(b.ops[3].inputs[1].args, ["w@dequant"]);
        assert_eq!(b.ops[1].inputs[0].args, ["w"]);
        assert_eq!(b.ops[2].get_attr("axis"), Some(&AttrValue::Int(1)));
        let w = b.vars.iter().find(|v| v.name == "w").unwrap();
        assert_eq!(w.dtype, Some(DType::Int8));
        let s = b.vars.iter().find(|v| v.name == "w@scale").unwrap();
        assert!(s.is_persistable());
        assert_eq!(s.shape, [3]);
        let d = b.vars.iter().find(|v| v.name == "w@dequant").unwrap();
        assert!(!d.is_persistable());
        assert_eq!(d.kind, VarKind::Variable);
    }

    #[test]
    fn refuses_name_clashes_and_missing_vars() {
        let mut g = graph();
        g.program_mut().unwrap().blocks[0].vars.push(Var::new(
            "w@cast",
            VarKind::Variable,
            DType::Fp32,
            vec![1],
        ));
        let c = Conversion {
            param: "w".into(),
            stored: DType::Fp16,
            scale: None,
        };
        assert!(insert_conversions(&mut g.clone(), std::slice::from_ref(&c)).is_err());
        let missing = Conversion {
            param: "nope".into(),
            ..c
        };
        assert!(insert_conversions(&mut graph(), &[missing]).is_err());
    }
}
