//! graph.fb (FlatBuffers): verify + decode never panics; an accepted graph re-encodes
//! to a fixed point and renders. If it has a ProgramDesc form, that form decodes to the
//! same graph up to the flags a kind implies (docs/GRAPH.md: writing a ProgramDesc adds
//! them when unset) and is itself a fixed point.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::dump;
use modelzip::graph::VarKind;
use modelzip::Graph;

/// `g` with every variable's implied flags filled in, as the ProgramDesc encoder does.
fn implied(g: &Graph) -> Graph {
    let mut g = g.clone();
    let Some(p) = g.program_mut() else { return g };
    for v in p.blocks.iter_mut().flat_map(|b| b.vars.iter_mut()) {
        match v.kind {
            VarKind::Placeholder => drop(v.need_check_feed.get_or_insert(true)),
            VarKind::Parameter => drop((v.persistable.get_or_insert(true), v.is_parameter.get_or_insert(true))),
            VarKind::Constant => drop(v.persistable.get_or_insert(true)),
            _ => {}
        }
    }
    g
}

fuzz_target!(|data: &[u8]| {
    let g = match Graph::decode(GraphFormat::FlatBuffers, data) {
        Ok(g) => g,
        Err(e) => return drop(e.to_string()),
    };
    // Debug strings compare NaN attributes equal (they are kept bit for bit).
    let same = |a: &Graph, b: &Graph| format!("{a:?}") == format!("{b:?}");
    let fb = g.encode(GraphFormat::FlatBuffers).expect("decoded graph does not encode");
    let g2 = Graph::decode(GraphFormat::FlatBuffers, &fb).expect("re-encoded graph.fb does not decode");
    assert!(same(&g, &g2), "graph.fb → Graph → graph.fb changed the graph");
    assert_eq!(g2.encode(GraphFormat::FlatBuffers).unwrap(), fb, "graph.fb encoding is not a fixed point");
    let _ = (dump::text(&g), dump::json(&g));
    // Not every graph.fb graph has a ProgramDesc form; those that do must survive it.
    if let Ok(pd) = g.encode(GraphFormat::ProgramDesc) {
        let g3 = Graph::decode(GraphFormat::ProgramDesc, &pd).expect("ProgramDesc of a decoded graph does not decode");
        assert!(same(&implied(&g), &g3), "graph.fb → ProgramDesc → Graph changed the graph");
        assert_eq!(g3.encode(GraphFormat::ProgramDesc).unwrap(), pd, "ProgramDesc encoding is not a fixed point");
    }
});
