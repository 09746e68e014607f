//! graph.pdmodel (Paddle ProgramDesc protobuf): decode never panics; an accepted
//! program re-encodes to a fixed point, converts to graph.fb and back unchanged, and
//! renders as text, JSON and pbtxt.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::Graph;
use modelzip::dump;

fuzz_target!(|data: &[u8]| {
    let g = match Graph::decode(GraphFormat::ProgramDesc, data) {
        Ok(g) => g,
        Err(e) => return drop(e.to_string()),
    };
    // Debug strings compare NaN attributes equal (they are kept bit for bit).
    let same = |a: &Graph, b: &Graph| format!("{a:?}") == format!("{b:?}");
    let pd = g.encode(GraphFormat::ProgramDesc).expect("decoded graph does not encode");
    let g2 = Graph::decode(GraphFormat::ProgramDesc, &pd).expect("re-encoded ProgramDesc does not decode");
    assert!(same(&g, &g2), "ProgramDesc → Graph → ProgramDesc changed the graph");
    assert_eq!(g2.encode(GraphFormat::ProgramDesc).unwrap(), pd, "ProgramDesc encoding is not a fixed point");
    let fb = g.encode(GraphFormat::FlatBuffers).expect("decoded graph does not encode as graph.fb");
    let g3 = Graph::decode(GraphFormat::FlatBuffers, &fb).expect("graph.fb of a decoded graph does not decode");
    assert!(same(&g, &g3), "ProgramDesc → graph.fb → Graph changed the graph");
    assert_eq!(g3.encode(GraphFormat::ProgramDesc).unwrap(), pd, "graph.fb round trip changed the ProgramDesc");
    let _ = (dump::text(&g), dump::json(&g));
    dump::pbtxt(data).expect("accepted ProgramDesc has no pbtxt");
});
