//! Compiles Paddle's ProgramDesc contract (schemas/paddle/framework.proto) with
//! prost-build, using protox as the protobuf compiler so no system `protoc` is needed.

fn main() {
    let proto = "schemas/paddle/framework.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["schemas/paddle"])
        .unwrap_or_else(|e| panic!("cannot compile {proto}: {e}"));
    let out =
        std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    std::fs::write(
        out.join("framework_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )
    .expect("write descriptor set");
    prost_build::Config::new()
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("cannot generate Rust for {proto}: {e}"));
}
