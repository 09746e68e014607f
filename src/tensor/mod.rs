//! Tensors and Paddle's LoDTensor binary layout.

pub mod codec;
mod dtype;
mod file;
mod view;

pub use codec::{Record, decode_combined, decode_tensor, encode_combined, encode_tensor};
pub use dtype::DType;
pub use file::TensorFile;
pub use view::{Element, Lod, Tensor, TensorView, data_len, element_count};
