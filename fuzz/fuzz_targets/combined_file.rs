//! A combined file (save_combine, .pdiparams): decode never panics; accepted
//! records tile the input exactly and survive encode → decode unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::tensor::{data_len, decode_combined, decode_tensor, encode_combined, encode_tensor};

fuzz_target!(|data: &[u8]| {
    let recs = match decode_combined(data) {
        Ok(r) => r,
        Err(e) => return drop(e.to_string()),
    };
    let mut pos = 0u64;
    for (i, r) in recs.iter().enumerate() {
        assert_eq!((r.index, r.offset), (i, pos), "records do not tile the input");
        assert!(r.length > 0 && r.offset < r.data_offset && r.data_offset <= r.offset + r.length);
        let n = data_len(r.tensor.dtype(), r.tensor.dims()).unwrap();
        assert_eq!(r.data_offset + n, r.offset + r.length, "data does not end the record");
        assert_eq!(&data[r.data_offset as usize..][..n as usize], r.tensor.data());
        let mut one = Vec::new();
        encode_tensor(&r.tensor, &mut one).unwrap();
        assert_eq!(decode_tensor(&one).expect("re-encoded record does not decode"), r.tensor);
        pos += r.length;
    }
    assert_eq!(pos, data.len() as u64, "records do not cover the input");
    let mut all = Vec::new();
    encode_combined(recs.iter().map(|r| &r.tensor), &mut all).unwrap();
    let again = decode_combined(&all).expect("re-encoded file does not decode");
    assert!(again.iter().map(|r| &r.tensor).eq(recs.iter().map(|r| &r.tensor)));
});
