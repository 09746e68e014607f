//! Packages the FP32 and INT8 variants of a small Paddle model in one archive and
//! loads each: the bundled MLP (written by Paddle 3.3.1) is imported as `fp32`, an
//! INT8 tag is derived from it, and both are read back by name.
//!
//! `cargo run --example fp32_int8_variants [ARCHIVE]`

use modelzip::interop::ImportOptions;
use modelzip::interop::paddle;
use modelzip::variants::{self, AllowValues, QuantizeOptions};
use modelzip::{Archive, WriteOptions};
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let archive = match std::env::args().nth(1) {
        Some(p) => PathBuf::from(p),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().join("variants.zip")
        }
    };
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle/3.3.1");
    paddle::import_inference_model_files(
        &archive,
        "fp32",
        &model.join("mlp.pdmodel"),
        &model.join("mlp.pdiparams"),
        &ImportOptions::default(),
    )?;
    let report = variants::quantize(
        &archive,
        "fp32",
        "int8",
        &QuantizeOptions { per_channel: true },
        &AllowValues::default(),
        &WriteOptions::default(),
    )?;
    println!(
        "int8: {} params quantized, {} bytes stored",
        report.changed().count(),
        report.stored_bytes()
    );

    let a = Archive::open(&archive)?;
    println!("tags: {:?} (default {:?})", a.tags(), a.default_tag());
    for name in ["FP32", "int8"] {
        // Tag names are not case sensitive.
        let tag = a.tag(name)?;
        let mut weight_bytes = 0;
        for p in tag.params() {
            let data = tag.tensor(&p.location)?;
            let t = data.view();
            let how = if p.location.shared {
                format!("shared from {}", p.location.tag())
            } else {
                "own".to_string()
            };
            println!(
                "  {:<5} {:<16} {:<5} {:?} ({how})",
                tag.name(),
                p.name,
                t.dtype().name(),
                t.dims()
            );
            if p.name.ends_with(".w_0") {
                weight_bytes += t.data().len();
            }
        }
        println!("  {} weight bytes: {weight_bytes}", tag.name());
    }
    // The INT8 weight and its scale give back the FP32 weight within half a step.
    let (fp32, int8) = (a.tag("fp32")?, a.tag("int8")?);
    let w = fp32.param("fc_0.w_0")?.view().to_vec::<f32>()?;
    let q = int8.param("fc_0.w_0")?.view().to_vec::<i8>()?;
    let scale = int8.param("fc_0.w_0@scale")?.view().to_vec::<f32>()?;
    let cols = scale.len();
    let worst = w
        .iter()
        .zip(&q)
        .enumerate()
        .map(|(i, (x, &qi))| (x - f32::from(qi) * scale[i % cols]).abs() / scale[i % cols])
        .fold(0f32, f32::max);
    println!("largest dequantization error: {worst:.3} of a step");
    Ok(())
}
