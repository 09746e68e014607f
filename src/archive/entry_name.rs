//! Zip entry names that are safe to extract: no traversal, no absolute paths.

use crate::error::{ErrorKind, Result};

/// Refuses an entry name that is empty, absolute, uses `\`, NUL, a drive letter,
/// or has an empty, `.` or `..` path component (a trailing `/` marks a directory).
pub fn check_entry_name(name: &str) -> Result<()> {
    let fail = |why: &'static str| {
        Err(ErrorKind::UnsafeName {
            name: name.to_string(),
            why,
        }
        .into())
    };
    if name.is_empty() {
        return fail("empty name");
    }
    // One pass over the bytes: this runs for every entry of the central directory.
    if let Some(b) = name.bytes().find(|&b| b == 0 || b == b'\\') {
        return fail(if b == 0 {
            "contains NUL"
        } else {
            "contains a backslash"
        });
    }
    if name.starts_with('/') {
        return fail("absolute path");
    }
    let b = name.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return fail("starts with a drive letter");
    }
    let body = name.strip_suffix('/').unwrap_or(name);
    for part in body.split('/') {
        match part {
            "" => return fail("empty path component"),
            "." => return fail("'.' path component"),
            ".." => return fail("'..' path component"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unsafe_names() {
        for n in [
            "",
            "/etc/passwd",
            "a/../b",
            "..",
            "../x",
            "a\\b",
            "a\0b",
            "C:x",
            "c:/x",
            "a//b",
            "./a",
            "a/./b",
        ] {
            assert!(check_entry_name(n).is_err(), "{n:?}");
        }
        for n in [
            "tags.txt",
            "fp32/params/0.lodtensor",
            "dir/",
            "a..b/c",
            "ab:c",
        ] {
            assert!(check_entry_name(n).is_ok(), "{n:?}");
        }
    }
}
