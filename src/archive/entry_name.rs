//! Zip entry names that are safe to extract: no traversal, no absolute paths.

use crate::error::{ErrorKind, Result};

/// Refuses an entry name that is empty, absolute, uses `\`, NUL, a drive letter,
/// or has an empty, `.` or `..` path component (a trailing `/` marks a directory).
pub(crate) fn check_entry_name(name: &str) -> Result<()> {
    let fail = |why: &'static str| Err(ErrorKind::unsafe_name(name, why).into());
    if name.is_empty() {
        return fail("empty name");
    }
    // This runs for every entry when an archive is opened (100k+ names): SIMD searches
    // (memchr) for NUL and backslashes, and for the `/`s next to which any bad component must
    // lie (an empty one starts or ends the body or sits in `//`; a `.` or `..` one starts
    // or ends it or follows a `/`); only a name with one of those is split into
    // components. Callgrind of opening 100,301 entries: ~625 instructions a name as one
    // branchy byte loop (docs/BENCHMARKS.md, P5).
    let b = name.as_bytes();
    let body = b.strip_suffix(b"/").unwrap_or(b);
    let (nul, backslash) = match memchr::memchr2(0, b'\\', b) {
        None => (false, false),
        Some(_) => (b.contains(&0), b.contains(&b'\\')),
    };
    let edge = |c: Option<&u8>| c.is_none_or(|&c| c == b'.' || c == b'/');
    let suspicious = edge(body.first())
        || edge(body.last())
        || memchr::memchr_iter(b'/', body).any(|p| {
            matches!(body.get(p + 1), Some(b'/' | b'.')) || (p > 0 && body[p - 1] == b'.')
        });
    let bad_component = if suspicious {
        body.split(|&c| c == b'/').find_map(|part| match part {
            [] => Some("empty path component"),
            [b'.'] => Some("'.' path component"),
            [b'.', b'.'] => Some("'..' path component"),
            _ => None,
        })
    } else {
        None
    };
    if nul {
        return fail("contains NUL");
    }
    if backslash {
        return fail("contains a backslash");
    }
    if b[0] == b'/' {
        return fail("absolute path");
    }
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return fail("starts with a drive letter");
    }
    if let Some(why) = bad_component {
        return fail(why);
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
            "a/..",
            "a/../",
            "./",
            "/",
            "a/b\\c",
        ] {
            assert!(check_entry_name(n).is_err(), "{n:?}");
        }
        for n in [
            "tags.txt",
            "fp32/params/0.lodtensor",
            "dir/",
            "a..b/c",
            "ab:c",
            ".a/..b/...",
            "a/.../b/",
        ] {
            assert!(check_entry_name(n).is_ok(), "{n:?}");
        }
    }

    /// The obvious, slower statement of the rules, to check the one-pass scan against.
    fn reference(name: &str) -> std::result::Result<(), &'static str> {
        let b = name.as_bytes();
        if name.is_empty() {
            return Err("empty name");
        }
        if name.contains('\0') {
            return Err("contains NUL");
        }
        if name.contains('\\') {
            return Err("contains a backslash");
        }
        if name.starts_with('/') {
            return Err("absolute path");
        }
        if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
            return Err("starts with a drive letter");
        }
        let body = name.strip_suffix('/').unwrap_or(name);
        for part in body.split('/') {
            match part {
                "" => return Err("empty path component"),
                "." => return Err("'.' path component"),
                ".." => return Err("'..' path component"),
                _ => {}
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn one_pass_scan_agrees_with_the_reference(
            name in "(C:|/|\\\\|\\x00|)((\\.|\\.\\.|\\.\\.\\.|a|\\.a|a\\.|)/){0,4}(\\.|\\.\\.|a|a\\\\b|)",
        ) {
            let got = check_entry_name(&name).map_err(|e| match e.kind() {
                ErrorKind::UnsafeName(_) => e.to_string(),
                _ => format!("other: {e}"),
            });
            let want = reference(&name).map_err(|why| format!("unsafe entry name {name:?}: {why}"));
            proptest::prop_assert_eq!(got, want, "{:?}", name);
        }
    }
}
