//! Library-level figures for `bench/compare.py`: modelzip against the `safetensors` crate
//! on the same tensors, plus the machine's physical limits. Each command prints one JSON
//! object per line on stdout; times are seconds per repetition.
//!
//! `cargo bench --bench peer` (or `cargo test --benches`) with no command runs a tiny
//! smoke pass over every command, so CI checks that they work without measuring anything.
//! The real runs come from `python3 bench/compare.py`, which calls the compiled binary:
//!
//! ```text
//! peer gen-archive SET OUT [--salt S] [--tag T]   write SET as one tag (no fsync)
//! peer gen-m OUT TAGS PARAMS                      data set (M): TAGS tags x PARAMS params
//! peer gen-st SET OUT                             the same tensors as a .safetensors file
//! peer save SET DIR [--fsync] [--reps N] [--only mz|st]   P3 (+ P7 with --reps 1)
//! peer load ARCHIVE STFILE [--reps N] [--only mz|st]      P1 (+ P7 with --reps 1)
//! peer view ARCHIVE [--reps N]                    P2: open + zero-copy view of a tag
//! peer append BASE SET DIR [--fsync] [--reps N]   P4: in-place append vs fresh archive
//! peer tags-standin ARCHIVE                       P5 stand-in for `modelzip tags`
//! peer read-pdiparams FILE [--reps N]             P6: decode a Paddle combined file
//! peer physical FILE                              memcpy and page-cache read bandwidth
//! peer read-url URL                               every tensor of every tag through
//!                                                 Archive::open_url (remote row)
//! ```

#[path = "common/mod.rs"]
mod common;

use common::Set;
use modelzip::{
    AppendMode, Appender, Archive, ArchiveWriter, Tensor, TensorView, WriteOptions, tensor,
};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Args {
    pos: Vec<String>,
    fsync: bool,
    reps: usize,
    salt: u64,
    tag: String,
    only: Option<String>,
}

fn parse_args(raw: &[String]) -> Res<Args> {
    let mut a = Args {
        pos: Vec::new(),
        fsync: false,
        reps: 1,
        salt: 0,
        tag: "t".into(),
        only: None,
    };
    let mut it = raw.iter();
    while let Some(s) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{s} needs a value"));
        match s.as_str() {
            "--fsync" => a.fsync = true,
            "--reps" => a.reps = val()?.parse()?,
            "--salt" => a.salt = val()?.parse()?,
            "--tag" => a.tag = val()?,
            "--only" => a.only = Some(val()?),
            _ => a.pos.push(s.clone()),
        }
    }
    Ok(a)
}

fn set(name: &str) -> Res<Set> {
    Set::by_name(name).ok_or_else(|| format!("unknown data set {name:?}").into())
}

fn opts(fsync: bool) -> WriteOptions {
    WriteOptions {
        fsync,
        ..WriteOptions::default()
    }
}

fn secs_json(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:.6}")).collect();
    format!("[{}]", items.join(","))
}

fn emit(cmd: &str, fields: &[(&str, String)]) {
    let mut s = format!("{{\"cmd\":\"{cmd}\"");
    for (k, v) in fields {
        s.push_str(&format!(",\"{k}\":{v}"));
    }
    s.push('}');
    println!("{s}");
}

/// Minor page faults and user and system clock ticks of this process so far (zeros
/// where /proc is missing).
fn proc_cost() -> [u64; 3] {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses: minflt is field 10,
    // utime 14, stime 15 (1-based over the whole line).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| f.get(i - 3).copied().unwrap_or(0);
    [at(10), at(14), at(15)]
}

fn cost_since(c0: [u64; 3]) -> [u64; 3] {
    let c = proc_cost();
    [
        c[0].saturating_sub(c0[0]),
        c[1].saturating_sub(c0[1]),
        c[2].saturating_sub(c0[2]),
    ]
}

/// `[[faults, user s, sys s], ...]` (clock ticks of 1/100 s).
fn costs_json(c: &[[u64; 3]]) -> String {
    let items: Vec<String> = c
        .iter()
        .map(|[f, u, s]| format!("[{f},{:.2},{:.2}]", *u as f64 / 100.0, *s as f64 / 100.0))
        .collect();
    format!("[{}]", items.join(","))
}

fn timed<T>(f: impl FnOnce() -> Res<T>) -> Res<(f64, T)> {
    let t = Instant::now();
    let r = f()?;
    Ok((t.elapsed().as_secs_f64(), r))
}

fn st_view(t: &Tensor) -> Res<safetensors::tensor::TensorView<'_>> {
    let shape = t.dims().iter().map(|&d| d as usize).collect();
    Ok(safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        shape,
        t.data(),
    )?)
}

/// Writes back dirty pages between timed writes, so one repetition's writeback does not
/// throttle the next (untimed).
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

fn write_archive(path: &Path, tag: &str, tensors: &[(String, Tensor)], fsync: bool) -> Res<()> {
    let mut w = ArchiveWriter::create_with(path, &opts(fsync))?;
    let mut t = w.begin_tag(tag)?;
    for (n, x) in tensors {
        t.param(n, &x.view())?;
    }
    t.finish()?;
    w.finish()?;
    Ok(())
}

fn write_st(path: &Path, tensors: &[(String, Tensor)], fsync: bool) -> Res<()> {
    let views = tensors
        .iter()
        .map(|(n, t)| Ok((n.as_str(), st_view(t)?)))
        .collect::<Res<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None, path)?;
    if fsync {
        // serialize_to_file writes a temp file and renames it; the same durability as
        // modelzip's fsync option is the file's data and the directory entry.
        File::open(path)?.sync_all()?;
        File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()?;
    }
    Ok(())
}

/// What a safetensors user who wants integrity does today: `serialize_to_file`, then
/// SHA-256 of the file written (read back through a buffer, as `sha256sum` does).
fn write_st_sha(path: &Path, tensors: &[(String, Tensor)], fsync: bool) -> Res<[u8; 32]> {
    use sha2::Digest;
    write_st(path, tensors, fsync)?;
    let mut f = File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

fn gen_archive(a: &Args) -> Res<()> {
    let s = set(&a.pos[1])?;
    let out = PathBuf::from(&a.pos[2]);
    let (secs, ()) = timed(|| {
        // Streamed: one tensor in memory at a time, so multi-GiB archives are cheap.
        let mut w = ArchiveWriter::create_with(&out, &opts(false))?;
        let mut t = w.begin_tag(&a.tag)?;
        for i in 0..s.count {
            t.param(&Set::name(i), &s.make(a.salt, i).view())?;
        }
        t.finish()?;
        w.finish()?;
        Ok(())
    })?;
    emit(
        "gen-archive",
        &[
            ("secs", format!("{secs:.3}")),
            ("bytes", s.tensor_bytes().to_string()),
        ],
    );
    Ok(())
}

fn gen_m(a: &Args) -> Res<()> {
    let out = PathBuf::from(&a.pos[1]);
    let tags: usize = a.pos[2].parse()?;
    let params: usize = a.pos[3].parse()?;
    let mut w = ArchiveWriter::create_with(&out, &opts(false))?;
    for t in 0..tags {
        let mut tw = w.begin_tag(&format!("ckpt-{t:03}"))?;
        for i in 0..params {
            tw.param(
                &format!("block.{}.w{i}", i / 10),
                &common::small_param(t, i).view(),
            )?;
        }
        tw.finish()?;
    }
    w.finish()?;
    emit(
        "gen-m",
        &[("entries", (tags * (params + 3) + 1).to_string())],
    );
    Ok(())
}

fn gen_st(a: &Args) -> Res<()> {
    let s = set(&a.pos[1])?;
    write_st(Path::new(&a.pos[2]), &s.all(a.salt), false)?;
    emit("gen-st", &[]);
    Ok(())
}

/// P3 (and P7 for save): the same in-memory tensors saved by modelzip (one tag, SHA-256
/// manifest) and by `safetensors::serialize_to_file`, alternating.
fn save(a: &Args) -> Res<()> {
    let s = set(&a.pos[1])?;
    let dir = PathBuf::from(&a.pos[2]);
    let tensors = s.all(a.salt);
    let (mut mz, mut st, mut st_sha) = (Vec::new(), Vec::new(), Vec::new());
    // Per repetition: minor page faults, and user and system CPU seconds of the whole
    // process (all threads), from /proc/self/stat: what makes first repetitions slow.
    let (mut mz_cost, mut st_cost) = (Vec::new(), Vec::new());
    let mzp = dir.join("save.mz");
    let stp = dir.join("save.safetensors");
    for _ in 0..a.reps {
        if a.only.as_deref() != Some("st") {
            settle();
            let c0 = proc_cost();
            mz.push(timed(|| write_archive(&mzp, "t", &tensors, a.fsync))?.0);
            mz_cost.push(cost_since(c0));
            std::fs::remove_file(&mzp)?;
        }
        if a.only.as_deref() != Some("mz") {
            settle();
            let c0 = proc_cost();
            st.push(timed(|| write_st(&stp, &tensors, a.fsync))?.0);
            st_cost.push(cost_since(c0));
            std::fs::remove_file(&stp)?;
            settle();
            let (secs, d) = timed(|| write_st_sha(&stp, &tensors, a.fsync))?;
            std::hint::black_box(d);
            st_sha.push(secs);
            std::fs::remove_file(&stp)?;
        }
    }
    emit(
        "save",
        &[
            ("fsync", a.fsync.to_string()),
            ("bytes", s.tensor_bytes().to_string()),
            ("mz", secs_json(&mz)),
            ("st", secs_json(&st)),
            ("st_sha256", secs_json(&st_sha)),
            ("mz_faults_user_sys", costs_json(&mz_cost)),
            ("st_faults_user_sys", costs_json(&st_cost)),
        ],
    );
    Ok(())
}

/// P1 (and P7 for load): a whole tag into owned memory, against safetensors reading the
/// file into memory (`fs::read` + `deserialize`, the crate's owned path).
fn load(a: &Args) -> Res<()> {
    let arch = PathBuf::from(&a.pos[1]);
    let stp = PathBuf::from(&a.pos[2]);
    let (mut mz, mut st) = (Vec::new(), Vec::new());
    let mut bytes = 0u64;
    for _ in 0..a.reps {
        if a.only.as_deref() != Some("st") {
            let (secs, owned) = timed(|| {
                let ar = Archive::open(&arch)?;
                let tag = ar.latest()?;
                let mut owned: Vec<(String, Tensor)> = Vec::with_capacity(tag.params().len());
                for p in tag.params() {
                    owned.push((p.name.clone(), tag.tensor_owned(&p.location)?));
                }
                Ok(owned)
            })?;
            bytes = owned.iter().map(|(_, t)| t.data().len() as u64).sum();
            mz.push(secs);
            drop(owned);
        }
        if a.only.as_deref() != Some("mz") {
            let (secs, n) = timed(|| {
                let buf = std::fs::read(&stp)?;
                let st = safetensors::SafeTensors::deserialize(&buf)?;
                let n: usize = st.tensors().iter().map(|(_, v)| v.data().len()).sum();
                Ok((n, buf))
            })?;
            st.push(secs);
            drop(n);
        }
    }
    emit(
        "load",
        &[
            ("bytes", bytes.to_string()),
            ("mz", secs_json(&mz)),
            ("st", secs_json(&st)),
        ],
    );
    Ok(())
}

/// P2: open + zero-copy view of every tensor of the latest tag. Also reports the three
/// phases apart: `Archive::open` + `latest()`, the views alone, and closing (unmap, unlock).
fn view(a: &Args) -> Res<()> {
    let arch = PathBuf::from(&a.pos[1]);
    let (mut times, mut opens, mut views, mut closes) = (vec![], vec![], vec![], vec![]);
    let mut count = 0usize;
    let mut entries = 0usize;
    for _ in 0..a.reps {
        let mut phases = [0f64; 3];
        let (secs, (n, e)) = timed(|| {
            let t0 = Instant::now();
            let ar = Archive::open(&arch)?;
            let tag = ar.latest()?;
            let t1 = Instant::now();
            let mut n = 0;
            for p in tag.params() {
                let t = tag.tensor(&p.location)?;
                assert!(t.is_mapped());
                n += usize::from(!t.view().data().is_empty());
            }
            let t2 = Instant::now();
            let e = ar.entry_names().count();
            drop(tag);
            drop(ar);
            phases = [
                (t1 - t0).as_secs_f64(),
                (t2 - t1).as_secs_f64(),
                t2.elapsed().as_secs_f64(),
            ];
            Ok((n, e))
        })?;
        times.push(secs);
        opens.push(phases[0]);
        views.push(phases[1]);
        closes.push(phases[2]);
        count = n;
        entries = e;
    }
    // The floor: the reads the open makes and nothing else. The central directory in
    // one read from the end, then each entry's local header (30 bytes, its name and 256
    // bytes for its extra field, as the open reads it) with one `pread`: the entries lie
    // far apart, so no read serves two. Offsets found beforehand by the zip crate.
    let (dir_len, headers) = {
        let mut z = zip::ZipArchive::new(File::open(&arch)?)?;
        let mut headers = Vec::new();
        for i in 0..z.len() {
            let e = z.by_index_raw(i)?;
            headers.push((e.header_start(), 30 + e.name_raw().len() + 256));
        }
        let len = std::fs::metadata(&arch)?.len();
        (len - z.central_directory_start(), headers)
    };
    let mut floor = vec![];
    let mut buf = vec![0u8; 1 << 16];
    for _ in 0..a.reps {
        let t = Instant::now();
        let f = File::open(&arch)?;
        let len = f.metadata()?.len();
        let mut dir = vec![0u8; dir_len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut dir, len - dir_len)?;
        for &(at, n) in &headers {
            let n = n.min(buf.len()).min((len - at) as usize);
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf[..n], at)?;
        }
        drop(f);
        floor.push(t.elapsed().as_secs_f64());
    }
    emit(
        "view",
        &[
            ("tensors", count.to_string()),
            ("entries", entries.to_string()),
            ("floor_reads", secs_json(&floor)),
            ("secs", secs_json(&times)),
            ("open", secs_json(&opens)),
            ("views", secs_json(&views)),
            ("close", secs_json(&closes)),
        ],
    );
    Ok(())
}

/// P4: in-place append of a checkpoint to BASE against writing it to a fresh archive.
/// BASE is restored after each append (its old tail bytes rewritten, length reset).
fn append(a: &Args) -> Res<()> {
    let base = PathBuf::from(&a.pos[1]);
    let s = set(&a.pos[2])?;
    let dir = PathBuf::from(&a.pos[3]);
    let tensors = s.all(a.salt.max(7));
    let fresh = dir.join("fresh.mz");
    let orig_len = std::fs::metadata(&base)?.len();
    // The central directory of a few hundred entries is far smaller than this tail.
    let tail_at = orig_len.saturating_sub(1 << 20);
    let mut tail = Vec::new();
    let mut f = File::open(&base)?;
    f.seek(SeekFrom::Start(tail_at))?;
    f.read_to_end(&mut tail)?;
    drop(f);
    let (mut ap, mut fr) = (Vec::new(), Vec::new());
    for _ in 0..a.reps {
        settle();
        fr.push(timed(|| write_archive(&fresh, "ckpt", &tensors, a.fsync))?.0);
        std::fs::remove_file(&fresh)?;
        settle();
        ap.push(
            timed(|| {
                let mut ap = Appender::open_with(&base, AppendMode::InPlace, &opts(a.fsync))?;
                let mut t = ap.begin_tag("ckpt")?;
                for (n, x) in &tensors {
                    t.param(n, &x.view())?;
                }
                t.finish()?;
                ap.finish()?;
                Ok(())
            })?
            .0,
        );
        let mut f = std::fs::OpenOptions::new().write(true).open(&base)?;
        f.seek(SeekFrom::Start(tail_at))?;
        f.write_all(&tail)?;
        f.set_len(orig_len)?;
    }
    let check = Archive::open(&base)?;
    if check.tags().iter().any(|t| t == "ckpt") {
        return Err("base archive was not restored".into());
    }
    emit(
        "append",
        &[
            ("fsync", a.fsync.to_string()),
            ("base_bytes", orig_len.to_string()),
            ("bytes", s.tensor_bytes().to_string()),
            ("append", secs_json(&ap)),
            ("fresh", secs_json(&fr)),
        ],
    );
    Ok(())
}

/// P5 stand-in for `modelzip tags`: open, list tags, parse every tag's tables and read
/// every tensor's header. Prints the tags like the command would.
fn tags_standin(a: &Args) -> Res<()> {
    let ar = Archive::open(&a.pos[1])?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut tensors = 0usize;
    for name in ar.tags() {
        let tag = ar.tag(name)?;
        let mut bytes = 0u64;
        for p in tag.params() {
            bytes += tag.tensor(&p.location)?.view().data().len() as u64;
            tensors += 1;
        }
        writeln!(out, "{name}\t{} params\t{bytes} bytes", tag.params().len())?;
    }
    out.flush()?;
    drop(out);
    eprintln!("{tensors} tensors");
    Ok(())
}

/// P6: decode a Paddle combined parameter file: mapped (zero-copy), read into memory +
/// zero-copy decode, and the same with every record copied into an owned tensor.
fn read_pdiparams(a: &Args) -> Res<()> {
    let path = PathBuf::from(&a.pos[1]);
    let (mut read, mut owned, mut mapped, mut touched) = (vec![], vec![], vec![], vec![]);
    let mut records = 0;
    for _ in 0..a.reps {
        let (secs, n) = timed(|| {
            // The library's reading path for tensor files: mapped, decoded in place.
            let f = tensor::TensorFile::open(&path)?;
            Ok(tensor::decode_combined(f.bytes())?.len())
        })?;
        mapped.push(secs);
        assert_eq!(records.max(n), n);
        let (secs, sum) = timed(|| {
            // The same, then one byte read from every 4 KiB page of every record's data:
            // every byte is resident and readable, as after Paddle's load.
            let f = tensor::TensorFile::open(&path)?;
            let mut sum = 0u64;
            for r in tensor::decode_combined(f.bytes())? {
                sum += r
                    .tensor
                    .data()
                    .iter()
                    .step_by(4096)
                    .map(|&b| u64::from(b))
                    .sum::<u64>();
            }
            Ok(sum)
        })?;
        touched.push(secs);
        std::hint::black_box(sum);
        let (secs, n) = timed(|| {
            let buf = std::fs::read(&path)?;
            let recs = tensor::decode_combined(&buf)?;
            Ok(recs.len())
        })?;
        read.push(secs);
        records = n;
        let (secs, v) = timed(|| Ok(tensor::TensorFile::open(&path)?.records_owned()?))?;
        owned.push(secs);
        drop(v);
    }
    emit(
        "read-pdiparams",
        &[
            ("records", records.to_string()),
            ("read", secs_json(&read)),
            ("owned", secs_json(&owned)),
            ("mapped", secs_json(&mapped)),
            ("touched", secs_json(&touched)),
        ],
    );
    Ok(())
}

/// memcpy bandwidth (1 GiB, pages pre-faulted) and page-cache read bandwidth of FILE.
fn physical(a: &Args) -> Res<()> {
    let path = PathBuf::from(&a.pos[1]);
    let len = std::fs::metadata(&path)?.len() as usize;
    let n = 1usize << 30;
    let src = vec![1u8; n];
    let mut dst = vec![2u8; n];
    let mut best_copy = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best_copy = best_copy.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&dst);
    }
    drop(src);
    let mut buf = vec![0u8; len];
    let mut best_read = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        File::open(&path)?.read_exact(&mut buf)?;
        best_read = best_read.min(t.elapsed().as_secs_f64());
    }
    let mut best_sha = f64::MAX;
    for _ in 0..3 {
        use sha2::Digest;
        let t = Instant::now();
        std::hint::black_box(sha2::Sha256::digest(&dst[..256 << 20]));
        best_sha = best_sha.min(t.elapsed().as_secs_f64());
    }
    let mut best_crc = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        std::hint::black_box(crc32fast::hash(&dst[..256 << 20]));
        best_crc = best_crc.min(t.elapsed().as_secs_f64());
    }
    emit(
        "physical",
        &[
            (
                "sha256_gbps",
                format!("{:.2}", (256 << 20) as f64 / best_sha / 1e9),
            ),
            (
                "crc32_gbps",
                format!("{:.2}", (256 << 20) as f64 / best_crc / 1e9),
            ),
            ("memcpy_gbps", format!("{:.2}", n as f64 / best_copy / 1e9)),
            ("read_gbps", format!("{:.2}", len as f64 / best_read / 1e9)),
        ],
    );
    Ok(())
}

/// Every command once on tiny data, in a temp dir (what `cargo test --benches` runs).
fn smoke() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let d = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let run = |v: &[&str]| -> Res<()> {
        let raw: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        dispatch(&parse_args(&raw)?)
    };
    run(&["gen-archive", "L/256", &d("l.mz")])?;
    run(&["gen-st", "L/256", &d("l.st")])?;
    run(&["gen-m", &d("m.mz"), "3", "20"])?;
    run(&["save", "L/256", &d(""), "--reps", "1"])?;
    run(&["load", &d("l.mz"), &d("l.st")])?;
    run(&["view", &d("l.mz"), "--reps", "2"])?;
    run(&["gen-archive", "C100/256", &d("b.mz"), "--tag", "base"])?;
    run(&["append", &d("b.mz"), "C100/512", &d("")])?;
    run(&["tags-standin", &d("m.mz")])?;
    let t = common::tensor(1, &[4, 4]);
    let views: Vec<TensorView<'_>> = vec![t.view(), t.view()];
    let mut f = File::create(d("p.pdiparams"))?;
    tensor::encode_combined(views.iter(), &mut f)?;
    drop(f);
    run(&["read-pdiparams", &d("p.pdiparams")])?;
    Ok(())
}

fn dispatch(a: &Args) -> Res<()> {
    let need = |n: usize| -> Res<()> {
        if a.pos.len() < n + 1 {
            Err(format!("{} needs {n} arguments", a.pos[0]).into())
        } else {
            Ok(())
        }
    };
    match a.pos.first().map(String::as_str) {
        Some("gen-archive") => need(2).and_then(|()| gen_archive(a)),
        Some("gen-m") => need(3).and_then(|()| gen_m(a)),
        Some("gen-st") => need(2).and_then(|()| gen_st(a)),
        Some("save") => need(2).and_then(|()| save(a)),
        Some("load") => need(2).and_then(|()| load(a)),
        Some("view") => need(1).and_then(|()| view(a)),
        Some("append") => need(3).and_then(|()| append(a)),
        Some("tags-standin") => need(1).and_then(|()| tags_standin(a)),
        Some("read-pdiparams") => need(1).and_then(|()| read_pdiparams(a)),
        Some("physical") => need(1).and_then(|()| physical(a)),
        Some("read-url") => need(1).and_then(|()| read_url(a)),
        Some("heads-floor") => need(1).and_then(|()| heads_floor(a)),
        Some(c) => Err(format!("unknown command {c:?}").into()),
        None => smoke(),
    }
}

/// The remote row: `Archive::open_url`, then every tensor of every tag read into owned
/// memory (one at a time, dropped after), as a reader of a served archive would.
fn read_url(a: &Args) -> Res<()> {
    let (secs, (tensors, bytes, largest)) = timed(|| {
        let ar = Archive::open_url(&a.pos[1])?;
        let (mut n, mut total, mut largest) = (0u64, 0u64, 0u64);
        for name in ar.tags().to_vec() {
            let tag = ar.tag(&name)?;
            for p in tag.params() {
                let t = tag.tensor_owned(&p.location)?;
                let len = t.data().len() as u64;
                n += 1;
                total += len;
                largest = largest.max(len);
            }
        }
        Ok((n, total, largest))
    })?;
    emit(
        "read-url",
        &[
            ("secs", format!("{secs:.4}")),
            ("tensors", tensors.to_string()),
            ("bytes", bytes.to_string()),
            ("largest", largest.to_string()),
        ],
    );
    Ok(())
}

/// P5 without a summary: the floor of what listing the tags must read beyond the central
/// directory that `zipinfo -1` reads: every entry's local header and the first 64 bytes of
/// its data (a tensor record's header, which holds the dtype), read with one `pread` each
/// (entry positions found beforehand by the zip crate), on one thread and split over two;
/// and the same bytes touched through a map of the file. Best of --reps, in this process.
fn heads_floor(a: &Args) -> Res<()> {
    let arch = PathBuf::from(&a.pos[1]);
    let (dir_len, reads) = {
        let mut z = zip::ZipArchive::new(File::open(&arch)?)?;
        let mut reads = Vec::new();
        for i in 0..z.len() {
            let e = z.by_index_raw(i)?;
            let start = e.header_start();
            let data = e.data_start().unwrap_or(start + 30);
            reads.push((start, (data - start) as usize + 64));
        }
        let len = std::fs::metadata(&arch)?.len();
        (len - z.central_directory_start(), reads)
    };
    let read_all = |f: &File, part: &[(u64, usize)]| -> Res<u64> {
        let mut buf = vec![0u8; 1 << 16];
        let mut sum = 0u64;
        for &(at, n) in part {
            let n = n.min(buf.len());
            let got = std::os::unix::fs::FileExt::read_at(f, &mut buf[..n], at)?;
            sum = sum.wrapping_add(u64::from(buf[got.saturating_sub(1)]));
        }
        Ok(sum)
    };
    let (mut one, mut two, mut mapped, mut zip_open) = (vec![], vec![], vec![], vec![]);
    let mut check = 0u64;
    for _ in 0..a.reps.max(1) {
        // For scale: the zip crate's open (the directory parsed, a name map built).
        let t = Instant::now();
        let z = zip::ZipArchive::new(File::open(&arch)?)?;
        check = check.wrapping_add(z.len() as u64);
        drop(z);
        zip_open.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let f = File::open(&arch)?;
        let len = f.metadata()?.len();
        let mut dir = vec![0u8; dir_len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut dir, len - dir_len)?;
        check = check.wrapping_add(read_all(&f, &reads)?);
        one.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let f = File::open(&arch)?;
        let mut dir = vec![0u8; dir_len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut dir, len - dir_len)?;
        let (x, y) = reads.split_at(reads.len() / 2);
        let sums = std::thread::scope(|s| {
            let h = s.spawn(|| read_all(&f, y).map_err(|e| e.to_string()));
            let mine = read_all(&f, x).map_err(|e| e.to_string());
            (mine, h.join().unwrap_or_else(|_| Err("thread".into())))
        });
        check = check.wrapping_add(sums.0?).wrapping_add(sums.1?);
        two.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let f = File::open(&arch)?;
        // Safety: a bench reading a file nothing else writes while it runs.
        let map = unsafe { memmap2::Mmap::map(&f)? };
        for &(at, n) in &reads {
            let end = (at as usize + n).min(map.len());
            check = check.wrapping_add(u64::from(map[at as usize]) + u64::from(map[end - 1]));
        }
        drop(map);
        mapped.push(t.elapsed().as_secs_f64());
    }
    emit(
        "heads-floor",
        &[
            ("entries", reads.len().to_string()),
            ("one_thread", secs_json(&one)),
            ("two_threads", secs_json(&two)),
            ("mapped", secs_json(&mapped)),
            ("zip_crate_open", secs_json(&zip_open)),
            ("check", check.to_string()),
        ],
    );
    Ok(())
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench, `cargo test --benches` nothing: both mean the smoke run.
    let raw: Vec<String> = raw.into_iter().filter(|s| s != "--bench").collect();
    let r = parse_args(&raw).and_then(|a| dispatch(&a));
    if let Err(e) = r {
        eprintln!("peer: {e}");
        std::process::exit(2);
    }
}
