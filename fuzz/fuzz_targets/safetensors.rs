//! Raw bytes as a safetensors file: `read_safetensors` never panics; an accepted file's
//! tensors tile its data region in offset order, each view is exactly its bytes of the
//! input with dtype × dims of them; `looks_like_safetensors` says yes to it; a canonical
//! header renders back to itself, and the file survives import → export byte for byte.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::interop::safetensors::{export_safetensors_bytes, import_safetensors, looks_like_safetensors, read_safetensors};
use modelzip::interop::{ImportOptions};
use modelzip::{Archive, WriteOptions};

fuzz_target!(|data: &[u8]| {
    let f = match read_safetensors(data) {
        Ok(f) => f,
        Err(e) => return drop(e.to_string()),
    };
    assert!(looks_like_safetensors(data));
    let n = f.header.len();
    assert_eq!(f.header, &data[8..8 + n]);
    let body = &data[8 + n..];
    let mut at = 0u64;
    for t in &f.tensors {
        assert_eq!(t.begin, at, "{}", t.name);
        assert_eq!(t.view.data(), &body[t.begin as usize..t.end as usize]);
        assert_eq!(
            modelzip::tensor::data_len(t.view.dtype(), t.view.dims()).unwrap(),
            t.end - t.begin
        );
        at = t.end;
    }
    assert_eq!(at, body.len() as u64);
    // An empty name is valid safetensors but not a parameter name: import refuses it.
    if !f.header_is_canonical().unwrap() || f.tensors.iter().any(|t| t.name.is_empty()) {
        return;
    }
    // Through an archive and back: the same bytes.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let input = dir.path().join("in.safetensors");
    std::fs::write(&input, data).unwrap();
    let archive = dir.path().join("a.zip");
    let opts = ImportOptions {
        write: WriteOptions {
            fsync: false,
            ..WriteOptions::default()
        },
        ..ImportOptions::default()
    };
    let r = import_safetensors(&archive, "t", &[input], &opts).unwrap();
    assert!(r.exact_export);
    let a = Archive::open(&archive).unwrap();
    assert_eq!(export_safetensors_bytes(&a.tag("t").unwrap()).unwrap(), data);
});
