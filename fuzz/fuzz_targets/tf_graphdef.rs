//! TensorFlow GraphDef bytes (binary, and as text when UTF-8): decoding never panics or
//! allocates past the limits; a GraphDef that splits into graph + parameters joins back
//! to the same message, and its graph.fb decodes to the same graph.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::TensorData;
use modelzip::interop::tf;
use modelzip::{Graph, Tensor};
use prost::Message;
use std::collections::HashMap;

fn check(g: modelzip::tf_proto::GraphDef) {
    let before = g.encode_to_vec();
    let Ok(split) = tf::split_graphdef(g) else {
        return;
    };
    let params: HashMap<String, Tensor> = split
        .params
        .iter()
        .map(|(n, d, dims, data)| {
            let t = modelzip::TensorView::new(*d, dims.clone(), Vec::new(), data).unwrap();
            (n.clone(), t.to_owned())
        })
        .collect();
    let back = tf::join_graphdef(&split.graph, |name| {
        Ok(TensorData::Owned(params[name].clone()))
    })
    .expect("a split GraphDef joins back");
    assert_eq!(back.encode_to_vec(), before);
    let graph = Graph::Tf(split.graph);
    let fb = graph.encode(GraphFormat::FlatBuffers).unwrap();
    assert_eq!(Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap(), graph);
    let _ = tf::graphdef_to_text(&back);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = tf::decode_graphdef(data) {
        check(g);
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(g) = tf::parse_graphdef_text(text)
    {
        check(g);
    }
});
