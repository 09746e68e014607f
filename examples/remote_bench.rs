//! Remote reads against the test HTTP server on 127.0.0.1 with 20 ms added to every answer
//! (a far-away store): requests, bytes and time to list the tags of a 1 GiB archive, to
//! read their headers, to read one 100 MiB tag, against downloading the whole object.
//! Prints a Markdown table (docs/BENCHMARKS.md). Run:
//!   cargo run --release --example remote_bench
//! (needs about 4 GiB of memory and 1 GiB in the temp directory).

// The integration tests' HTTP server, of which this program uses a part.
#[path = "../tests/it/support/http_server.rs"]
#[allow(dead_code)]
mod http_server;

use modelzip::remote::{self, RemoteOptions};
use modelzip::{Archive, ArchiveWriter, DType, TagBuilder, Tensor};
use std::time::{Duration, Instant};

const TAGS: usize = 10;
const TENSORS: usize = 10;
const TENSOR_BYTES: usize = 10 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("big.zip");
    let mut w = ArchiveWriter::create(&path)?;
    for t in 0..TAGS {
        let mut b = TagBuilder::new(format!("t{t}"));
        for p in 0..TENSORS {
            // Distinct contents: equal tensors would be stored once.
            let mut data = vec![(t * TENSORS + p) as u8; TENSOR_BYTES];
            data[0] = t as u8;
            data[1] = p as u8;
            let x = Tensor::from_bytes(DType::Uint8, vec![TENSOR_BYTES as u64], data)?;
            b = b.param(format!("p{p}"), x);
        }
        w.add_tag(b)?;
    }
    w.finish()?;
    let len = std::fs::metadata(&path)?.len();
    let server = http_server::Server::start();
    server.put("big.zip", std::fs::read(&path)?);
    server.set_latency(Duration::from_millis(20));
    let url = server.url("big.zip");
    let opts = RemoteOptions::default();
    println!(
        "archive: {TAGS} tags x {TENSORS} tensors of {} MiB = {len} bytes; 20 ms per request\n",
        TENSOR_BYTES >> 20
    );
    println!("| operation | requests | bytes fetched | time |");
    println!("|---|---:|---:|---:|");
    let row = |what: &str,
               f: &mut dyn FnMut() -> Result<(), modelzip::Error>|
     -> Result<(), modelzip::Error> {
        let (n, b, t) = (server.count(), server.bytes_sent(), Instant::now());
        f()?;
        println!(
            "| {what} | {} | {} | {:.0} ms |",
            server.count() - n,
            server.bytes_sent() - b,
            t.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    };
    let mut archive = None;
    row("open, list the tags", &mut || {
        archive = Some(opts.open(&url)?);
        Ok(())
    })?;
    let a = archive.take().ok_or("not opened")?;
    row("the summary (what `modelzip tags` lists)", &mut || {
        a.summary().map_err(|s| {
            modelzip::Error::from(modelzip::ErrorKind::InvalidInput(format!("summary {s}")))
        })?;
        Ok(())
    })?;
    row(
        "every tag's tables and tensor headers (`tags` without a current summary)",
        &mut || {
            for t in a.tags() {
                let tag = a.tag(t)?;
                let locs: Vec<_> = tag.params().iter().map(|p| &p.location).collect();
                a.tensor_heads(&locs)?;
            }
            Ok(())
        },
    )?;
    row("one tag (100 MiB), tensor by tensor", &mut || {
        let tag = a.tag("t3")?;
        for p in tag.params() {
            tag.tensor(&p.location)?;
        }
        Ok(())
    })?;
    row("one tag (100 MiB), prefetched in one batch", &mut || {
        let tag = a.tag("t4")?;
        let names: Vec<&str> = tag.params().iter().map(|p| p.location.entry()).collect();
        a.prefetch(&names)?;
        for p in tag.params() {
            tag.tensor(&p.location)?;
        }
        Ok(())
    })?;
    let down = dir.path().join("down.zip");
    row("download the whole object (`cp`, with verify)", &mut || {
        remote::download(&url, &down, true, &opts, &|_, _| {}).map(drop)
    })?;
    let _ = Archive::open(&down)?;
    Ok(())
}
