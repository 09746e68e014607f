//! Tensors and Paddle's LoDTensor binary layout.

pub mod codec;
mod dtype;
mod file;
mod lod;
mod view;

pub use codec::{Record, decode_combined, decode_tensor, encode_combined, encode_tensor};
pub use dtype::DType;
pub use file::TensorFile;
pub use lod::Lod;
pub use view::{Element, Tensor, TensorView, data_len, element_count};
