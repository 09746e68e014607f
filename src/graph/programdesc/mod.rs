//! The ProgramDesc codec: Paddle `.pdmodel` protobuf bytes ⇄ [`Program`](crate::graph::Program).
//!
//! Decoding uses the prost types of `paddle_proto`, then checks what prost does not:
//! proto2 required fields (through prost-reflect over the compiled descriptor set) and
//! enum values (an unknown number is an error naming it and where it was found).
//! Encoding writes fields in field-number order, as Paddle's C++ protobuf does, so a
//! decoded `.pdmodel` encodes back to the same bytes.
//!
//! Two things a ProgramDesc has no field for travel in one trailing op attribute named
//! [`MODELZIP_ATTR`] (a STRING holding canonical JSON): a SameDiff op name and which INT
//! attributes are data types. Paddle-written programs never carry it.

mod common;
mod decode;
mod encode;
#[cfg(test)]
mod tests;

// (Read by the crate's tests through the test-internals feature.)
#[allow(unused_imports)]
pub use common::{MAX_PROGRAM_ITEMS, MAX_PROGRAMDESC_BYTES, MODELZIP_ATTR, unknown_field};
pub(crate) use common::{decode_dynamic, delimited_fields, gerr, in_where};
pub use decode::decode;
pub use encode::encode;
