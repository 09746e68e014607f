//! `modelzip tensor`: decode a standalone LoDTensor file or a combined file.

use super::output::{print, print_json, sha256_hex};
use super::{CliError, Outcome};
use modelzip::tensor::codec;
use serde_json::json;
use std::path::PathBuf;

/// Decode a Paddle LoDTensor file (one record) or a combined file
/// (`save_combine`, `.pdiparams`: records back to back) and describe each record.
///
/// Example:
///   modelzip tensor model.pdiparams
///   modelzip tensor fc_0.w_0 --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The tensor file to decode.
    file: PathBuf,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let shown = args.file.display().to_string();
    // Memory-mapped: the data is read only to hash it, never copied.
    let file = modelzip::tensor::TensorFile::open(&args.file)
        .map_err(|e| CliError(format!("cannot read {shown}: {}", e.kind())))?;
    let bytes = file.bytes();
    let records = codec::decode_combined(bytes)
        .map_err(|e| CliError(format!("cannot decode {shown}: {e}")))?;
    if args.json {
        let recs: Vec<_> = records
            .iter()
            .map(|r| {
                json!({
                    "index": r.index,
                    "offset": r.offset,
                    "length": r.length,
                    "dtype": r.tensor.dtype().name(),
                    "dtype_code": r.tensor.dtype().code(),
                    "dims": r.tensor.dims(),
                    "lod": r.tensor.lod(),
                    "data_bytes": r.tensor.data().len(),
                    "data_sha256": sha256_hex(r.tensor.data()),
                })
            })
            .collect();
        return print_json(&json!({"file": shown, "records": recs})).map(|_| Outcome::Success);
    }
    let mut out = format!(
        "{shown}: {} record(s), {} bytes\n",
        records.len(),
        bytes.len()
    );
    out.push_str(&format!(
        "{:>5}  {:>10}  {:>10}  {:<14}  {:<16}  {:<12}  {:>10}  {}\n",
        "index", "offset", "length", "dtype", "dims", "lod", "data", "data sha256"
    ));
    for r in &records {
        let t = &r.tensor;
        out.push_str(&format!(
            "{:>5}  {:>10}  {:>10}  {:<14}  {:<16}  {:<12}  {:>10}  {}\n",
            r.index,
            r.offset,
            r.length,
            format!("{} ({})", t.dtype().name(), t.dtype().code()),
            format!("{:?}", t.dims()),
            format!("{:?}", t.lod()),
            t.data().len(),
            sha256_hex(t.data())
        ));
    }
    print(&out).map(|_| Outcome::Success)
}
