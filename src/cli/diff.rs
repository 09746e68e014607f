//! `modelzip diff`: compare two tags parameter by parameter.

use super::common::open;
use super::output::{clean, print, print_json};
use super::{CliError, Outcome};
use modelzip::variants::{ParamDiff, TagDiff, diff_tags};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Compare two tags: parameters added (only in TAG_B), removed (only in TAG_A),
/// changed (dtype, dims, LoD or data differ), and, of the identical ones, which are
/// shared (one file) and which are copies (two files). For changed float
/// parameters of equal dims, the largest absolute difference and that difference
/// relative to TAG_A's largest magnitude; an INT8 parameter with a <name>@scale
/// sibling is dequantized first. Also says whether the graphs differ.
///
/// Example:
///   modelzip diff model.zip fp32 int8
///   modelzip diff model.zip step-1000 step-2000 --json --exit-code
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The first tag (ignoring case).
    tag_a: String,
    /// The second tag (ignoring case).
    tag_b: String,
    /// Print one JSON document instead of a summary.
    #[arg(long)]
    json: bool,
    /// Exit 1 when the tags differ (added, removed or changed params, or graphs).
    #[arg(long)]
    exit_code: bool,
}

fn num(x: Option<f64>) -> Value {
    match x {
        Some(v) if v.is_finite() => json!(v),
        Some(_) => json!("inf"),
        None => Value::Null,
    }
}

fn changed_json(c: &ParamDiff) -> Value {
    json!({
        "name": c.name,
        "dtype_a": c.dtype_a.name(),
        "dtype_b": c.dtype_b.name(),
        "dims_a": c.dims_a,
        "dims_b": c.dims_b,
        "dequantized": c.dequantized,
        "max_abs_diff": num(c.max_abs_diff),
        "max_rel_diff": num(c.max_rel_diff),
    })
}

fn diff_json(d: &TagDiff) -> Value {
    json!({
        "tag_a": d.tag_a,
        "tag_b": d.tag_b,
        "identical": d.is_identical(),
        "graph": d.graph.name(),
        "added": d.added,
        "removed": d.removed,
        "changed": d.changed.iter().map(changed_json).collect::<Vec<_>>(),
        "shared": d.shared,
        "copied": d.copied,
    })
}

fn fmt_num(x: Option<f64>) -> String {
    match x {
        Some(v) => format!("{v:.3e}"),
        None => "-".into(),
    }
}

fn text(d: &TagDiff) -> String {
    let mut out = format!(
        "{} -> {}: graph {}, {} added, {} removed, {} changed, {} shared, {} copied\n",
        clean(&d.tag_a),
        clean(&d.tag_b),
        d.graph.name(),
        d.added.len(),
        d.removed.len(),
        d.changed.len(),
        d.shared.len(),
        d.copied.len()
    );
    for n in &d.added {
        out.push_str(&format!("+ {}\n", clean(n)));
    }
    for n in &d.removed {
        out.push_str(&format!("- {}\n", clean(n)));
    }
    for c in &d.changed {
        let types = if c.dtype_a == c.dtype_b {
            c.dtype_a.name().to_string()
        } else {
            format!("{} -> {}", c.dtype_a.name(), c.dtype_b.name())
        };
        let dims = if c.dims_a == c.dims_b {
            format!("{:?}", c.dims_a)
        } else {
            format!("{:?} -> {:?}", c.dims_a, c.dims_b)
        };
        out.push_str(&format!(
            "~ {:<32} {:<14} {:<16} max abs {} rel {}{}\n",
            clean(&c.name),
            types,
            dims,
            fmt_num(c.max_abs_diff),
            fmt_num(c.max_rel_diff),
            if c.dequantized { " (dequantized)" } else { "" }
        ));
    }
    out
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.archive)?;
    let d = diff_tags(&archive, &args.tag_a, &args.tag_b).map_err(|e| {
        CliError::Failed(format!(
            "cannot diff {} and {} of {}: {e}",
            args.tag_a,
            args.tag_b,
            args.archive.display()
        ))
    })?;
    if args.json {
        print_json(&diff_json(&d))?;
    } else {
        print(&text(&d))?;
    }
    if args.exit_code && !d.is_identical() {
        return Ok(Outcome::Negative);
    }
    Ok(Outcome::Success)
}
