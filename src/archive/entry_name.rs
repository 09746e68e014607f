//! Zip entry names that are safe to extract: no traversal, no absolute paths.

use crate::error::{ErrorKind, Result};

/// Refuses an entry name that is empty, absolute, uses `\`, NUL, a drive letter,
/// or has an empty, `.` or `..` path component (a trailing `/` marks a directory).
pub(crate) fn check_entry_name(name: &str) -> Result<()> {
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
    // One pass over the bytes: this runs for every entry when an archive is opened
    // (100k+ names), and str::contains/split cost more than the rest of the parse (perf).
    let b = name.as_bytes();
    let body = b.strip_suffix(b"/").unwrap_or(b);
    let (mut nul, mut backslash) = (false, false);
    let (mut len, mut dots) = (0usize, 0usize);
    let mut bad_component: Option<&'static str> = None;
    let classify = |len: usize, dots: usize| match (len, dots) {
        (0, _) => Some("empty path component"),
        (1, 1) => Some("'.' path component"),
        (2, 2) => Some("'..' path component"),
        _ => None,
    };
    for &c in body {
        nul |= c == 0;
        backslash |= c == b'\\';
        if c == b'/' {
            bad_component = bad_component.or_else(|| classify(len, dots));
            (len, dots) = (0, 0);
        } else {
            len += 1;
            dots += usize::from(c == b'.');
        }
    }
    bad_component = bad_component.or_else(|| classify(len, dots));
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
                ErrorKind::UnsafeName { why, .. } => *why,
                _ => "other",
            });
            proptest::prop_assert_eq!(got, reference(&name), "{:?}", name);
        }
    }
}
