//! The child process of `it::archive_crash::sigkill_at_random_moments`: appends (in
//! place or by rewrite), removes (by rewrite or in place) and compacts, in a loop, until
//! the parent kills it with SIGKILL.
//!
//! `crash-child ARCHIVE NONCE`: tag `i` of the run is named `c{NONCE}-{i}` and holds the
//! values [`tag_values`] gives (the parent checks them with the same formula). Built
//! only with the `fault-injection` feature, which the crate's own tests enable, so it is
//! never installed.

use modelzip::{AppendMode, Archive, Removal, TagBuilder, Tensor, WriteOptions};

/// Parameter `w` and its one updater array of tag `c{nonce}-{i}`: `[nonce, i, 2, 3, ..]`
/// and `[i, nonce, 2, 3, ..]`, distinct for every tag and exact in f32 (the parent,
/// tests/it/archive_crash.rs, checks tags with the same formula).
fn tag_values(nonce: u64, i: u64) -> (Vec<f32>, Vec<f32>) {
    let mut w: Vec<f32> = (0..64u16).map(f32::from).collect();
    let mut m = w.clone();
    (w[0], w[1]) = (nonce as f32, i as f32);
    (m[0], m[1]) = (i as f32, nonce as f32);
    (w, m)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(nonce), None) = (args.next(), args.next(), args.next()) else {
        return Err("usage: crash-child ARCHIVE NONCE".into());
    };
    let nonce: u64 = nonce.parse()?;
    let opts = WriteOptions {
        wait_for_lock: true,
        ..Default::default()
    };
    for i in 0.. {
        let (w, m) = tag_values(nonce, i);
        let tag = TagBuilder::new(format!("c{nonce}-{i}"))
            .param("w", Tensor::from_slice(vec![64], &w)?)
            .param("shared", Tensor::from_slice(vec![64], &[7.0f32; 64])?)
            .updater("w", vec![Tensor::from_slice(vec![64], &m)?]);
        let mode = if i % 3 == 2 {
            AppendMode::Rewrite
        } else {
            AppendMode::InPlace
        };
        modelzip::append_tag(&path, tag, mode, &opts)?;
        if i % 5 == 4 {
            modelzip::compact(&path, &opts)?;
        }
        if Archive::open(&path)?.tags().len() > 30 {
            let removal = Removal::keep_newest(20).in_place(i % 2 == 1);
            modelzip::remove_tags(&path, removal, &opts)?;
        }
    }
    Ok(())
}
