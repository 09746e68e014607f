//! Structured: any valid tensor (every dtype, 0–4 dims of 0–8, optional valid LoD)
//! encodes, decodes back equal, and re-encodes to the same bytes.
#![no_main]
use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use modelzip::tensor::{data_len, decode_combined, decode_tensor, encode_tensor, encoded_len};
use modelzip::{DType, Lod, Tensor};

#[derive(Debug)]
struct Case(Tensor);

/// Offsets from 0 to `end` in 1 to 4 non-decreasing steps (empty sequences allowed; a
/// level has at least 2 offsets, as Paddle's CheckLoD requires).
fn level(u: &mut Unstructured, end: u64) -> Result<Vec<u64>> {
    let seqs = u.int_in_range(1..=4)?;
    let mut cuts = (1..seqs).map(|_| u.int_in_range(0..=end)).collect::<Result<Vec<_>>>()?;
    cuts.sort_unstable();
    Ok([0].into_iter().chain(cuts).chain([end]).collect())
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let dtype = *u.choose(&DType::ALL)?;
        let dims = (0..u.int_in_range(0..=4)?).map(|_| u.int_in_range(0..=8u64)).collect::<Result<Vec<_>>>()?;
        let n = data_len(dtype, &dims).unwrap() as usize;
        let mut data = u.bytes(n.min(u.len()))?.to_vec();
        data.resize(n, 0xa5);
        let mut lod = Lod::new();
        if let Some(&rows) = dims.first() {
            // Innermost level ends at dims[0]; each outer one at the count of the next.
            for _ in 0..u.int_in_range(0..=3)? {
                let end = lod.first().map_or(rows, |l: &Vec<u64>| l.len() as u64 - 1);
                lod.insert(0, level(u, end)?);
            }
        }
        let t = Tensor::from_bytes(dtype, dims, data).unwrap();
        Ok(Case(t.with_lod(lod).expect("generated LoD is rejected")))
    }
}

fuzz_target!(|case: Case| {
    let t = case.0.view();
    let mut bytes = Vec::new();
    encode_tensor(&t, &mut bytes).unwrap();
    assert_eq!(bytes.len() as u64, encoded_len(&t));
    assert_eq!(decode_tensor(&bytes).expect("encoded tensor does not decode"), t);
    let mut again = Vec::new();
    encode_tensor(&decode_tensor(&bytes).unwrap(), &mut again).unwrap();
    assert_eq!(again, bytes, "re-encoding changed the bytes");
    let two = [bytes.as_slice(), bytes.as_slice()].concat();
    let recs = decode_combined(&two).expect("two records do not decode as a combined file");
    assert!(recs.len() == 2 && recs.iter().all(|r| r.tensor == t));
});
