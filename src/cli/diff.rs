//! `modelzip diff`: compare two tags parameter by parameter.

use super::common::open;
use super::output::{clean, io_error, print_json};
use super::{CliError, Outcome};
use modelzip::variants::{ParamDiff, TagComparison, compare_tags};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

/// Compare two tags: parameters added (only in TAG_B), removed (only in TAG_A),
/// changed (dtype, dims, LoD or data differ), and, of the identical ones, which are
/// shared (one file) and which are copies (two files). For changed float
/// parameters of equal dims, the largest absolute difference and that difference
/// relative to TAG_A's largest magnitude; an INT8 parameter with a <name>@scale
/// sibling is dequantized first. NaN = NaN and inf = inf; any other pair with a
/// NaN or inf makes the difference inf, and the line then counts those pairs and
/// gives the difference of the finite values. Also says whether the graphs differ.
///
/// Example:
///   modelzip diff model.zip fp32 int8
///   modelzip diff model.zip step-1000 step-2000 --json --exit-code
#[derive(clap::Args, Debug, Clone)]
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

/// One changed parameter as `diff --json` writes it.
pub(super) struct ChangedJson(pub(super) ParamDiff);

impl serde::Serialize for ChangedJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let c = &self.0;
        let mut m = s.serialize_map(Some(11))?;
        m.serialize_entry("name", &c.name)?;
        m.serialize_entry("dtype_a", c.dtype_a.name())?;
        m.serialize_entry("dtype_b", c.dtype_b.name())?;
        m.serialize_entry("dims_a", &c.dims_a)?;
        m.serialize_entry("dims_b", &c.dims_b)?;
        m.serialize_entry("dequantized", &c.dequantized)?;
        m.serialize_entry("max_abs_diff", &num(c.max_abs_diff))?;
        m.serialize_entry("max_rel_diff", &num(c.max_rel_diff))?;
        m.serialize_entry("non_finite_mismatches", &c.non_finite_mismatches)?;
        m.serialize_entry("finite_max_abs_diff", &num(c.finite_max_abs_diff))?;
        m.serialize_entry("finite_max_rel_diff", &num(c.finite_max_rel_diff))?;
        m.end()
    }
}

/// A JSON array written from an iterator as it goes (nothing collected first).
struct Seq<F>(F);

impl<I, F> serde::Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: serde::Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq((self.0)())
    }
}

/// The changed parameters, each built when it is written.
struct ChangedSeq<'c, 'a>(&'c TagComparison<'a>);

impl serde::Serialize for ChangedSeq<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.counts()[2]))?;
        for c in self.0.changed() {
            seq.serialize_element(&ChangedJson(c))?;
        }
        seq.end()
    }
}

/// The `diff --json` document, serialized as it is written (the name lists are not
/// copied first).
pub(super) struct DiffJson<'c, 'a>(pub(super) &'c TagComparison<'a>);

impl serde::Serialize for DiffJson<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let d = self.0;
        let mut m = s.serialize_map(Some(9))?;
        m.serialize_entry("tag_a", d.tag_a().name())?;
        m.serialize_entry("tag_b", d.tag_b().name())?;
        m.serialize_entry("identical", &d.is_identical())?;
        m.serialize_entry("graph", d.graph().name())?;
        m.serialize_entry("added", &Seq(|| d.added()))?;
        m.serialize_entry("removed", &Seq(|| d.removed()))?;
        m.serialize_entry("changed", &ChangedSeq(d))?;
        m.serialize_entry("shared", &Seq(|| d.shared()))?;
        m.serialize_entry("copied", &Seq(|| d.copied()))?;
        m.end()
    }
}

fn fmt_num(x: Option<f64>) -> String {
    match x {
        Some(v) => format!("{v:.3e}"),
        None => "-".into(),
    }
}

/// Writes the summary as it goes (a list of 200,000 names is not built first).
fn text(d: &TagComparison<'_>, out: &mut impl Write) -> std::io::Result<()> {
    let [added, removed, changed, shared, copied] = d.counts();
    writeln!(
        out,
        "{} -> {}: graph {}, {added} added, {removed} removed, {changed} changed, {shared} shared, {copied} copied",
        clean(d.tag_a().name()),
        clean(d.tag_b().name()),
        d.graph().name(),
    )?;
    for n in d.added() {
        writeln!(out, "+ {}", clean(n))?;
    }
    for n in d.removed() {
        writeln!(out, "- {}", clean(n))?;
    }
    for c in d.changed() {
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
        let non_finite = if c.non_finite_mismatches > 0 {
            format!(
                " ({} NaN/inf mismatch(es); finite values: max abs {} rel {})",
                c.non_finite_mismatches,
                fmt_num(c.finite_max_abs_diff),
                fmt_num(c.finite_max_rel_diff)
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "~ {:<32} {:<14} {:<16} max abs {} rel {}{}{non_finite}",
            clean(&c.name),
            types,
            dims,
            fmt_num(c.max_abs_diff),
            fmt_num(c.max_rel_diff),
            if c.dequantized { " (dequantized)" } else { "" }
        )?;
    }
    out.flush()
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.archive)?;
    let failed = |e: modelzip::Error| {
        CliError::Failed(format!(
            "cannot diff {} and {} of {}: {e}",
            args.tag_a,
            args.tag_b,
            args.archive.display()
        ))
    };
    let d = compare_tags(&archive, &args.tag_a, &args.tag_b).map_err(failed)?;
    if args.json {
        print_json(&DiffJson(&d))?;
    } else {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, super::output::stdout());
        text(&d, &mut out).map_err(io_error)?;
    }
    if args.exit_code && !d.is_identical() {
        return Ok(Outcome::Negative);
    }
    Ok(Outcome::Success)
}
