//! Round trips of real Paddle programs and synthetic graphs through both encodings.

use modelzip::graph::{Graph, GraphFormat};
use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle");
    let mut out = Vec::new();
    for version in std::fs::read_dir(&root).unwrap() {
        for f in std::fs::read_dir(version.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "pdmodel") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn paddle_fixtures_round_trip_byte_for_byte() {
    let files = fixtures();
    assert!(files.len() >= 4, "fixtures missing: {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let g =
            Graph::from_programdesc(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(g.to_programdesc().unwrap(), bytes, "{}", path.display());
        let fb = g.to_flatbuffers().unwrap();
        let back = Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap();
        assert_eq!(back, g, "{}", path.display());
        assert_eq!(back.to_programdesc().unwrap(), bytes, "{}", path.display());
    }
}
