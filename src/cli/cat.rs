//! `modelzip cat`: one tensor's values.

use super::common::{open, pick_tag};
use super::output::{clean, print, print_bytes, print_json};
use super::{CliError, Outcome};
use modelzip::{DType, TensorView};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Print one parameter's values: a readable summary by default, every value with
/// `--json`, or exactly the raw little-endian data bytes with `--raw`; `--slice` reads
/// only a part (rows, or a box), not the rest.
///
/// Example:
///   modelzip cat model.zip fc_0.w_0 --tag fp32
///   modelzip cat model.zip fc_0.w_0 --raw > w.bin
///   modelzip cat model.zip fc_0.w_0 --slice 2:4,0:8
#[derive(clap::Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The parameter name, as in params.txt.
    param: String,
    /// The tag (ignoring case); default: the newest.
    #[arg(long)]
    tag: Option<String>,
    /// Write the raw data bytes to stdout.
    #[arg(long, conflicts_with = "json")]
    raw: bool,
    /// Print one JSON document with every value.
    #[arg(long)]
    json: bool,
    /// Only this part: one `A:B` (rows A to B-1; `A:`, `:B` and `:` leave a side open)
    /// or `I` (row I) per leading dimension, comma-separated; later dimensions whole.
    #[arg(long, value_name = "A:B,...")]
    slice: Option<String>,
}

/// The ranges `spec` names (`A:B`, `A:`, `:B`, `:` or `I` per dimension, comma-separated)
/// of a tensor of `dims`: open ends are the dimension's ends; bounds are checked by the
/// read.
fn parse_slice(spec: &str, dims: &[u64]) -> Result<Vec<std::ops::Range<u64>>, CliError> {
    let bad = |part: &str, why: &str| {
        CliError::Failed(format!(
            "--slice {spec:?}: {part:?} {why} (each dimension takes A:B, A:, :B, : or I, \
             non-negative integers, comma-separated)"
        ))
    };
    let num = |part: &str, s: &str| -> Result<u64, CliError> {
        s.trim()
            .parse::<u64>()
            .map_err(|_| bad(part, "is not a range or an index"))
    };
    spec.split(',')
        .enumerate()
        .map(|(d, part)| {
            let whole = dims.get(d).copied().unwrap_or(0);
            match part.split_once(':') {
                Some((a, b)) => {
                    let a = if a.trim().is_empty() {
                        0
                    } else {
                        num(part, a)?
                    };
                    let b = if b.trim().is_empty() {
                        whole
                    } else {
                        num(part, b)?
                    };
                    Ok(a..b)
                }
                None => {
                    let i = num(part, part)?;
                    Ok(i..i.saturating_add(1))
                }
            }
        })
        .collect()
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.archive)?;
    let tag = pick_tag(&archive, args.tag.as_deref())?;
    let failed = |e: modelzip::Error| {
        CliError::Failed(format!(
            "cannot read {:?} of tag {}: {e}",
            args.param,
            tag.name()
        ))
    };
    let (data, ranges) = match &args.slice {
        None => (tag.param(&args.param).map_err(failed)?, None),
        Some(spec) => {
            // The dims from the header alone (the data is not read).
            let loc = tag
                .params()
                .iter()
                .find(|p| p.name == args.param)
                .map(|p| p.location.clone());
            let dims = match &loc {
                Some(l) => archive.tensor_heads(&[l]).map_err(failed)?.remove(0).dims,
                None => Vec::new(),
            };
            let ranges = parse_slice(spec, &dims)?;
            let data = tag.param_slice(&args.param, &ranges).map_err(failed)?;
            (data, Some(ranges))
        }
    };
    let t = data.view();
    if args.raw {
        return print_bytes(t.data()).map(|_| Outcome::Success);
    }
    if args.json {
        // Streamed: the values are rendered chunk by chunk as they are written.
        let doc = CatJson {
            tag: tag.name(),
            name: &args.param,
            dtype: t.dtype().name(),
            dtype_code: t.dtype().code(),
            dims: t.dims(),
            lod: t.lod(),
            slice: ranges
                .as_ref()
                .map(|r| r.iter().map(|r| [r.start, r.end]).collect()),
            values: AllValues(&t),
        };
        return print_json(&doc).map(|_| Outcome::Success);
    }
    let n = t.numel();
    let part = match &ranges {
        Some(r) => {
            let r: Vec<String> = r.iter().map(|r| format!("{}:{}", r.start, r.end)).collect();
            format!("[{}]", r.join(", "))
        }
        None => String::new(),
    };
    let mut out = format!(
        "{}{part} (tag {}): {} {:?}, {n} elements",
        clean(&args.param),
        clean(tag.name()),
        t.dtype(),
        t.dims(),
    );
    if !t.lod().is_empty() {
        out.push_str(&format!(", lod {:?}", t.lod()));
    }
    out.push('\n');
    // One pass over the values, a chunk at a time: min, max, mean and the first 16.
    let mut stats = Stats::new(n);
    let mut shown: Vec<String> = Vec::with_capacity(16);
    for v in value_iter(&t) {
        if shown.len() < 16 {
            shown.push(v.to_string());
        }
        stats.add(&v);
    }
    if let Some(line) = stats.line(t.dtype()) {
        out.push_str(&line);
    }
    let more = if n > 16 { ", ..." } else { "" };
    out.push_str(&format!("[{}{more}]\n", shown.join(", ")));
    print(&out).map(|_| Outcome::Success)
}

/// Min, max and mean of a tensor's numbers, from its values as [`values`] renders them.
/// Integers are compared exactly (an INT64 of 2^63 - 1 is not rounded through f32); NaN
/// is left out and counted; the mean is a sum of `x / n`, which cannot overflow.
struct Stats {
    n: f64,
    /// Integer min and max (every value so far an integer).
    int: Option<(i128, i128)>,
    min: f64,
    max: f64,
    /// Sum of x / n over the values that are not NaN.
    mean: f64,
    nan: u64,
    /// False after a value that is no number (bool, complex pair).
    numeric: bool,
    seen: u64,
}

impl Stats {
    fn new(n: u64) -> Stats {
        Stats {
            n: n as f64,
            int: None,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            nan: 0,
            numeric: true,
            seen: 0,
        }
    }

    fn add(&mut self, v: &Value) {
        if !self.numeric {
            return;
        }
        let exact = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from));
        let x = match v {
            Value::Number(num) => num.as_f64().unwrap_or(f64::NAN),
            // Non-finite floats are rendered as strings.
            Value::String(s) => s.parse::<f64>().unwrap_or(f64::NAN),
            _ => {
                self.numeric = false;
                return;
            }
        };
        let first = self.seen == 0;
        self.seen += 1;
        if x.is_nan() {
            self.nan += 1;
            return;
        }
        self.int = match (exact, self.int) {
            (Some(i), Some((lo, hi))) => Some((lo.min(i), hi.max(i))),
            (Some(i), None) if first => Some((i, i)),
            _ => None,
        };
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        self.mean += x / self.n;
    }

    /// `min A  max B  mean C` (and how many NaN were left out), or None when there is
    /// nothing to say: no numbers, or no element that is not NaN.
    fn line(&self, dtype: DType) -> Option<String> {
        let counted = self.seen - self.nan;
        if !self.numeric || counted == 0 {
            return None;
        }
        let mean = self.mean * (self.n / counted as f64);
        // 64-bit types print at their own precision, the rest as f32 did.
        let wide = matches!(
            dtype,
            DType::Fp64 | DType::Int64 | DType::Uint64 | DType::SizeT
        );
        // Very large and very small magnitudes in exponent form (3.4028235e38, not 39
        // digits).
        let f = |x: f64| {
            let a = x.abs();
            let sci = a.is_finite() && a != 0.0 && !(1e-5..1e16).contains(&a);
            match (wide, sci) {
                (true, true) => format!("{x:e}"),
                (true, false) => x.to_string(),
                (false, true) => format!("{:e}", x as f32),
                (false, false) => (x as f32).to_string(),
            }
        };
        let (min, max) = match self.int {
            Some((lo, hi)) => (lo.to_string(), hi.to_string()),
            None => (f(self.min), f(self.max)),
        };
        let nan = match self.nan {
            0 => String::new(),
            k => format!("  ({k} NaN left out)"),
        };
        Some(format!("min {min}  max {max}  mean {}{nan}\n", f(mean)))
    }
}

/// The `--json` document (docs/CLI.md).
#[derive(serde::Serialize)]
struct CatJson<'a> {
    tag: &'a str,
    name: &'a str,
    dtype: &'static str,
    dtype_code: i32,
    dims: &'a [u64],
    lod: &'a modelzip::Lod,
    /// `[[start, end], ...]` of `--slice`, absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    slice: Option<Vec<[u64; 2]>>,
    values: AllValues<'a>,
}

/// Every value of a tensor, serialized as a sequence without holding them all.
struct AllValues<'a>(&'a TensorView<'a>);

impl serde::Serialize for AllValues<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(value_iter(self.0))
    }
}

/// Elements converted per chunk, so memory stays bounded whatever the tensor's size.
const CHUNK_ELEMENTS: usize = 1 << 16;

/// The tensor's values as JSON values, converted a chunk at a time.
fn value_iter<'a>(t: &'a TensorView<'a>) -> impl Iterator<Item = Value> + 'a {
    let size = t.dtype().size();
    t.data()
        .chunks(CHUNK_ELEMENTS * size)
        .flat_map(move |chunk| {
            let n = (chunk.len() / size) as u64;
            TensorView::new(t.dtype(), vec![n], Vec::new(), chunk)
                .map(|v| values(&v))
                .unwrap_or_default()
        })
}

/// Every element as a JSON value: numbers, booleans, `[re, im]` pairs; NaN and
/// infinities become strings.
fn values(t: &TensorView<'_>) -> Vec<Value> {
    let d = t.data();
    let float = |x: f64| {
        if x.is_finite() {
            json!(x)
        } else {
            json!(x.to_string())
        }
    };
    // Through f32's shortest decimal form, so 0.1f32 prints as 0.1, not 0.10000000149.
    let float32 = |x: f32| {
        if x.is_finite() {
            json!(x.to_string().parse::<f64>().unwrap_or(f64::from(x)))
        } else {
            json!(x.to_string())
        }
    };
    let le = |c: &[u8]| {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(b)
    };
    let signed = |c: &[u8]| {
        let bits = 64 - 8 * c.len() as u32;
        ((le(c) << bits) as i64) >> bits
    };
    match t.dtype() {
        DType::Bool => d.iter().map(|&b| json!(b != 0)).collect(),
        DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 => d
            .chunks_exact(t.dtype().size())
            .map(|c| json!(signed(c)))
            .collect(),
        DType::Uint8 | DType::Uint16 | DType::Uint32 | DType::Uint64 | DType::SizeT => d
            .chunks_exact(t.dtype().size())
            .map(|c| json!(le(c)))
            .collect(),
        DType::Complex64 => d
            .chunks_exact(8)
            .map(|c| {
                let re = f32::from_bits(le(&c[..4]) as u32);
                let im = f32::from_bits(le(&c[4..]) as u32);
                json!([float32(re), float32(im)])
            })
            .collect(),
        DType::Complex128 => d
            .chunks_exact(16)
            .map(|c| {
                let re = f64::from_bits(le(&c[..8]));
                let im = f64::from_bits(le(&c[8..]));
                json!([float(re), float(im)])
            })
            .collect(),
        DType::Fp64 => d
            .chunks_exact(8)
            .map(|c| float(f64::from_bits(le(c))))
            .collect(),
        _ => t
            .to_f32_vec()
            .unwrap_or_default()
            .into_iter()
            .map(float32)
            .collect(),
    }
}
