//! A Paddle PIR JSON program (`<prefix>.json`): `graph::pir::parse` never panics and
//! stays within its limits; what parses has a consistent parameter list (strictly
//! sorted by name bytes, so unique; dtype and dims both known or both unknown; no more
//! parameters than ops) and op counts that add up to the op count. Wrapped as a graph.fb
//! PirGraph it encodes, decodes through the graph.fb reader to the same bytes and
//! program, re-encodes to a fixed point, and the listings succeed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::Graph;
use modelzip::dump;
use modelzip::graph::pir;

fuzz_target!(|data: &[u8]| {
    let _ = pir::looks_like_pir(data);
    let p = match pir::parse(data) {
        Ok(p) => p,
        Err(e) => return drop(e.to_string()),
    };
    assert_eq!(
        p.op_counts.values().sum::<usize>(),
        p.ops,
        "op counts do not add up"
    );
    assert!(p.params.len() <= p.ops, "more parameters than ops");
    for w in p.params.windows(2) {
        assert!(
            w[0].name.as_bytes() < w[1].name.as_bytes(),
            "parameters not strictly sorted by name bytes: {:?}, {:?}",
            w[0].name,
            w[1].name
        );
    }
    for q in &p.params {
        assert_eq!(
            q.dtype.is_some(),
            q.dims.is_some(),
            "{q:?}: dtype and dims disagree"
        );
    }
    let g = Graph::from_pir_json(data).expect("parsed program does not make a graph");
    let fb = g
        .encode(GraphFormat::FlatBuffers)
        .expect("PIR graph does not encode as graph.fb");
    let g2 = Graph::decode(GraphFormat::FlatBuffers, &fb).expect("graph.fb of a PIR graph does not decode");
    let pir2 = g2.pir.as_ref().expect("graph.fb lost the PIR program");
    assert_eq!(pir2.json, data, "graph.fb changed the PIR bytes");
    assert_eq!(pir2.program().expect("PIR program no longer parses"), p);
    assert_eq!(
        g2.encode(GraphFormat::FlatBuffers).unwrap(),
        fb,
        "graph.fb encoding is not a fixed point"
    );
    let _ = (dump::text(&g2), dump::json(&g2));
});
