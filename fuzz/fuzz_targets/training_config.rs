//! trainingConfig.fb: verify + decode never panics; an accepted config encodes,
//! decodes back equal, and re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::TrainingConfig;

fuzz_target!(|data: &[u8]| {
    let c = match TrainingConfig::decode(data) {
        Ok(c) => c,
        Err(e) => return drop(e.to_string()),
    };
    let _ = (c.hyper_parameter("beta1"), c.hyper_parameter(""));
    let bytes = c.encode().expect("decoded config does not encode");
    let back = TrainingConfig::decode(&bytes).expect("re-encoded config does not decode");
    // Debug strings compare NaN hyper-parameters equal (they are kept bit for bit).
    assert_eq!(format!("{back:?}"), format!("{c:?}"), "encode → decode changed the config");
    assert_eq!(back.encode().unwrap(), bytes, "encoding is not a fixed point");
});
