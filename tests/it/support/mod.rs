//! Helpers shared by the tests: sample tags and checks by independent tools (here), a
//! local HTTP server ([`http_server`]) and peak-RSS measurement ([`rss`]).

use modelzip::internals::decode_record_at;
use modelzip::{GraphFormat, Tag, TagBuilder, Tensor};
use std::path::Path;
use std::process::Command;

#[cfg(feature = "remote")]
pub mod http_server;
pub mod rss;
/// Deterministic pseudo-random f32 values.
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 40) as f32 / 65536.0
        })
        .collect()
}

/// A small ProgramDesc (`.pdmodel` bytes) that decodes: x -> matmul with fc.w -> y.
pub fn sample_graph() -> Vec<u8> {
    use modelzip::DType;
    use modelzip::Graph;
    use modelzip::graph::{Op, Var, VarKind};
    let mut g = Graph::from(modelzip::graph::Program::default());
    let main = &mut g.prog_mut().blocks[0];
    main.vars.push(Var::new(
        "x",
        VarKind::Placeholder,
        DType::Fp32,
        vec![-1, 16],
    ));
    main.vars.push(Var::new(
        "fc.w",
        VarKind::Parameter,
        DType::Fp32,
        vec![16, 8],
    ));
    main.vars
        .push(Var::new("y", VarKind::Variable, DType::Fp32, vec![-1, 8]));
    main.ops.push(
        Op::new("mm", "matmul_v2")
            .input("X", &["x"])
            .input("Y", &["fc.w"])
            .output("Out", &["y"]),
    );
    g.encode(GraphFormat::ProgramDesc).unwrap()
}

/// A tag with a graph, params of several dtypes (one with LoD), updater state,
/// a training config and an unknown extra entry. `seed` varies the weights; the bias
/// and embedding are the same for every seed (so tags share them).
pub fn sample_tag(name: &str, seed: u64) -> TagBuilder {
    let w = Tensor::from_slice(vec![16, 8], &values(seed, 128)).unwrap();
    let b = Tensor::from_slice(vec![8], &values(7, 8)).unwrap();
    let emb = Tensor::from_slice(vec![5, 2], &[0i64, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        .unwrap()
        .with_lod(vec![vec![0, 2, 5]])
        .unwrap();
    let scalar = Tensor::from_slice(vec![], &[seed as f64]).unwrap();
    let h = Tensor::from_slice(vec![3], &[half::f16::from_f32(1.5); 3]).unwrap();
    let m = Tensor::from_slice(vec![16, 8], &values(seed + 100, 128)).unwrap();
    let v = Tensor::from_slice(vec![16, 8], &values(seed + 200, 128)).unwrap();
    TagBuilder::new(name)
        .graph(GraphFormat::ProgramDesc, sample_graph())
        .param("fc.w", w)
        .param("fc.b", b)
        .param("my param%/emb", emb)
        .param("step", scalar)
        .param("half", h)
        .updater("fc.w", vec![m, v])
        .training_config(sample_training_config())
        .extra_entry("notes/readme.md", b"kept by every copy".to_vec())
}

/// Every tensor of `tag` as (name, dtype, dims, lod, bytes), params then updater.
/// (name, dtype, dims, lod, data) of one tensor.
pub type Dumped = (String, String, Vec<u64>, Vec<Vec<u64>>, Vec<u8>);

pub fn dump(tag: &Tag<'_>) -> Vec<Dumped> {
    let mut out = Vec::new();
    for p in tag.params() {
        let t = tag.tensor(&p.location).unwrap();
        let v = t.view();
        out.push((
            p.name.clone(),
            v.dtype().to_string(),
            v.dims().to_vec(),
            v.lod().clone(),
            v.data().to_vec(),
        ));
    }
    for u in tag.updater() {
        for (i, a) in u.arrays.iter().enumerate() {
            let t = tag.tensor(a).unwrap();
            let v = t.view();
            out.push((
                format!("{}#{i}", u.name),
                v.dtype().to_string(),
                v.dims().to_vec(),
                v.lod().clone(),
                v.data().to_vec(),
            ));
        }
    }
    out
}

/// `unzip -t` (when installed) and Python's zipfile.testzip() both accept the archive.
pub fn external_tools_accept(path: &Path) {
    if Command::new("unzip").arg("-v").output().is_ok() {
        let out = Command::new("unzip").arg("-tq").arg(path).output().unwrap();
        assert!(
            out.status.success(),
            "unzip -t failed on {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nbad = z.testzip()\nassert bad is None, bad\nfor i in z.infolist():\n    z.read(i)\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python zipfile failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads local headers with the zip crate's directory and our own parsing of the local
/// header, and checks every stored tensor's raw data starts at a multiple of 64.
/// Returns how many tensors were checked.
pub fn assert_tensor_data_aligned(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes.clone())).unwrap();
    let mut checked = 0;
    for i in 0..z.len() {
        let f = z.by_index_raw(i).unwrap();
        let name = f.name().unwrap().to_string();
        if !name.ends_with(".lodtensor") {
            continue;
        }
        let h = f.header_start() as usize;
        assert_eq!(&bytes[h..h + 4], b"PK\x03\x04", "{name}");
        let n = u16::from_le_bytes([bytes[h + 26], bytes[h + 27]]) as usize;
        let m = u16::from_le_bytes([bytes[h + 28], bytes[h + 29]]) as usize;
        let data = h + 30 + n + m;
        let size = f.compressed_size() as usize;
        let rec = decode_record_at(&bytes[data..data + size], 0, 0).unwrap();
        let raw = data as u64 + rec.data_offset;
        assert_eq!(raw % 64, 0, "{name}: raw data at {raw}");
        checked += 1;
    }
    checked
}

/// Names of files in `dir` other than the archive and its lock file.
pub fn stray_files(dir: &Path, archive: &Path) -> Vec<String> {
    let lock = format!("{}.lock", archive.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| *n != archive.file_name().unwrap().to_string_lossy() && *n != lock)
        .collect()
}

/// How many entries of `dir` are not a writer's lock file (`*.lock`, never deleted: a
/// download holds one too).
pub fn left_but_the_lock(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".lock")
        })
        .count()
}

/// A real trainingConfig.fb (Adam with its state arrays m, v).
pub fn sample_training_config() -> Vec<u8> {
    let mut c = modelzip::TrainingConfig::sgd(0.1);
    c.updater = "adam".into();
    c.updater_state = vec!["m".into(), "v".into()];
    c.encode().unwrap()
}

/// A tag's graph (file name, bytes) and trainingConfig.fb bytes.
pub type DumpedFiles = (Option<(String, Vec<u8>)>, Option<Vec<u8>>);

/// The graph (encoding, bytes) and trainingConfig.fb of `tag`, as readers resolve them
/// (its own, or the ones shared.txt points at).
pub fn dump_files(tag: &Tag<'_>) -> DumpedFiles {
    let graph = tag
        .graph()
        .unwrap()
        .map(|(e, b)| (e.file_name().to_string(), b.into_owned()));
    let tc = tag.training_config().unwrap().map(|b| b.into_owned());
    (graph, tc)
}

/// Write options of the tests: no fsync (they check what is written, not durability).
pub fn write_opts() -> modelzip::WriteOptions {
    modelzip::WriteOptions {
        fsync: false,
        ..modelzip::WriteOptions::default()
    }
}

/// Import options of the tests: in place, no fsync.
pub fn import_opts() -> modelzip::interop::ImportOptions {
    modelzip::interop::ImportOptions {
        write: write_opts(),
        ..modelzip::interop::ImportOptions::default()
    }
}

/// Export options of the tests: existing files refused, no fsync.
pub fn export_opts() -> modelzip::interop::ExportOptions {
    modelzip::interop::ExportOptions {
        fsync: false,
        ..modelzip::interop::ExportOptions::default()
    }
}

/// The program of a graph the test built or decoded as one (a test fails loudly on
/// any other kind).
pub trait ProgramOf {
    fn prog(&self) -> &modelzip::graph::Program;
    fn prog_mut(&mut self) -> &mut modelzip::graph::Program;
}

impl ProgramOf for modelzip::Graph {
    fn prog(&self) -> &modelzip::graph::Program {
        self.program()
            .unwrap_or_else(|| panic!("expected a program, got {}", self.kind_name()))
    }
    fn prog_mut(&mut self) -> &mut modelzip::graph::Program {
        let kind = self.kind_name();
        self.program_mut()
            .unwrap_or_else(|| panic!("expected a program, got {kind}"))
    }
}
