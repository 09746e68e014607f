//! Tensors and Paddle's LoDTensor binary layout.

pub(crate) mod codec;
mod dtype;
mod file;
mod lod;
mod view;

pub use codec::{
    MAX_LOD_LEVELS, Record, RecordHead, Records, check_lod, decode_combined, decode_head,
    decode_tensor, encode_combined, encode_header, encode_tensor, encoded_len, records,
};
pub use dtype::DType;
pub use file::TensorFile;
pub use lod::Lod;
pub use view::{Element, Tensor, TensorView, data_len, element_count};
