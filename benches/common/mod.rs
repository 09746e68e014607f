//! Deterministic data sets shared by the criterion benches and the peer-comparison binary.
#![allow(dead_code)]

use modelzip::{DType, Tensor};

/// Fills `buf` with pseudo-random bytes (xorshift64*), fast and incompressible, so that
/// no two generated tensors are identical (modelzip would store them once).
pub fn fill(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        // Keep the exponent bits tame so the data is finite FP32, like real weights.
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d) & 0x3fff_ffff_3fff_ffff;
        c.copy_from_slice(&v.to_le_bytes());
    }
    for b in chunks.into_remainder() {
        *b = 0x3f;
    }
}

/// One FP32 tensor of `dims`, filled from `seed`.
pub fn tensor(seed: u64, dims: &[u64]) -> Tensor {
    let n: u64 = dims.iter().product();
    let mut data = vec![0u8; (n * 4) as usize];
    fill(seed, &mut data);
    Tensor::from_bytes(DType::Fp32, dims.to_vec(), data).expect("dims match data")
}

/// A named data set: `count` tensors of `dims` each (names `layer.N.weight`).
#[derive(Debug, Clone, Copy)]
pub struct Set {
    pub count: usize,
    pub dims: [u64; 2],
}

impl Set {
    /// (L) ~1 GiB of FP32 in 200 tensors: 200 × [1024, 1311] × 4 B = 1.0002 GiB.
    pub const L: Set = Set {
        count: 200,
        dims: [1024, 1311],
    };
    /// (L/16): the same 200 tensors at 1/16 of the bytes.
    pub const L16: Set = Set {
        count: 200,
        dims: [64, 1311],
    };
    /// A 100 MiB checkpoint: 20 × [1024, 1280] × 4 B.
    pub const C100: Set = Set {
        count: 20,
        dims: [1024, 1280],
    };

    /// Looks a set up by name; `scale` divides the first dim (quick mode).
    pub fn by_name(name: &str) -> Option<Set> {
        let (base, scale) = match name.split_once('/') {
            Some((b, s)) => (b, s.parse::<u64>().ok()?),
            None => (name, 1),
        };
        let mut s = match base {
            "L" => Set::L,
            "L16" => Set::L16,
            "C100" => Set::C100,
            "B2G" => Set {
                count: 400,
                dims: [1024, 1311],
            },
            // Issue 27's P4 checkpoint: 4 tensors of 25 MiB (4 x [1280, 5120] x 4 B).
            "C4x25" => Set {
                count: 4,
                dims: [1280, 5120],
            },
            // Issue 27's Py1 tag: 1,024 tensors of 1 MiB (1 GiB): per-tensor costs.
            "K1024" => Set {
                count: 1024,
                dims: [256, 1024],
            },
            _ => return None,
        };
        s.dims[0] = (s.dims[0] / scale).max(1);
        Some(s)
    }

    pub fn tensor_bytes(&self) -> u64 {
        self.count as u64 * self.dims[0] * self.dims[1] * 4
    }

    pub fn name(i: usize) -> String {
        format!("layer.{i}.weight")
    }

    /// Tensor `i`, seeded by `salt` (different salts give different data).
    pub fn make(&self, salt: u64, i: usize) -> Tensor {
        tensor(salt * 1_000_003 + i as u64, &self.dims)
    }

    /// Every tensor, in memory.
    pub fn all(&self, salt: u64) -> Vec<(String, Tensor)> {
        (0..self.count)
            .map(|i| (Set::name(i), self.make(salt, i)))
            .collect()
    }
}

/// (M): `tags` tags × `params` small params; param i of tag t has 16 + (i % 48) × 4 elements.
pub fn small_param(tag: usize, i: usize) -> Tensor {
    let n = 16 + (i as u64 % 48) * 4;
    tensor((tag as u64) << 32 | i as u64, &[n])
}
