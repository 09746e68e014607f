//! Which variables of a program a Paddle params file holds, and the check of a tensor
//! against its variable's declaration: what import and export agree on.

use crate::error::{Error, ErrorKind, Result};
use crate::graph::{Graph, Var};
use crate::tensor::{DType, TensorView};

/// Paddle `VarType.Type` numbers of persistable variables that are not saved in a
/// params file: FEED_MINIBATCH, FETCH_LIST, READER, RAW.
const NOT_SAVED: [i32; 4] = [9, 10, 15, 17];

/// Paddle's `VarType.Type` number of a dense tensor (LoDTensor).
const DENSE_TENSOR: i32 = 7;

internal! {
    /// The variables whose values a Paddle inference params file holds: block 0's
    /// persistable variables except feed/fetch holders (and READER/RAW), sorted by name
    /// (byte order). A persistable variable of another non-tensor type (SELECTED_ROWS,
    /// tensor arrays, ...) is an error: Paddle's inference files cannot hold it.
    pub fn persistable_vars(graph: &Graph) -> Result<Vec<&Var>> {
        let program = graph.program().ok_or_else(|| {
            Error::new(ErrorKind::Graph(format!(
                "the graph is {}, not a Paddle program with persistable variables",
                graph.kind_name()
            )))
        })?;
        let block = program
            .main_block()
            .ok_or_else(|| Error::new(ErrorKind::Graph("the program has no block 0".into())))?;
        let mut vars = Vec::new();
        for v in &block.vars {
            if !v.is_persistable() {
                continue;
            }
            let ty = v.kind.paddle_type();
            if NOT_SAVED.contains(&ty) {
                continue;
            }
            if ty != DENSE_TENSOR {
                return Err(ErrorKind::Graph(format!(
                    "block 0: persistable variable {:?} has type {}, which Paddle inference \
                     params files do not hold",
                    v.name,
                    crate::graph::model::var_type_name(ty)
                        .map(str::to_string)
                        .unwrap_or_else(|| ty.to_string())
                ))
                .into());
            }
            vars.push(v);
        }
        vars.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let dup = vars.windows(2).find_map(|w| match w {
            [a, b] if a.name == b.name => Some(a.name.as_str()),
            _ => None,
        });
        if let Some(name) = dup {
            return Err(ErrorKind::Graph(format!("block 0 declares variable {name:?} twice")).into());
        }
        Ok(vars)
    }
}

/// One value a params file holds, as its program declares it: a persistable variable
/// of a ProgramDesc or a parameter of a PIR program.
#[derive(Debug, Clone)]
pub(super) struct Declared {
    pub name: String,
    pub dtype: Option<DType>,
    /// `None`: any dims (a PIR value of a type modelzip does not read).
    pub dims: Option<Vec<i64>>,
}

impl From<&Var> for Declared {
    fn from(v: &Var) -> Declared {
        Declared {
            name: v.name.clone(),
            dtype: v.dtype,
            dims: Some(v.shape.clone()),
        }
    }
}

/// The values a params file of `graph` holds, in record order: [`persistable_vars`] of
/// a ProgramDesc, or the parameters of a PIR program ([`crate::graph::pir`]).
pub(super) fn declared(graph: &Graph) -> Result<Vec<Declared>> {
    if let Graph::Pir(pir) = graph {
        return Ok(pir
            .program()?
            .params
            .into_iter()
            .map(|p| Declared {
                name: p.name,
                dtype: p.dtype,
                dims: p.dims,
            })
            .collect());
    }
    Ok(persistable_vars(graph)?
        .into_iter()
        .map(Declared::from)
        .collect())
}

/// Checks a tensor against its variable's declared dtype and dims (-1 matches any
/// extent; an undeclared dtype matches any). `what` names the tensor for the error.
pub(super) fn check_declared(var: &Declared, t: &TensorView<'_>, what: &str) -> Result<()> {
    if let Some(d) = var.dtype
        && d != t.dtype()
    {
        return Err(ErrorKind::InvalidInput(format!(
            "variable {:?}: the program declares dtype {}, {what} has {}",
            var.name,
            d.name(),
            t.dtype().name()
        ))
        .into());
    }
    let Some(shape) = &var.dims else {
        return Ok(());
    };
    let fits = shape.len() == t.dims().len()
        && shape
            .iter()
            .zip(t.dims())
            .all(|(&want, &got)| want < 0 || u64::try_from(want).is_ok_and(|w| w == got));
    if !fits {
        return Err(ErrorKind::InvalidInput(format!(
            "variable {:?}: the program declares dims {:?}, {what} has {:?}",
            var.name,
            shape,
            t.dims()
        ))
        .into());
    }
    Ok(())
}
