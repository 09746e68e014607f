//! The child process of `it::archive_crash::sigkill_at_random_moments`: appends (in
//! place or by rewrite), removes (by rewrite or in place) and compacts, in a loop, until
//! the parent kills it with SIGKILL.
//!
//! `crash-child ARCHIVE NONCE`: tag `i` of the run is named `c{NONCE}-{i}` and holds the
//! values [`tag_values`] gives (the parent checks them with the same formula). Built
//! only with the `fault-injection` feature, which the crate's own tests enable, so it is
//! never installed.
//!
//! `crash-child ARCHIVE NONCE sharded`: the same tags, each written by a sharded save of
//! two ranks (two threads of this process, half the rows each), with the removals of
//! the loop above; the parent kills both ranks at once at any phase of the protocol.

use modelzip::sharded::{ShardedOptions, ShardedWriter, TensorSpec};
use modelzip::{AppendMode, Archive, DType, Removal, TagBuilder, Tensor, WriteOptions};

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
    let (Some(path), Some(nonce), mode, None) =
        (args.next(), args.next(), args.next(), args.next())
    else {
        return Err("usage: crash-child ARCHIVE NONCE [sharded]".into());
    };
    let nonce: u64 = nonce.parse()?;
    let opts = WriteOptions {
        wait_for_lock: true,
        ..Default::default()
    };
    if mode.as_deref() == Some("sharded") {
        return sharded_loop(&path, nonce, &opts);
    }
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

/// Tag `c{nonce}-{i}` for i = 0, 1, ... by sharded saves of two ranks (threads), rows
/// 0..32 by rank 0 and 32..64 by rank 1 of `w`, its updater array and `shared`.
fn sharded_loop(
    path: &str,
    nonce: u64,
    opts: &WriteOptions,
) -> Result<(), Box<dyn std::error::Error>> {
    let specs = vec![
        TensorSpec::param("w", DType::Fp32, vec![64]),
        TensorSpec::param("shared", DType::Fp32, vec![64]),
        TensorSpec::updater("w", 0, DType::Fp32, vec![64]),
    ];
    for i in 0.. {
        let (w, m) = tag_values(nonce, i);
        let tag = format!("c{nonce}-{i}");
        std::thread::scope(|s| -> Result<(), String> {
            let hs: Vec<_> = (0..2u32)
                .map(|rank| {
                    let (specs, w, m, tag) = (&specs, &w, &m, &tag);
                    s.spawn(move || -> modelzip::Result<()> {
                        let mut o = ShardedOptions::new(rank, 2);
                        o.write = opts.clone();
                        let mut sw = ShardedWriter::open(path, tag, specs, &o)?;
                        let rows = 32 * rank as usize..32 * (rank as usize + 1);
                        let at = rows.start as u64;
                        let part = |v: &[f32]| Tensor::from_slice(vec![32], &v[rows.clone()]);
                        sw.write_param("w", at, &part(w)?.view())?;
                        sw.write_param("shared", at, &part(&[7.0f32; 64])?.view())?;
                        sw.write_updater("w", 0, at, &part(m)?.view())?;
                        sw.finish().map(drop)
                    })
                })
                .collect();
            for h in hs {
                h.join()
                    .map_err(|_| "a rank panicked".to_string())?
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })?;
        if Archive::open(path)?.tags().len() > 30 {
            let removal = Removal::keep_newest(20).in_place(i % 2 == 1);
            modelzip::remove_tags(path, removal, opts)?;
        }
    }
    Ok(())
}
