//! Decodes a Paddle LoDTensor file or combined `.pdiparams` file and prints each record.
//!
//! `cargo run --example inspect_tensor -- tests/fixtures/paddle/3.3.1/mlp.pdiparams`

use modelzip::tensor;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: inspect_tensor FILE")?;
    let bytes = std::fs::read(&path)?;
    for rec in tensor::decode_combined(&bytes)? {
        let t = &rec.tensor;
        let preview = match t.to_f32_vec() {
            Ok(v) => format!("{:?}", &v[..v.len().min(4)]),
            Err(_) => format!("{} bytes", t.data().len()),
        };
        println!(
            "record {} at byte {}: {} {:?} lod {:?}: {preview}",
            rec.index,
            rec.offset,
            t.dtype(),
            t.dims(),
            t.lod()
        );
    }
    Ok(())
}
