//! graph.pdmodel (Paddle ProgramDesc protobuf): decode never panics; an accepted
//! program re-encodes to a fixed point, converts to graph.fb and back unchanged, and
//! renders as text, JSON and pbtxt.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::Graph;
use modelzip::dump;

fuzz_target!(|data: &[u8]| {
    let g = match Graph::from_programdesc(data) {
        Ok(g) => g,
        Err(e) => return drop(e.to_string()),
    };
    // Debug strings compare NaN attributes equal (they are kept bit for bit).
    let same = |a: &Graph, b: &Graph| format!("{a:?}") == format!("{b:?}");
    let pd = g.to_programdesc().expect("decoded graph does not encode");
    let g2 = Graph::from_programdesc(&pd).expect("re-encoded ProgramDesc does not decode");
    assert!(same(&g, &g2), "ProgramDesc → Graph → ProgramDesc changed the graph");
    assert_eq!(g2.to_programdesc().unwrap(), pd, "ProgramDesc encoding is not a fixed point");
    let fb = g.to_flatbuffers().expect("decoded graph does not encode as graph.fb");
    let g3 = Graph::from_flatbuffers(&fb).expect("graph.fb of a decoded graph does not decode");
    assert!(same(&g, &g3), "ProgramDesc → graph.fb → Graph changed the graph");
    assert_eq!(g3.to_programdesc().unwrap(), pd, "graph.fb round trip changed the ProgramDesc");
    let _ = (dump::text(&g), dump::json(&g));
    dump::pbtxt(data).expect("accepted ProgramDesc has no pbtxt");
});
