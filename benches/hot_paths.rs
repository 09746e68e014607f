//! Criterion benches of the library's hot paths: decoding a record, opening an archive
//! and viewing every tensor of a tag, saving a tag, appending a tag in place.
//!
//! Sizes are small so that `cargo test --benches` (criterion's test mode, each bench run
//! once) finishes in seconds; the large-data figures come from `bench/compare.py`.

#[path = "common/mod.rs"]
mod common;

use common::Set;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use modelzip::{AppendMode, Appender, Archive, ArchiveWriter, Tensor, WriteOptions, tensor};
use std::hint::black_box;
use std::path::Path;

fn no_fsync() -> WriteOptions {
    WriteOptions {
        fsync: false,
        ..WriteOptions::default()
    }
}

fn write(path: &Path, tag: &str, tensors: &[(String, Tensor)]) {
    let mut w = ArchiveWriter::create_with(path, &no_fsync()).unwrap();
    let mut t = w.begin_tag(tag).unwrap();
    for (n, x) in tensors {
        t.param(n, &x.view()).unwrap();
    }
    t.finish().unwrap();
    w.finish().unwrap();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode_record");
    for dims in [vec![16u64], vec![1024, 1024]] {
        let t = common::tensor(3, &dims);
        let t = t.with_lod(vec![]).unwrap();
        let mut bytes = Vec::new();
        tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{:?}", dims), |b| {
            b.iter(|| black_box(tensor::decode_tensor(black_box(&bytes)).unwrap()))
        });
    }
    // Header decode of a combined file of 1,000 small records.
    let ts: Vec<Tensor> = (0..1000).map(|i| common::small_param(0, i)).collect();
    let views: Vec<_> = ts.iter().map(Tensor::view).collect();
    let mut bytes = Vec::new();
    tensor::encode_combined(views.iter(), &mut bytes).unwrap();
    g.throughput(Throughput::Elements(1000));
    g.bench_function("combined_1000_small", |b| {
        b.iter(|| black_box(tensor::decode_combined(black_box(&bytes)).unwrap().len()))
    });
    g.finish();
}

fn open_and_view(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("open_view_tag");
    // The same 200 tensors at two sizes: the time should not depend on tensor bytes.
    for (label, s) in [("200x64KiB", "L/64"), ("200x16KiB", "L/256")] {
        let s = Set::by_name(s).unwrap();
        let path = dir.path().join(format!("{label}.mz"));
        write(&path, "t", &s.all(0));
        g.throughput(Throughput::Elements(s.count as u64));
        g.bench_function(label, |b| {
            b.iter(|| {
                let a = Archive::open(&path).unwrap();
                let tag = a.latest().unwrap();
                let mut n = 0usize;
                for p in tag.params() {
                    n += tag.tensor(&p.location).unwrap().view().data().len();
                }
                black_box(n)
            })
        });
    }
    g.finish();
}

fn save(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let s = Set::by_name("L/64").unwrap(); // 200 x 84 KiB = 16 MiB
    let tensors = s.all(1);
    let path = dir.path().join("save.mz");
    let mut g = c.benchmark_group("save_tag");
    g.throughput(Throughput::Bytes(s.tensor_bytes()));
    g.sample_size(10);
    g.bench_function("16MiB_200_tensors_no_fsync", |b| {
        b.iter(|| write(&path, "t", &tensors))
    });
    g.finish();
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let base = Set::by_name("L/64").unwrap();
    let ck = Set::by_name("C100/64").unwrap(); // 20 x 80 KiB
    let pristine = dir.path().join("base.mz");
    write(&pristine, "base", &base.all(2));
    let tensors = ck.all(3);
    let path = dir.path().join("work.mz");
    let mut g = c.benchmark_group("append_in_place");
    g.throughput(Throughput::Bytes(ck.tensor_bytes()));
    g.sample_size(10);
    g.bench_function("1.6MiB_to_16MiB_no_fsync", |b| {
        b.iter_batched(
            || std::fs::copy(&pristine, &path).unwrap(),
            |_| {
                let mut ap = Appender::open_with(&path, AppendMode::InPlace, &no_fsync()).unwrap();
                let mut t = ap.begin_tag("ckpt").unwrap();
                for (n, x) in &tensors {
                    t.param(n, &x.view()).unwrap();
                }
                t.finish().unwrap();
                ap.finish().unwrap();
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, decode, open_and_view, save, append);
criterion_main!(benches);
