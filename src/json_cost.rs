//! The memory JSON takes once parsed into a `serde_json::Value`, estimated before parsing:
//! text whose parse would take far more than its size (a safetensors header of millions of
//! `0,`, a program attribute) is refused unparsed.

use crate::error::{ErrorKind, Result};
use serde_json::Value;

/// What parsing JSON may be estimated to allocate: 8 × the text + 64 MiB ([`check_json_cost`]).
pub(crate) fn json_budget(len: usize) -> u64 {
    (len as u64).saturating_mul(8).saturating_add(64 << 20)
}

/// Refuses JSON whose parse into a `serde_json::Value` is estimated to take more than
/// [`json_budget`] of its length, before parsing it: each value costs a `Value` (80
/// bytes) and each object member a key, so 100 MB of `0,` in one array would parse to
/// about 4 GB. One pass over the bytes, allocating nothing; the estimate counts every
/// value, member and string byte with room for the containers' growth.
pub(crate) fn check_json_cost(text: &[u8], what: &'static str) -> Result<()> {
    const VALUE: u64 = 2 * std::mem::size_of::<Value>() as u64;
    const MEMBER: u64 = 2 * (std::mem::size_of::<String>() as u64 + 8);
    let limit = json_budget(text.len());
    let mut cost = 0u64;
    let mut in_scalar = false;
    let mut i = 0;
    while i < text.len() {
        let c = text[i];
        match c {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                cost += VALUE + (i.min(text.len()) - start) as u64;
            }
            b':' => cost += MEMBER,
            b'{' | b'[' => cost += VALUE,
            b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' => {
                if !in_scalar {
                    cost += VALUE;
                }
                in_scalar = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        in_scalar = false;
        if cost > limit {
            return Err(ErrorKind::LimitExceeded {
                what,
                size: cost,
                limit,
            }
            .into());
        }
        i += 1;
    }
    Ok(())
}
