//! Paddle's plain-old-data element types, with their VarType numbers and sizes.

use crate::error::{ErrorKind, Result};
use std::fmt;

/// An element type, numbered as Paddle's `VarType.Type` enum numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// 1 byte, 0 or 1.
    Bool,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// IEEE 754 half precision.
    Fp16,
    /// IEEE 754 single precision.
    Fp32,
    /// IEEE 754 double precision.
    Fp64,
    /// C `size_t`, 8 bytes as Paddle writes it on 64-bit hosts.
    SizeT,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Signed 8-bit integer.
    Int8,
    /// bfloat16: the top 16 bits of an f32.
    Bf16,
    /// Two f32: real, imaginary.
    Complex64,
    /// Two f64: real, imaginary.
    Complex128,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, finite only.
    Fp8E4m3fn,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits.
    Fp8E5m2,
    /// Unsigned 16-bit integer.
    Uint16,
    /// Unsigned 32-bit integer.
    Uint32,
    /// Unsigned 64-bit integer.
    Uint64,
}

impl DType {
    /// Every dtype, in Paddle number order.
    pub const ALL: [DType; 18] = [
        DType::Bool,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Fp16,
        DType::Fp32,
        DType::Fp64,
        DType::SizeT,
        DType::Uint8,
        DType::Int8,
        DType::Bf16,
        DType::Complex64,
        DType::Complex128,
        DType::Fp8E4m3fn,
        DType::Fp8E5m2,
        DType::Uint16,
        DType::Uint32,
        DType::Uint64,
    ];

    /// Paddle's `VarType.Type` number.
    pub const fn code(self) -> i32 {
        match self {
            DType::Bool => 0,
            DType::Int16 => 1,
            DType::Int32 => 2,
            DType::Int64 => 3,
            DType::Fp16 => 4,
            DType::Fp32 => 5,
            DType::Fp64 => 6,
            DType::SizeT => 19,
            DType::Uint8 => 20,
            DType::Int8 => 21,
            DType::Bf16 => 22,
            DType::Complex64 => 23,
            DType::Complex128 => 24,
            DType::Fp8E4m3fn => 32,
            DType::Fp8E5m2 => 33,
            DType::Uint16 => 36,
            DType::Uint32 => 37,
            DType::Uint64 => 38,
        }
    }

    /// Paddle's name for the type (`FP32`, `BF16`, `FP8_E4M3FN`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "BOOL",
            DType::Int16 => "INT16",
            DType::Int32 => "INT32",
            DType::Int64 => "INT64",
            DType::Fp16 => "FP16",
            DType::Fp32 => "FP32",
            DType::Fp64 => "FP64",
            DType::SizeT => "SIZE_T",
            DType::Uint8 => "UINT8",
            DType::Int8 => "INT8",
            DType::Bf16 => "BF16",
            DType::Complex64 => "COMPLEX64",
            DType::Complex128 => "COMPLEX128",
            DType::Fp8E4m3fn => "FP8_E4M3FN",
            DType::Fp8E5m2 => "FP8_E5M2",
            DType::Uint16 => "UINT16",
            DType::Uint32 => "UINT32",
            DType::Uint64 => "UINT64",
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::Uint8 | DType::Int8 | DType::Fp8E4m3fn | DType::Fp8E5m2 => 1,
            DType::Int16 | DType::Fp16 | DType::Bf16 | DType::Uint16 => 2,
            DType::Int32 | DType::Fp32 | DType::Uint32 => 4,
            DType::Int64 | DType::Fp64 | DType::SizeT | DType::Complex64 | DType::Uint64 => 8,
            DType::Complex128 => 16,
        }
    }

    /// Whether the type is a real floating-point type (FP8 through FP64).
    pub(crate) const fn is_float(self) -> bool {
        matches!(
            self,
            DType::Fp16
                | DType::Fp32
                | DType::Fp64
                | DType::Bf16
                | DType::Fp8E4m3fn
                | DType::Fp8E5m2
        )
    }

    /// The dtype with Paddle number `code`; an unknown number is an error naming it.
    pub(crate) fn from_code(code: i64) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| i64::from(d.code()) == code)
            .ok_or_else(|| ErrorKind::UnknownDType(code).into())
    }

    /// The dtype named `name` (Paddle's spelling, any ASCII case): what
    /// `name.parse::<DType>()` returns (its [`FromStr`](std::str::FromStr)).
    pub(crate) fn from_name(name: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| ErrorKind::UnknownDTypeName(name.to_string()).into())
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<DType> {
        DType::from_name(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d.code().into()).unwrap(), d);
            assert_eq!(DType::from_name(d.name()).unwrap(), d);
            assert_eq!(DType::from_name(&d.name().to_lowercase()).unwrap(), d);
        }
        assert_eq!(DType::Fp32.code(), 5);
        assert_eq!(DType::Uint16.code(), 36);
        assert_eq!(DType::Complex128.size(), 16);
    }

    #[test]
    fn unknown_number_is_named() {
        let e = DType::from_code(7).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::UnknownDType(7)));
        assert_eq!(e.to_string(), "unknown dtype number 7");
    }
}
