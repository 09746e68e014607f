//! Property tests of the LoDTensor codec: encode → decode round trips over random
//! dtypes, shapes (0-D and empty included) and LoD levels; decoding never panics.

use modelzip::tensor;
use modelzip::{DType, Tensor};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(DType::ALL.to_vec())
}

/// A LoD for a tensor with `rows` rows: up to 3 nested levels.
fn lod_for(rows: u64) -> impl Strategy<Value = Vec<Vec<u64>>> {
    (0usize..=3).prop_flat_map(move |levels| {
        proptest::collection::vec(proptest::collection::vec(0u64..4, 0..5), levels).prop_map(
            move |cuts| {
                // Build from the last level up: the last level splits `rows`.
                let mut out: Vec<Vec<u64>> = Vec::new();
                let mut total = rows;
                for c in cuts.iter().rev() {
                    let mut offs = vec![0u64];
                    let mut acc = 0u64;
                    for &step in c {
                        acc = (acc + step).min(total);
                        offs.push(acc);
                    }
                    offs.push(total);
                    total = offs.len() as u64 - 1;
                    out.insert(0, offs);
                }
                out
            },
        )
    })
}

fn tensor_strategy() -> impl Strategy<Value = Tensor> {
    (dtype(), proptest::collection::vec(0u64..5, 0..4))
        .prop_flat_map(|(dt, dims)| {
            let n = dims.iter().product::<u64>() as usize * dt.size();
            let rows = dims.first().copied();
            (
                Just(dt),
                Just(dims),
                proptest::collection::vec(any::<u8>(), n),
                match rows {
                    Some(r) => lod_for(r).boxed(),
                    None => Just(vec![]).boxed(),
                },
            )
        })
        .prop_map(|(dt, dims, data, lod)| {
            Tensor::from_bytes(dt, dims, data)
                .unwrap()
                .with_lod(lod)
                .unwrap()
        })
}

proptest! {
    #[test]
    fn encode_decode_round_trip(t in tensor_strategy()) {
        let mut bytes = Vec::new();
        let n = tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
        prop_assert_eq!(n, bytes.len() as u64);
        prop_assert_eq!(tensor::encoded_len(&t.view()), n);
        let back = tensor::decode_tensor(&bytes).unwrap();
        prop_assert_eq!(back, t.view());
    }

    #[test]
    fn combined_round_trip(ts in proptest::collection::vec(tensor_strategy(), 0..5)) {
        let views: Vec<_> = ts.iter().map(|t| t.view()).collect();
        let mut bytes = Vec::new();
        tensor::encode_combined(views.iter(), &mut bytes).unwrap();
        let recs = tensor::decode_combined(&bytes).unwrap();
        prop_assert_eq!(recs.len(), ts.len());
        for (r, t) in recs.iter().zip(&ts) {
            prop_assert_eq!(&r.tensor, &t.view());
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = tensor::decode_tensor(&bytes);
        let _ = tensor::decode_combined(&bytes);
    }

    #[test]
    fn mutated_records_never_panic(
        t in tensor_strategy(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = Vec::new();
        tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        let _ = tensor::decode_tensor(&bytes);
        let keep = cut.index(bytes.len() + 1);
        let _ = tensor::decode_combined(&bytes[..keep]);
    }
}
