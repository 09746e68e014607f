//! A TensorFlow checkpoint index (`variables.index` of a SavedModel): parsing never
//! panics or allocates past the limits; an index that parses writes back to one that
//! parses to the same header and entries.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::interop::saved_model::{parse_index, write_index};

fuzz_target!(|data: &[u8]| {
    let Ok(b) = parse_index(data) else {
        return;
    };
    let again = parse_index(&write_index(&b)).expect("a written index parses");
    assert_eq!(again.header, b.header);
    assert_eq!(again.entries, b.entries);
});
