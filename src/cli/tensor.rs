//! `modelzip tensor`: decode a standalone LoDTensor file or a combined file.

use super::output::{io_error, print_json};
use super::{CliError, Outcome};
use modelzip::Lod;
use modelzip::sha256_hex;
use modelzip::tensor::{self, Record};
use std::io::Write;
use std::path::PathBuf;

/// Decode a Paddle LoDTensor file (one record) or a combined file
/// (`save_combine`, `.pdiparams`: records back to back) and describe each record.
/// An empty file is refused (exit 2), as a file that does not decode is.
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
        .map_err(|e| CliError::Failed(format!("cannot read {shown}: {}", e.kind())))?;
    let bytes = file.bytes();
    // No records is what a combined file of no variables would be, but an empty file
    // given here is far more likely a wrong path or a failed save: "0 record(s)" and
    // exit 0 would read as success.
    if bytes.is_empty() {
        return Err(CliError::Failed(format!(
            "cannot decode {shown}: the file is empty (0 bytes): a LoDTensor file holds at least one record (byte 0)"
        )));
    }
    let records = tensor::decode_combined(bytes).map_err(|e| {
        // A modelzip archive (or any zip) given by mistake: say so, not just that its
        // first four bytes are no LoDTensor version.
        if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
            return CliError::Failed(format!(
                "cannot decode {shown}: {}; it is a zip archive, not a tensor file (`modelzip show` lists an archive's tensors) ({})",
                e.kind(),
                e.location()
            ));
        }
        CliError::Failed(format!("cannot decode {shown}: {e}"))
    })?;
    if args.json {
        let recs: Vec<RecordJson<'_>> = records.iter().map(RecordJson::new).collect();
        let doc = FileJson {
            file: &shown,
            records: recs,
        };
        // Streamed: a LoD can hold millions of offsets.
        return print_json(&doc).map(|_| Outcome::Success);
    }
    // Written as it is rendered, for the same reason.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, super::output::stdout());
    write_table(&mut out, &shown, bytes.len(), &records)
        .and_then(|()| out.flush())
        .map_err(io_error)?;
    Ok(Outcome::Success)
}

/// The `--json` document (shape in docs/CLI.md).
#[derive(serde::Serialize)]
struct FileJson<'a> {
    file: &'a str,
    records: Vec<RecordJson<'a>>,
}

#[derive(serde::Serialize)]
struct RecordJson<'a> {
    index: usize,
    offset: u64,
    length: u64,
    dtype: &'static str,
    dtype_code: i32,
    dims: &'a [u64],
    lod: &'a Lod,
    data_bytes: usize,
    data_sha256: String,
}

impl<'a> RecordJson<'a> {
    fn new(r: &'a Record<'a>) -> Self {
        let t = &r.tensor;
        RecordJson {
            index: r.index,
            offset: r.offset,
            length: r.length,
            dtype: t.dtype().name(),
            dtype_code: t.dtype().code(),
            dims: t.dims(),
            lod: t.lod(),
            data_bytes: t.data().len(),
            data_sha256: sha256_hex(t.data()),
        }
    }
}

/// LoDs with more offsets than this are summarized in the table (`--json` has them all).
const TABLE_LOD_OFFSETS: usize = 16;

/// A LoD as a table shows it: `[[0, 2, 5]]`, or `N level(s), M offsets` for more than
/// [`TABLE_LOD_OFFSETS`] offsets.
pub fn table_lod(lod: &[Vec<u64>]) -> String {
    let offsets: usize = lod.iter().map(Vec::len).sum();
    if offsets <= TABLE_LOD_OFFSETS {
        format!("{lod:?}")
    } else {
        format!("{} level(s), {offsets} offsets", lod.len())
    }
}

fn write_table(
    out: &mut impl Write,
    shown: &str,
    len: usize,
    records: &[Record<'_>],
) -> std::io::Result<()> {
    writeln!(out, "{shown}: {} record(s), {len} bytes", records.len())?;
    // Columns as wide as their widest cell (a long dims or LoD widens its column instead
    // of pushing the rest of its row out of line). The hash, last and of fixed width, is
    // not fitted, so each record's data is hashed once, as its row is written.
    use super::output::{Align::Left, Align::Right, Table};
    let mut table = Table::new(&[Right, Right, Right, Left, Left, Left, Right, Left]);
    let header = [
        "index",
        "offset",
        "length",
        "dtype",
        "dims",
        "lod",
        "data",
        "data sha256",
    ]
    .map(String::from);
    let cells = |r: &Record<'_>| -> [String; 7] {
        let t = &r.tensor;
        [
            r.index.to_string(),
            r.offset.to_string(),
            r.length.to_string(),
            format!("{} ({})", t.dtype().name(), t.dtype().code()),
            format!("{:?}", t.dims()),
            table_lod(t.lod()),
            t.data().len().to_string(),
        ]
    };
    table.fit(&header);
    for r in records {
        table.fit(&cells(r));
    }
    table.write_row(out, "", &header)?;
    for r in records {
        let [a, b, c, d, e, f, g] = cells(r);
        table.write_row(out, "", &[a, b, c, d, e, f, g, sha256_hex(r.tensor.data())])?;
    }
    Ok(())
}
