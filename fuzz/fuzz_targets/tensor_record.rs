//! One standalone LoDTensor record: decode never panics, and whatever it accepts
//! survives encode → decode unchanged (the encoding is canonical from then on).
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::tensor::{decode_tensor, encode_tensor, encoded_len};

fuzz_target!(|data: &[u8]| {
    let t = match decode_tensor(data) {
        Ok(t) => t,
        Err(e) => return drop(e.to_string()),
    };
    let _ = (t.to_f32_vec(), t.numel(), t.to_owned());
    assert!(data.ends_with(t.data()), "tensor data is not the tail of the record");
    let mut once = Vec::new();
    encode_tensor(&t, &mut once).unwrap();
    assert_eq!(once.len() as u64, encoded_len(&t));
    let back = decode_tensor(&once).expect("re-encoded record does not decode");
    assert_eq!(back, t, "decode(encode(decode(x))) != decode(x)");
    let mut twice = Vec::new();
    encode_tensor(&back, &mut twice).unwrap();
    assert_eq!(twice, once, "encoding is not a fixed point");
});
