//! Which variables of a program a Paddle params file holds, and the check of a tensor
//! against its variable's declaration: what import and export agree on.

use crate::error::{Error, ErrorKind, Result};
use crate::graph::{Graph, Var};
use crate::tensor::TensorView;

/// Paddle `VarType.Type` numbers of persistable variables that are not saved in a
/// params file: FEED_MINIBATCH, FETCH_LIST, READER, RAW.
const NOT_SAVED: [i32; 4] = [9, 10, 15, 17];

/// Paddle's `VarType.Type` number of a dense tensor (LoDTensor).
const DENSE_TENSOR: i32 = 7;

/// The variables whose values a Paddle inference params file holds: block 0's
/// persistable variables except feed/fetch holders (and READER/RAW), sorted by name
/// (byte order). A persistable variable of another non-tensor type (SELECTED_ROWS,
/// tensor arrays, ...) is an error: Paddle's inference files cannot hold it.
pub fn persistable_vars(graph: &Graph) -> Result<Vec<&Var>> {
    let block = graph
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

/// Checks a tensor against its variable's declared dtype and dims (-1 matches any
/// extent; an undeclared dtype matches any). `what` names the tensor for the error.
pub(super) fn check_declared(var: &Var, t: &TensorView<'_>, what: &str) -> Result<()> {
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
    let fits = var.shape.len() == t.dims().len()
        && var
            .shape
            .iter()
            .zip(t.dims())
            .all(|(&want, &got)| want < 0 || u64::try_from(want).is_ok_and(|w| w == got));
    if !fits {
        return Err(ErrorKind::InvalidInput(format!(
            "variable {:?}: the program declares dims {:?}, {what} has {:?}",
            var.name,
            var.shape,
            t.dims()
        ))
        .into());
    }
    Ok(())
}
