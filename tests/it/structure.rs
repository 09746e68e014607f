//! The shape of the source tree, checked: the layers point one way (the graph model and
//! its two encodings under src/graph never reach into src/interop, the formats above
//! them), and each foreign format lives in one folder (its protobuf types and its files
//! are there and nowhere else). A change that breaks either fails here, naming the file
//! and line.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Lines of code (comments left out) of `file` that contain `needle`, as `file:line`.
fn code_lines_with(file: &Path, needle: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//") && l.contains(needle))
        .map(|(i, l)| format!("{}:{}: {}", file.display(), i + 1, l.trim()))
        .collect()
}

#[test]
fn graph_never_imports_interop() {
    let files = rust_files(&src().join("graph"));
    assert!(files.len() > 10, "src/graph has {} files", files.len());
    let bad: Vec<String> = files
        .iter()
        .flat_map(|f| code_lines_with(f, "interop"))
        .collect();
    assert!(
        bad.is_empty(),
        "src/graph must not use src/interop (the layer above it):\n{}",
        bad.join("\n")
    );
}

/// The check above finds what it is for: a line that names the interop layer.
#[test]
fn the_layer_check_sees_an_import() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.rs");
    std::fs::write(
        &f,
        "// interop in a comment is fine\nuse crate::interop::tf;\n",
    )
    .unwrap();
    assert_eq!(code_lines_with(&f, "interop").len(), 1);
}

#[test]
fn each_foreign_format_lives_in_its_folder() {
    let interop = src().join("interop");
    // (a format's protobuf module, its folder, words its file names use)
    let formats = [
        ("tf_proto", "tf", &["tf", "saved_model", "graphdef"][..]),
        ("onnx_proto", "onnx", &["onnx"][..]),
    ];
    let mut bad = Vec::new();
    for file in rust_files(&src()) {
        let rel = file
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for (proto, folder, words) in formats {
            let home = interop.join(folder);
            if file.starts_with(&home) || rel == "lib.rs" {
                continue;
            }
            bad.extend(code_lines_with(&file, proto));
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            let parts: Vec<&str> = rel.trim_end_matches(".rs").split(['/', '_']).collect();
            if words.iter().any(|w| parts.contains(w) || stem == *w) {
                bad.push(format!(
                    "{rel}: a {folder} file outside src/interop/{folder}/"
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "a foreign format's code belongs in its folder under src/interop/:\n{}",
        bad.join("\n")
    );
    for folder in ["tf", "onnx", "paddle"] {
        assert!(
            interop.join(folder).join("mod.rs").is_file(),
            "src/interop/{folder}/mod.rs"
        );
    }
}
