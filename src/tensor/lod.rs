//! Level-of-detail offsets ([`Lod`]) and the checks every tensor's LoD passes.

use crate::error::{Error, ErrorKind, Result};

/// Level-of-detail offsets: one `Vec<u64>` of offsets per level (Paddle's LoD).
pub type Lod = Vec<Vec<u64>>;

/// Checks a LoD against the tensor's dims, as Paddle's `CheckLoD` does: every level has at
/// least 2 offsets, starts at 0 and never decreases; each level ends at the number of
/// sequences of the level below it; and the last level ends at `dims[0]` — unless
/// `dims[0]` is 0, which Paddle lets through (it writes and reads back such tensors).
pub fn check_lod(lod: &Lod, dims: &[u64]) -> Result<()> {
    for (l, level) in lod.iter().enumerate() {
        check_level(l, level).map_err(|(_, e)| e)?;
        if let Some(next) = lod.get(l + 1) {
            check_nesting(l, level, next)?;
        }
    }
    match lod.last() {
        Some(last) => check_height(lod.len() - 1, last, dims),
        None => Ok(()),
    }
}

/// One level on its own; the error comes with the index of the offset at fault.
pub(super) fn check_level(l: usize, level: &[u64]) -> std::result::Result<(), (usize, Error)> {
    if level.len() < 2 {
        let e = ErrorKind::BadLod(format!(
            "level {l} has {} offset(s); a level needs at least 2",
            level.len()
        ));
        return Err((0, e.into()));
    }
    if level[0] != 0 {
        let e = ErrorKind::BadLod(format!(
            "level {l} does not start at 0 (it starts at {})",
            level[0]
        ));
        return Err((0, e.into()));
    }
    if let Some(i) = level.windows(2).position(|w| w[1] < w[0]) {
        let e = ErrorKind::BadLod(format!(
            "level {l} decreases at position {} ({} then {})",
            i + 1,
            level[i],
            level[i + 1]
        ));
        return Err((i + 1, e.into()));
    }
    Ok(())
}

/// Level `l` must end at the number of sequences of level `l + 1`.
pub(super) fn check_nesting(l: usize, level: &[u64], next: &[u64]) -> Result<()> {
    let last = level.last().copied().unwrap_or(0);
    let want = (next.len() as u64).saturating_sub(1);
    if last != want {
        return Err(ErrorKind::BadLod(format!(
            "level {l} ends at {last}, but level {} has {want} sequences",
            l + 1
        ))
        .into());
    }
    Ok(())
}

/// The last level (`l`) must end at `dims[0]` when that is not 0; a 0-D tensor has no LoD.
pub(super) fn check_height(l: usize, level: &[u64], dims: &[u64]) -> Result<()> {
    let last = level.last().copied().unwrap_or(0);
    match dims.first() {
        None => Err(ErrorKind::BadLod("a 0-D tensor cannot have LoD levels".into()).into()),
        Some(&rows) if rows == 0 || rows == last => Ok(()),
        Some(&rows) => Err(ErrorKind::BadLod(format!(
            "last level ({l}) ends at {last}, but dims[0] is {rows}"
        ))
        .into()),
    }
}
