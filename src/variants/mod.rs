//! Derived variants of a tag: INT8 quantization and FP16/BF16 casts.

pub mod quantize_math;
