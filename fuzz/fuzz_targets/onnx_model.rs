//! ONNX ModelProto bytes: decoding never panics or allocates past the limits; a model
//! that splits into graph.fb + parameters joins back to the same message, its graph.fb
//! decodes to the same graph, and the listings succeed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::TensorData;
use modelzip::interop::onnx;
use modelzip::{Graph, Tensor};
use prost::Message;
use std::collections::HashMap;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = onnx::decode_model(data) else {
        return;
    };
    let before = m.encode_to_vec();
    // No directory: external data is refused, nothing outside the input is read.
    let Ok((g, params)) = onnx::split_model(m, None) else {
        return;
    };
    let params: HashMap<String, Tensor> = params
        .iter()
        .map(|p| {
            let t = modelzip::TensorView::new(p.dtype, p.dims.clone(), Vec::new(), &p.data)
                .unwrap();
            (p.name.clone(), t.to_owned())
        })
        .collect();
    let back = onnx::join_model(&g, |name| Ok(TensorData::Owned(params[name].clone())), None)
        .expect("a split model joins back");
    assert_eq!(back.encode_to_vec(), before);
    let graph = Graph::Onnx(g);
    let fb = graph.encode(GraphFormat::FlatBuffers).unwrap();
    assert_eq!(Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap(), graph);
    let _ = modelzip::dump::text(&graph);
    let _ = modelzip::dump::json(&graph);
});
