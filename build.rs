//! Compiles the protobuf contracts with prost-build, using protox as the protobuf
//! compiler so no system `protoc` is needed:
//! - Paddle's ProgramDesc (schemas/paddle/framework.proto);
//! - TensorFlow's GraphDef and what it imports (schemas/tensorflow/tensorflow/core/
//!   framework/*.proto), with maps as BTreeMaps so encoding is deterministic;
//! - ONNX's ModelProto (schemas/onnx/onnx.proto, proto2: optional fields keep presence).

fn out_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"))
}

fn paddle() {
    let proto = "schemas/paddle/framework.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["schemas/paddle"])
        .unwrap_or_else(|e| panic!("cannot compile {proto}: {e}"));
    std::fs::write(
        out_dir().join("framework_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )
    .expect("write descriptor set");
    prost_build::Config::new()
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("cannot generate Rust for {proto}: {e}"));
}

fn tensorflow() {
    let root = "schemas/tensorflow";
    println!("cargo:rerun-if-changed={root}");
    let proto = "tensorflow/core/framework/graph.proto";
    let fds = protox::compile([proto], [root])
        .unwrap_or_else(|e| panic!("cannot compile {root}/{proto}: {e}"));
    std::fs::write(
        out_dir().join("tensorflow_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )
    .expect("write descriptor set");
    prost_build::Config::new()
        .btree_map(["."])
        // Decoded from a mapped file as slices of it, not copies (interop::tf).
        .bytes([".tensorflow.TensorProto.tensor_content"])
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("cannot generate Rust for {root}/{proto}: {e}"));
}

fn onnx() {
    let proto = "schemas/onnx/onnx.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["schemas/onnx"])
        .unwrap_or_else(|e| panic!("cannot compile {proto}: {e}"));
    std::fs::write(
        out_dir().join("onnx_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )
    .expect("write descriptor set");
    prost_build::Config::new()
        // Decoded from a mapped file as slices of it, not copies (interop::onnx).
        .bytes([".onnx.TensorProto.raw_data"])
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("cannot generate Rust for {proto}: {e}"));
}

fn main() {
    paddle();
    tensorflow();
    onnx();
}
