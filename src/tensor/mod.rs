//! Tensors and Paddle's LoDTensor binary layout.

pub(crate) mod codec;
pub(crate) mod dtype;
mod file;
pub(crate) mod lod;
pub(crate) mod slice;
pub(crate) mod view;

pub use codec::{
    Record, RecordHead, decode_combined, decode_tensor, encode_combined, encode_tensor, encoded_len,
};
internal! {
    /// The record codec's parts the crate itself and its tests use.
    pub use codec::{MAX_LOD_LEVELS, Records, check_lod, decode_head, encode_header, records};
}
// DType, Element, Lod, Tensor and TensorView are public at the crate root only.
pub(crate) use dtype::DType;
pub use file::TensorFile;
pub(crate) use lod::Lod;
pub use view::data_len;
pub(crate) use view::{Tensor, TensorView};
internal! {
    pub use view::element_count;
}
