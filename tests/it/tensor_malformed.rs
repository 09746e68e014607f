//! Hand-made malformed LoDTensor records, each asserted to give its specific error
//! with the record index and the byte offset of the bad field.

use modelzip::tensor;
use modelzip::{DType, ErrorKind, Tensor};

/// Builds a record field by field so each test can break exactly one thing.
struct Rec {
    version: u32,
    lod: Vec<Vec<u64>>,
    lod_level_override: Option<u64>,
    lod_nbytes_override: Option<u64>,
    tversion: u32,
    desc: Vec<u8>,
    desc_size_override: Option<i32>,
    data: Vec<u8>,
}

/// TensorDesc bytes: data_type then each dim unpacked, as Paddle writes them.
fn desc(dtype: i64, dims: &[i64]) -> Vec<u8> {
    let mut d = vec![0x08];
    varint(&mut d, dtype as u64);
    for &x in dims {
        d.push(0x10);
        varint(&mut d, x as u64);
    }
    d
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

impl Rec {
    fn fp32(dims: &[i64], n: usize) -> Rec {
        Rec {
            version: 0,
            lod: vec![],
            lod_level_override: None,
            lod_nbytes_override: None,
            tversion: 0,
            desc: desc(5, dims),
            desc_size_override: None,
            data: vec![0u8; n * 4],
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.version.to_le_bytes());
        let level = self.lod_level_override.unwrap_or(self.lod.len() as u64);
        b.extend_from_slice(&level.to_le_bytes());
        for l in &self.lod {
            let n = self.lod_nbytes_override.unwrap_or(8 * l.len() as u64);
            b.extend_from_slice(&n.to_le_bytes());
            for o in l {
                b.extend_from_slice(&o.to_le_bytes());
            }
        }
        b.extend_from_slice(&self.tversion.to_le_bytes());
        let size = self.desc_size_override.unwrap_or(self.desc.len() as i32);
        b.extend_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&self.desc);
        b.extend_from_slice(&self.data);
        b
    }
}

/// Decodes `bytes` as a single-record file and returns the error.
fn err(bytes: &[u8]) -> modelzip::Error {
    match tensor::decode_tensor(bytes) {
        Ok(t) => panic!("expected an error, decoded {t:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_well_formed_record_decodes() {
    let r = Rec::fp32(&[2, 3], 6);
    let bytes = r.bytes();
    let t = tensor::decode_tensor(&bytes).unwrap();
    assert_eq!(t.dims(), &[2, 3]);
}

#[test]
fn empty_input_is_truncated_version() {
    let e = err(&[]);
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated version:"), "{e}");
    assert_eq!(e.location().offset, Some(0));
    assert_eq!(e.location().record, Some(0));
}

#[test]
fn nonzero_version_is_refused() {
    let mut r = Rec::fp32(&[1], 1);
    r.version = 1;
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadVersion(_)), "{e}");
    assert!(
        e.to_string().contains("unsupported LoDTensor version 1 "),
        "{e}"
    );
    assert_eq!(e.location().offset, Some(0));
}

#[test]
fn nonzero_tensor_version_is_refused() {
    let mut r = Rec::fp32(&[1], 1);
    r.tversion = 7;
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadVersion(_)), "{e}");
    assert!(
        e.to_string().contains("unsupported tensor version 7 "),
        "{e}"
    );
    assert_eq!(e.location().offset, Some(12));
}

#[test]
fn trailing_bytes_after_a_single_record() {
    let mut b = Rec::fp32(&[2], 2).bytes();
    let len = b.len() as u64;
    b.extend_from_slice(&[1, 2, 3]);
    let e = err(&b);
    assert!(matches!(e.kind(), ErrorKind::TrailingBytes(3)), "{e}");
    assert_eq!(e.location().offset, Some(len));
}

#[test]
fn truncated_data() {
    let mut b = Rec::fp32(&[4], 4).bytes();
    b.truncate(b.len() - 1);
    let e = err(&b);
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated tensor data:"), "{e}");
    assert!(e.to_string().contains("needs 16 bytes"), "{e}");
    assert!(e.to_string().contains("15 remain"), "{e}");
}

#[test]
fn truncated_lod_offsets() {
    let mut r = Rec::fp32(&[3], 3);
    r.lod = vec![vec![0, 1, 3]];
    let b = r.bytes();
    let e = err(&b[..4 + 8 + 8 + 10]);
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated LoD offsets:"), "{e}");
    assert_eq!(e.location().offset, Some(20));
}

#[test]
fn huge_lod_level_is_refused_before_allocating() {
    let mut r = Rec::fp32(&[1], 1);
    r.lod_level_override = Some(1 << 60);
    let e = err(&r.bytes());
    assert!(
        matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("lod_level 1152921504606846976 is over the limit of 1024")),
        "{e}"
    );
    assert_eq!(e.location().offset, Some(4));
}

#[test]
fn more_lod_levels_than_the_bytes_can_hold() {
    let mut r = Rec::fp32(&[1], 1);
    r.lod_level_override = Some(1000);
    let e = err(&r.bytes());
    // 1000 levels take at least their 8,000 bytes of size words.
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated LoD levels:"), "{e}");
    assert!(e.to_string().contains("needs 8000 bytes"), "{e}");
    assert_eq!(e.location().offset, Some(4));
}

#[test]
fn huge_lod_level_size_is_refused_before_allocating() {
    let mut r = Rec::fp32(&[3], 3);
    r.lod = vec![vec![0, 3]];
    r.lod_nbytes_override = Some(u64::MAX - 7);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated LoD offsets:"), "{e}");
}

#[test]
fn lod_size_not_a_multiple_of_8() {
    let mut r = Rec::fp32(&[3], 3);
    r.lod = vec![vec![0, 3]];
    r.lod_nbytes_override = Some(12);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("multiple of 8")));
    assert_eq!(e.location().offset, Some(12));
}

#[test]
fn negative_desc_size() {
    let mut r = Rec::fp32(&[1], 1);
    r.desc_size_override = Some(-5);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadDescSize(_)), "{e}");
    assert!(e.to_string().contains("invalid TensorDesc size -5 "), "{e}");
    assert_eq!(e.location().offset, Some(16));
}

#[test]
fn desc_size_larger_than_the_rest() {
    let mut r = Rec::fp32(&[1], 1);
    r.desc_size_override = Some(1000);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadDescSize(_)), "{e}");
    assert!(
        e.to_string().contains("invalid TensorDesc size 1000 "),
        "{e}"
    );
    assert!(e.to_string().contains("(8 bytes remain)"), "{e}");
}

#[test]
fn desc_that_does_not_decode() {
    let mut r = Rec::fp32(&[1], 1);
    r.desc = vec![0x08, 0xff, 0xff];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadTensorDesc(m) if m.contains("does not decode")));
    assert_eq!(e.location().offset, Some(20));
}

#[test]
fn desc_without_data_type() {
    let mut r = Rec::fp32(&[1], 1);
    r.desc = vec![0x10, 0x01];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadTensorDesc(m) if m.contains("data_type")));
}

#[test]
fn unknown_dtype_names_the_number() {
    let mut r = Rec::fp32(&[1], 1);
    r.desc = desc(7, &[1]);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::UnknownDType(7)));
    assert!(e.to_string().contains("unknown dtype number 7"), "{e}");
}

#[test]
fn negative_dim() {
    let mut r = Rec::fp32(&[2, -3], 0);
    r.data.clear();
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::NegativeDim(_)), "{e}");
    assert!(
        e.to_string().contains("negative dimension -3 at index 1"),
        "{e}"
    );
}

#[test]
fn element_count_overflow() {
    let r = Rec::fp32(&[1 << 62, 1 << 62], 0);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::SizeOverflow(m) if m.contains("element count")));
}

#[test]
fn byte_count_overflow() {
    let r = Rec::fp32(&[1 << 62], 0);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::SizeOverflow(m) if m.contains("byte count")));
}

#[test]
fn dims_of_2_pow_63_minus_1_are_truncated_not_allocated() {
    let mut r = Rec::fp32(&[i64::MAX], 0);
    r.desc = desc(20, &[i64::MAX]);
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated tensor data:"), "{e}");
}

#[test]
fn lod_not_starting_at_zero() {
    let mut r = Rec::fp32(&[3], 3);
    r.lod = vec![vec![1, 3]];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("start at 0")));
    // The offset of the bad LoD offset: version 4 + lod_level 8 + level size 8.
    assert_eq!(e.location().offset, Some(20));
}

#[test]
fn lod_that_decreases() {
    let mut r = Rec::fp32(&[3], 3);
    r.lod = vec![vec![0, 2, 1, 3]];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("decreases")));
    // The third offset (1), at 20 + 2 * 8.
    assert_eq!(e.location().offset, Some(36));
}

#[test]
fn lod_last_level_not_ending_at_dims0() {
    let mut r = Rec::fp32(&[3], 3);
    r.lod = vec![vec![0, 2]];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("dims[0] is 3")));
    // The level's last offset.
    assert_eq!(e.location().offset, Some(28));
}

#[test]
fn lod_of_a_tensor_with_no_rows_is_not_held_to_dims0() {
    // Paddle writes and reads back dims [0, 3] with lod [[0, 2, 5]]: its CheckLoD
    // compares the last offset with the height only when the height is not 0.
    let mut r = Rec::fp32(&[0, 3], 0);
    r.lod = vec![vec![0, 2, 5]];
    let bytes = r.bytes();
    let t = tensor::decode_tensor(&bytes).unwrap();
    assert_eq!(t.lod(), &vec![vec![0, 2, 5]]);
}

#[test]
fn lod_level_with_one_offset() {
    let mut r = Rec::fp32(&[0, 3], 0);
    r.lod = vec![vec![0]];
    let e = err(&r.bytes());
    assert!(
        matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("level 0 has 1 offset(s)")),
        "{e}"
    );
    assert_eq!(e.location().offset, Some(12));
}

#[test]
fn lod_on_a_0d_tensor() {
    let mut r = Rec::fp32(&[], 1);
    r.lod = vec![vec![0, 1]];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("0-D")));
    assert_eq!(e.location().offset, Some(4));
}

#[test]
fn element_count_overflow_does_not_depend_on_where_the_zero_stands() {
    for dims in [[0, 1 << 62, 1 << 62], [1 << 62, 1 << 62, 0]] {
        let r = Rec::fp32(&dims, 0);
        let e = err(&r.bytes());
        assert!(
            matches!(e.kind(), ErrorKind::SizeOverflow(_)),
            "{dims:?}: {e}"
        );
    }
}

#[test]
fn lod_levels_that_do_not_nest() {
    let mut r = Rec::fp32(&[4], 4);
    r.lod = vec![vec![0, 1, 3], vec![0, 2, 4]];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(m) if m.contains("level 0 ends at 3")));
    // Level 0's last offset: 20 + 2 * 8.
    assert_eq!(e.location().offset, Some(36));
}

#[test]
fn empty_lod_level() {
    let mut r = Rec::fp32(&[0], 0);
    r.lod = vec![vec![]];
    let e = err(&r.bytes());
    assert!(matches!(e.kind(), ErrorKind::BadLod(_)));
}

#[test]
fn combined_file_errors_name_the_record_and_absolute_offset() {
    let a = Rec::fp32(&[2], 2).bytes();
    let mut b = Rec::fp32(&[2], 2);
    b.version = 3;
    let mut all = a.clone();
    all.extend_from_slice(&b.bytes());
    let e = tensor::decode_combined(&all).unwrap_err();
    assert_eq!(e.location().record, Some(1));
    assert_eq!(e.location().offset, Some(a.len() as u64));
    assert!(e.to_string().contains("record 1"), "{e}");
}

#[test]
fn combined_file_with_a_truncated_last_record() {
    let a = Rec::fp32(&[2], 2).bytes();
    let mut all = a.clone();
    all.extend_from_slice(&a[..a.len() - 2]);
    let e = tensor::decode_combined(&all).unwrap_err();
    assert_eq!(e.location().record, Some(1));
    assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
    assert!(e.to_string().contains("truncated tensor data:"), "{e}");
}

#[test]
fn bytes_after_the_last_record_of_a_combined_file() {
    let a = Rec::fp32(&[2], 2).bytes();
    let mut all = a.clone();
    all.extend_from_slice(&a);
    all.extend_from_slice(&[0, 0, 0, 0]);
    let e = tensor::decode_combined(&all).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TrailingBytes(4)), "{e}");
    assert_eq!(e.location().record, Some(1));
    assert_eq!(e.location().offset, Some(2 * a.len() as u64));
}

#[test]
fn records_report_offsets_and_lengths() {
    let t1 = Tensor::from_slice(vec![2], &[1i64, 2]).unwrap();
    let t2 = Tensor::from_bytes(DType::Bool, vec![], vec![1]).unwrap();
    let mut bytes = Vec::new();
    let (v1, v2) = (t1.view(), t2.view());
    tensor::encode_combined([&v1, &v2], &mut bytes).unwrap();
    let recs = tensor::decode_combined(&bytes).unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].offset, 0);
    assert_eq!(recs[1].offset, recs[0].length);
    assert_eq!(recs[1].offset + recs[1].length, bytes.len() as u64);
    assert_eq!(recs[1].tensor.dims(), &[] as &[u64]);
}

/// A dim past 2^63 - 1 in an empty tensor (the byte count is 0, so nothing overflowed)
/// was accepted and written into the record as a negative int64, which every reader then
/// refuses: the tensor is refused when built.
#[test]
fn dims_past_i64_are_refused_when_a_tensor_is_built() {
    let big = 1u64 << 63;
    for dims in [vec![big, 0], vec![0, big], vec![u64::MAX, 0]] {
        let e = modelzip::TensorView::new(modelzip::DType::Uint8, dims.clone(), Vec::new(), &[])
            .unwrap_err();
        assert!(
            matches!(e.kind(), modelzip::ErrorKind::SizeOverflow(m) if m.contains("exceeds 2^63 - 1")),
            "{dims:?}: {e}"
        );
        assert!(modelzip::Tensor::from_bytes(modelzip::DType::Uint8, dims, Vec::new()).is_err());
    }
    let ok = modelzip::TensorView::new(
        modelzip::DType::Uint8,
        vec![i64::MAX as u64, 0],
        Vec::new(),
        &[],
    );
    assert!(ok.is_ok(), "{ok:?}");
}
