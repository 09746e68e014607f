//! Tensors and Paddle's LoDTensor binary layout.

pub(crate) mod codec;
pub(crate) mod dtype;
mod file;
pub(crate) mod lod;
pub(crate) mod slice;
pub(crate) mod view;

pub use codec::{
    MAX_LOD_LEVELS, Record, RecordHead, Records, check_lod, decode_combined, decode_head,
    decode_tensor, encode_combined, encode_header, encode_tensor, encoded_len, records,
};
// DType, Element, Lod, Tensor and TensorView are public at the crate root only.
pub(crate) use dtype::DType;
pub use file::TensorFile;
pub(crate) use lod::Lod;
pub(crate) use view::{Tensor, TensorView};
pub use view::{data_len, element_count};
