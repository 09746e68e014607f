//! Tensors: the borrowed zero-copy [`TensorView`] and the owned [`Tensor`].

use super::dtype::DType;
use super::lod::{Lod, check_lod};
use super::slice::SliceLayout;
use crate::archive::TensorData;
use crate::error::{ErrorKind, Result};
use std::ops::Range;

/// Sealing [`Element`]: its supertrait is plain old data as bytemuck defines it, with
/// the dtype it maps to, without either appearing in the public API.
mod sealed {
    use super::DType;

    /// Plain old data (any bit pattern is a value, no padding: `bytemuck::Pod`) that is
    /// the element of a dtype.
    pub trait Pod: bytemuck::Pod {
        /// The dtype a tensor made from these values has ([`super::Tensor::from_slice`]).
        const DTYPE: DType;
        /// Other dtypes whose elements this type reads as they are stored: `u8` reads
        /// BOOL (0 or 1) and the FP8 types (their bit patterns), `u64` reads SIZE_T.
        const ALSO_READS: &'static [DType] = &[];
    }
}

/// A Rust type that is the in-memory element of a dtype: the integer and float types,
/// `half`'s `f16` / `bf16`, and `[f32; 2]` / `[f64; 2]` for the complex types. `u8`
/// also reads BOOL and the FP8 types (their bit patterns), `u64` also SIZE_T. Sealed:
/// implemented by this crate only.
pub trait Element: sealed::Pod {}

macro_rules! element {
    ($($t:ty => $d:expr $(, also $($a:expr),+)?);* $(;)?) => { $(
        impl sealed::Pod for $t {
            const DTYPE: DType = $d;
            $(const ALSO_READS: &'static [DType] = &[$($a),+];)?
        }
        impl Element for $t {}
    )* };
}
element! {
    i16 => DType::Int16; i32 => DType::Int32; i64 => DType::Int64;
    half::f16 => DType::Fp16; f32 => DType::Fp32; f64 => DType::Fp64;
    u8 => DType::Uint8, also DType::Bool, DType::Fp8E4m3fn, DType::Fp8E5m2;
    i8 => DType::Int8; half::bf16 => DType::Bf16;
    u16 => DType::Uint16; u32 => DType::Uint32;
    u64 => DType::Uint64, also DType::SizeT;
    // COMPLEX64 / COMPLEX128: (real, imaginary) pairs.
    [f32; 2] => DType::Complex64; [f64; 2] => DType::Complex128;
}

/// Number of elements of `dims` (1 for 0-D), or an overflow error. The product of the
/// non-zero dims must fit too, so the answer does not depend on where a 0 stands
/// (`[0, 2^62, 2^62]` is refused like `[2^62, 2^62, 0]`); so is a dim past 2^63 - 1,
/// which a tensor record (int64 dims) cannot hold.
pub fn element_count(dims: &[u64]) -> Result<u64> {
    // A LoDTensor record holds dims as int64: a larger one would be written negative.
    if let Some((index, d)) = dims.iter().enumerate().find(|&(_, &d)| d > i64::MAX as u64) {
        return Err(ErrorKind::SizeOverflow(format!(
            "dimension {d} at index {index} of dims {dims:?} exceeds 2^63 - 1, the largest a \
             tensor record holds"
        ))
        .into());
    }
    let nonzero = dims.iter().filter(|&&d| d != 0).try_fold(1u64, |acc, &d| {
        acc.checked_mul(d).ok_or_else(|| {
            ErrorKind::SizeOverflow(format!("element count of dims {dims:?} exceeds 2^64"))
        })
    })?;
    Ok(if dims.contains(&0) { 0 } else { nonzero })
}

/// Bytes of data for `dtype` × `dims`, or an overflow error.
pub fn data_len(dtype: DType, dims: &[u64]) -> Result<u64> {
    element_count(dims)?
        .checked_mul(dtype.size() as u64)
        .ok_or_else(|| {
            ErrorKind::SizeOverflow(format!("byte count of {dtype} dims {dims:?} exceeds 2^64"))
                .into()
        })
}

/// A tensor whose data borrows from elsewhere (a memory map, a file buffer): dtype, dims
/// and LoD checked against the data, no copy of it.
///
/// One of three tensor types: [`Tensor`] owns its data (what is built, written and
/// returned by conversions); `TensorView<'a>` borrows it (what decoding a record
/// returns, and what every reader and writer takes: [`Tensor::view`] makes one from an
/// owned tensor); [`TensorData`](crate::archive::TensorData) is what reading a tensor
/// from an archive returns: a view into the archive's bytes when the entry is stored
/// ([`TensorData::Mapped`](crate::archive::TensorData::Mapped), the usual case), an
/// owned tensor when it had to be inflated or fetched
/// ([`TensorData::Owned`](crate::archive::TensorData::Owned)); its
/// [`view`](crate::archive::TensorData::view) works for both. [`TensorView::to_owned`]
/// copies a view into a `Tensor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorView<'a> {
    dtype: DType,
    dims: Vec<u64>,
    lod: Lod,
    data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// A view over `data`, which must hold exactly dtype × dims bytes, with LoD levels
    /// `lod` (checked against dims as [`Tensor::with_lod`] checks them: a view that a
    /// writer takes is one that every reader reads back).
    pub fn new(dtype: DType, dims: Vec<u64>, lod: Lod, data: &'a [u8]) -> Result<Self> {
        let expected = data_len(dtype, &dims)?;
        if expected != data.len() as u64 {
            return Err(ErrorKind::DataLength(format!(
                "tensor data has {} bytes, dtype and dims need {expected}",
                data.len()
            ))
            .into());
        }
        check_lod(&lod, &dims)?;
        Ok(TensorView {
            dtype,
            dims,
            lod,
            data,
        })
    }

    /// A view of parts a decode has already checked against each other (data length
    /// against dtype × dims, LoD against dims), for the header cache of
    /// [`Tag::param`](crate::archive::Tag::param).
    pub(crate) fn from_checked_parts(
        dtype: DType,
        dims: Vec<u64>,
        lod: Lod,
        data: &'a [u8],
    ) -> Self {
        TensorView {
            dtype,
            dims,
            lod,
            data,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape; empty for a 0-D tensor.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The LoD levels; empty when the tensor has none.
    pub fn lod(&self) -> &Lod {
        &self.lod
    }

    /// The raw little-endian element bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        (self.data.len() / self.dtype.size()) as u64
    }

    /// The data as `&[T]`, without copying. Fails when `T` is not the dtype's
    /// element type or when the data is not aligned for `T` (use [`Self::to_vec`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use modelzip::{DType, TensorView};
    ///
    /// let bytes: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let v = TensorView::new(DType::Fp32, vec![2], Default::default(), &bytes)?;
    /// // Vec<u8> is not guaranteed to be aligned for f32: fall back to the copying accessor.
    /// let values = match v.as_slice::<f32>() {
    ///     Ok(s) => s.to_vec(),
    ///     Err(_) => v.to_vec::<f32>()?,
    /// };
    /// assert_eq!(values, [1.5, -2.0]);
    /// assert!(v.as_slice::<i32>().is_err()); // wrong element type
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T]> {
        self.check_type::<T>()?;
        if cfg!(target_endian = "big") {
            return Err(ErrorKind::InvalidInput(
                "zero-copy typed access needs a little-endian host; use to_vec".into(),
            )
            .into());
        }
        bytemuck::try_cast_slice(self.data).map_err(|_| {
            ErrorKind::Misaligned(format!(
                "tensor data at address {:#x} is not aligned to {} bytes for {}; use the copying accessor",
                self.data.as_ptr() as usize,
                std::mem::align_of::<T>(),
                std::any::type_name::<T>()
            ))
            .into()
        })
    }

    /// The data copied into a `Vec<T>`, whatever its alignment.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_type::<T>()?;
        Ok(self
            .data
            .chunks_exact(std::mem::size_of::<T>())
            .map(|c| {
                let mut v: T = bytemuck::pod_read_unaligned(c);
                if cfg!(target_endian = "big") {
                    bytemuck::bytes_of_mut(&mut v).reverse();
                }
                v
            })
            .collect())
    }

    /// The values converted to f32: for FP16, BF16, FP32, FP64 and the FP8 types.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        let d = self.data;
        let two = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
        Ok(match self.dtype {
            DType::Fp16 => d
                .chunks_exact(2)
                .map(|c| half::f16::from_bits(two(c)).to_f32())
                .collect(),
            DType::Bf16 => d
                .chunks_exact(2)
                .map(|c| half::bf16::from_bits(two(c)).to_f32())
                .collect(),
            DType::Fp32 => d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::Fp64 => d
                .chunks_exact(8)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    f64::from_le_bytes(b) as f32
                })
                .collect(),
            DType::Fp8E4m3fn => d.iter().map(|&b| fp8_e4m3fn_to_f32(b)).collect(),
            DType::Fp8E5m2 => d
                .iter()
                .map(|&b| half::f16::from_bits(u16::from(b) << 8).to_f32())
                .collect(),
            other => {
                return Err(
                    ErrorKind::dtype_mismatch("a floating-point dtype", other.name()).into(),
                );
            }
        })
    }

    /// The box of this tensor that `ranges` selects: one range per leading dimension
    /// (`ranges[d]` of dimension `d`; the dimensions after the last range whole), so
    /// `&[a..b]` is rows `a..b`. The result's dims are the ranges' lengths, and it has
    /// no LoD (LoD levels index the whole tensor's rows).
    ///
    /// When the box is one run of the data (rows of the first dimension; more generally
    /// single indices, then one range, then whole dimensions) the result is
    /// [`TensorData::Mapped`], a view of the same bytes (no copy: a view of an archive's
    /// map touches only the pages of those rows); otherwise the runs are gathered into
    /// [`TensorData::Owned`]. A range past its dimension, one ending before it starts, or
    /// more ranges than dimensions is an [`ErrorKind::InvalidInput`] naming the dimension.
    ///
    /// # Examples
    ///
    /// ```
    /// use modelzip::Tensor;
    ///
    /// let t = Tensor::from_slice(vec![3, 2], &[1i32, 2, 3, 4, 5, 6])?;
    /// let rows = t.view().slice(&[1..3])?;
    /// assert!(rows.is_mapped()); // rows are a view, not a copy
    /// assert_eq!(rows.view().dims(), &[2, 2]);
    /// assert_eq!(rows.view().to_vec::<i32>()?, [3, 4, 5, 6]);
    /// let column = t.view().slice(&[0..3, 1..2])?; // gathered
    /// assert_eq!(column.view().to_vec::<i32>()?, [2, 4, 6]);
    /// assert!(t.view().slice(&[2..4]).is_err()); // dimension 0 has 3
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn slice(&self, ranges: &[Range<u64>]) -> Result<TensorData<'a>> {
        self.slice_of(ranges, "the tensor")
    }

    /// [`Self::slice`], naming the tensor `what` in errors.
    pub(crate) fn slice_of(&self, ranges: &[Range<u64>], what: &str) -> Result<TensorData<'a>> {
        let layout = SliceLayout::new(self.dtype, &self.dims, ranges, what)?;
        let data: &'a [u8] = self.data;
        // The layout lies inside the data: its ranges were checked against dims, and
        // dims against the data's length.
        Ok(match layout.contiguous() {
            Some(r) => TensorData::Mapped(TensorView {
                dtype: self.dtype,
                dims: layout.dims,
                lod: Lod::new(),
                data: &data[r.start as usize..r.end as usize],
            }),
            None => TensorData::Owned(Tensor {
                dtype: self.dtype,
                data: layout.gather(data, 0),
                dims: layout.dims,
                lod: Lod::new(),
            }),
        })
    }

    /// An owned copy.
    pub fn to_owned(&self) -> Tensor {
        Tensor {
            dtype: self.dtype,
            dims: self.dims.clone(),
            lod: self.lod.clone(),
            data: self.data.to_vec(),
        }
    }

    fn check_type<T: Element>(&self) -> Result<()> {
        if T::DTYPE == self.dtype || T::ALSO_READS.contains(&self.dtype) {
            Ok(())
        } else {
            Err(ErrorKind::dtype_mismatch(T::DTYPE.name(), self.dtype.name()).into())
        }
    }
}

/// FP8 E4M3FN (no infinities; 0x7f/0xff are NaN) to f32.
fn fp8_e4m3fn_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0x0f);
    let man = f32::from(b & 0x07);
    if exp == 0x0f && (b & 0x07) == 0x07 {
        return f32::NAN;
    }
    if exp == 0 {
        sign * man / 8.0 * 2f32.powi(-6)
    } else {
        sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// A tensor that owns its data: what is built ([`Tensor::from_slice`],
/// [`Tensor::from_bytes`]), converted and handed to writers (by [`Tensor::view`]), and
/// what [`Tag::tensor_owned`](crate::archive::Tag::tensor_owned) reads from an archive.
/// See [`TensorView`] for the borrowed form and how the three tensor types differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    dtype: DType,
    dims: Vec<u64>,
    lod: Lod,
    data: Vec<u8>,
}

impl Tensor {
    /// A tensor from raw little-endian bytes, which must hold exactly dtype × dims.
    pub fn from_bytes(dtype: DType, dims: Vec<u64>, data: Vec<u8>) -> Result<Self> {
        TensorView::new(dtype, dims.clone(), Vec::new(), &data)?;
        Ok(Tensor {
            dtype,
            dims,
            lod: Vec::new(),
            data,
        })
    }

    /// A tensor from typed values.
    pub fn from_slice<T: Element>(dims: Vec<u64>, values: &[T]) -> Result<Self> {
        let mut data = Vec::with_capacity(std::mem::size_of_val(values));
        for v in values {
            let mut b = bytemuck::bytes_of(v).to_vec();
            if cfg!(target_endian = "big") {
                b.reverse();
            }
            data.extend_from_slice(&b);
        }
        Tensor::from_bytes(T::DTYPE, dims, data)
    }

    /// The same tensor with LoD levels attached (checked against dims).
    pub fn with_lod(mut self, lod: Lod) -> Result<Self> {
        check_lod(&lod, &self.dims)?;
        self.lod = lod;
        Ok(self)
    }

    /// A zero-copy view of this tensor.
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            dtype: self.dtype,
            dims: self.dims.clone(),
            lod: self.lod.clone(),
            data: &self.data,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The LoD levels.
    pub fn lod(&self) -> &Lod {
        &self.lod
    }

    /// The raw little-endian data bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Consumes the tensor, returning its data bytes.
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
}

impl From<TensorView<'_>> for Tensor {
    fn from(v: TensorView<'_>) -> Self {
        v.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_has_a_typed_reader() {
        let bytes = |n: usize| (0..n as u8).collect::<Vec<u8>>();
        let bool_t = Tensor::from_bytes(DType::Bool, vec![2], vec![0, 1]).unwrap();
        assert_eq!(bool_t.view().to_vec::<u8>().unwrap(), vec![0, 1]);
        for fp8 in [DType::Fp8E4m3fn, DType::Fp8E5m2] {
            let t = Tensor::from_bytes(fp8, vec![3], bytes(3)).unwrap();
            assert_eq!(t.view().to_vec::<u8>().unwrap(), vec![0, 1, 2]);
        }
        let size_t =
            Tensor::from_bytes(DType::SizeT, vec![1], 7u64.to_le_bytes().to_vec()).unwrap();
        assert_eq!(size_t.view().to_vec::<u64>().unwrap(), vec![7]);
        let c64: Vec<u8> = [1.0f32, -2.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        let c = Tensor::from_bytes(DType::Complex64, vec![1], c64).unwrap();
        assert_eq!(c.view().to_vec::<[f32; 2]>().unwrap(), vec![[1.0, -2.0]]);
        let c128: Vec<u8> = [0.5f64, 3.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        let c = Tensor::from_bytes(DType::Complex128, vec![1], c128).unwrap();
        assert_eq!(c.view().to_vec::<[f64; 2]>().unwrap(), vec![[0.5, 3.0]]);
        // A type still refuses the dtypes it does not read.
        assert!(size_t.view().to_vec::<i64>().is_err());
        assert!(bool_t.view().to_vec::<i8>().is_err());
    }

    #[test]
    fn a_view_refuses_a_lod_its_dims_do_not_hold() {
        let data = [0u8; 16];
        // Rows 0..4 of 4: fine; a last offset past the 4 rows, a level going down, a
        // level that does not start at 0: refused, as a record's decode refuses them.
        let ok = TensorView::new(DType::Fp32, vec![4], vec![vec![0, 1, 4]], &data);
        assert!(ok.is_ok());
        for lod in [vec![vec![0, 5]], vec![vec![0, 3, 2, 4]], vec![vec![1, 4]]] {
            let e = TensorView::new(DType::Fp32, vec![4], lod.clone(), &data).unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::BadLod(_)), "{lod:?}: {e}");
        }
    }

    #[test]
    fn typed_access_checks_type_and_alignment() {
        let t = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let v = t.view();
        assert_eq!(v.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        assert!(matches!(
            v.as_slice::<i32>().unwrap_err().kind(),
            ErrorKind::DTypeMismatch { .. }
        ));
        // Misaligned: an 8-aligned buffer viewed from byte 1 is never 4-aligned.
        let mut words = [0u64; 3];
        let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        buf[1..17].copy_from_slice(t.data());
        let mis = TensorView::new(DType::Fp32, vec![4], vec![], &buf[1..17]).unwrap();
        let e = mis.as_slice::<f32>().unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Misaligned(_)), "{e}");
        assert!(
            e.to_string().contains("not aligned to 4 bytes for f32"),
            "{e}"
        );
        assert_eq!(mis.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn half_types_convert_to_f32() {
        let h = Tensor::from_slice(
            vec![2],
            &[half::f16::from_f32(1.5), half::f16::from_f32(-2.0)],
        )
        .unwrap();
        assert_eq!(h.view().to_f32_vec().unwrap(), vec![1.5, -2.0]);
        let b = Tensor::from_slice(vec![1], &[half::bf16::from_f32(3.0)]).unwrap();
        assert_eq!(b.view().to_f32_vec().unwrap(), vec![3.0]);
        let f8 = Tensor::from_bytes(DType::Fp8E4m3fn, vec![3], vec![0x38, 0xb8, 0x01]).unwrap();
        assert_eq!(
            f8.view().to_f32_vec().unwrap(),
            vec![1.0, -1.0, 2f32.powi(-9)]
        );
        let i = Tensor::from_slice(vec![1], &[1i32]).unwrap();
        assert!(i.view().to_f32_vec().is_err());
    }

    #[test]
    fn length_must_match_dims() {
        let e = Tensor::from_bytes(DType::Fp32, vec![3], vec![0; 8]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::DataLength(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "tensor data has 8 bytes, dtype and dims need 12"
        );
        assert_eq!(
            Tensor::from_bytes(DType::Fp32, vec![], vec![0; 4])
                .unwrap()
                .view()
                .numel(),
            1
        );
        assert_eq!(
            Tensor::from_bytes(DType::Fp32, vec![3, 0], vec![])
                .unwrap()
                .view()
                .numel(),
            0
        );
    }
}
