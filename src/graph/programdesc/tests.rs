use super::common::count_items;
use super::*;
use crate::error::ErrorKind;

#[test]
fn item_count_from_the_wire_matches_the_decoded_program() {
    for v in ["2.6.2", "3.3.1"] {
        for m in ["mlp", "conv"] {
            let path = format!(
                "{}/tests/fixtures/paddle/{v}/{m}.pdmodel",
                env!("CARGO_MANIFEST_DIR")
            );
            let bytes = std::fs::read(&path).unwrap();
            let g = decode(&bytes).unwrap();
            let want: usize = g.blocks.iter().map(|b| b.vars.len() + b.ops.len()).sum();
            assert_eq!(count_items(&bytes), want as u64, "{path}");
        }
    }
}

#[test]
fn a_program_of_too_many_tiny_ops_is_refused_before_decoding() {
    // One block of MAX_PROGRAM_ITEMS + 1 empty ops (2 bytes each on the wire).
    let ops = [0x22u8, 0x00].repeat(MAX_PROGRAM_ITEMS as usize + 1);
    let mut block = vec![0x08, 0x00, 0x10, 0x00];
    block.extend_from_slice(&ops);
    let mut program = vec![0x0a];
    let mut len = block.len();
    while len >= 0x80 {
        program.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    program.push(len as u8);
    program.extend_from_slice(&block);
    let e = decode(&program).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::LimitExceeded { size, .. } if *size == MAX_PROGRAM_ITEMS + 1),
        "{e}"
    );
}
