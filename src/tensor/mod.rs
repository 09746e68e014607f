//! Tensors and Paddle's LoDTensor binary layout.

pub(crate) mod codec;
pub(crate) mod dtype;
mod file;
pub(crate) mod lod;
pub(crate) mod slice;
pub(crate) mod view;

pub use codec::{
    Record, RecordHead, decode_combined, decode_tensor, encode_combined, encode_tensor,
};
internal! {
    /// The record codec's parts the crate itself and its tests use (a record's size is
    /// what `encode_tensor` returns).
    pub use codec::{
        MAX_LOD_LEVELS, Records, check_lod, decode_head, encode_header, encoded_len, records,
    };
}
// DType, Element, Lod, Tensor and TensorView are public at the crate root only.
pub(crate) use dtype::DType;
pub use file::TensorFile;
pub(crate) use lod::Lod;
pub(crate) use view::{Tensor, TensorView};
internal! {
    /// Element and byte counts of dims, overflow-checked (the crate's own checks).
    pub use view::{data_len, element_count};
}
