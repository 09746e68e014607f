//! Zip entry names that are safe to extract: no traversal, no absolute paths.

use crate::error::{ErrorKind, Result};

/// Refuses an entry name that is empty, absolute, uses `\`, NUL, a drive letter,
/// or has an empty, `.` or `..` path component (a trailing `/` marks a directory).
pub(crate) fn check_entry_name(name: &str) -> Result<()> {
    if plainly_safe(name.as_bytes()) {
        return Ok(());
    }
    check_fully(name)
}

/// [`check_entry_name`] without its shortcut.
fn check_fully(name: &str) -> Result<()> {
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

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit set in each byte of `w` that equals `c`, and possibly in bytes above
/// such a byte (a borrow): never clear in a byte that equals `c`, so a check that
/// refuses on a set bit refuses every such byte, and at worst some other byte too.
fn bytes_equal(w: u64, c: u8) -> u64 {
    let t = w ^ (ONES * u64::from(c));
    t.wrapping_sub(ONES) & !t
}

/// True when `b` is ASCII (so UTF-8) and passes every check of [`check_entry_name`]: no
/// NUL or `\`, no `//`, `/.` or `./` (so no empty, `.` or `..` component inside), neither
/// end of the body (the name without one trailing `/`) a `.` or `/` (so not absolute),
/// and no `:` second (no drive letter). Eight bytes at a time, with no search and no
/// branch a byte; false says only that the full checks must decide. Opening 100,000
/// entries spent ~40 % of its instructions on three SIMD searches a name (built for long
/// inputs, not ~30 bytes) and its UTF-8 check (callgrind; BENCHMARKS.md, P5).
pub(crate) fn plainly_safe(b: &[u8]) -> bool {
    let body = b.strip_suffix(b"/").unwrap_or(b);
    let (Some(&first), Some(&last)) = (body.first(), body.last()) else {
        return false;
    };
    if matches!(first, b'.' | b'/') || matches!(last, b'.' | b'/') || b.get(1) == Some(&b':') {
        return false;
    }
    // Flags at each byte's high bit: any byte not ASCII, NUL or `\`; and a pair of
    // neighbours that is `//`, `/.` or `./` (the previous word's last byte carried in).
    let (mut wrong, mut pairs, mut carry_slash, mut carry_dot) = (0u64, 0u64, 0u64, 0u64);
    let mut word = |w: u64| {
        let slash = bytes_equal(w, b'/');
        let dot = bytes_equal(w, b'.');
        wrong |= w | bytes_equal(w, 0) | bytes_equal(w, b'\\');
        let prev_slash = (slash << 8) | carry_slash;
        let prev_dot = (dot << 8) | carry_dot;
        pairs |= (prev_slash & (slash | dot)) | (prev_dot & slash);
        carry_slash = slash >> 56;
        carry_dot = dot >> 56;
    };
    let mut chunks = body.chunks_exact(8);
    for c in &mut chunks {
        word(u64::from_le_bytes(c.try_into().unwrap_or_default()));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // Padded with a letter, which is none of the bytes looked for.
        let mut tail = [b'a'; 8];
        tail[..rest.len()].copy_from_slice(rest);
        word(u64::from_le_bytes(tail));
    }
    (wrong | pairs) & HIGH == 0
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

    #[test]
    fn plain_names_take_the_shortcut() {
        for n in [
            "tags.txt",
            "fp32/params/0.lodtensor",
            "dir/",
            "step-000100/updater/12.lodtensor",
            "a..b/c",
            "a/b.c/d..e/f",
        ] {
            assert!(plainly_safe(n.as_bytes()), "{n:?}");
        }
        for n in [
            "a/./b",
            "a//b",
            "x\\y",
            "C:x",
            "..",
            ".a",
            "a.",
            "/a",
            "a\0",
            "",
            "é/a",
            "abcdefg/.bc",
            "abcdefgh/./",
            "abcdefgh//b",
            "abcdefg./b",
        ] {
            assert!(!plainly_safe(n.as_bytes()), "{n:?}");
        }
    }

    proptest::proptest! {
        /// The shortcut passes only names the full check passes, and only ASCII.
        #[test]
        fn the_shortcut_passes_only_safe_names(name in "[ab./\\:C\x00é]{0,20}") {
            if plainly_safe(name.as_bytes()) {
                proptest::prop_assert_eq!(reference(&name), Ok(()), "{:?}", name);
                proptest::prop_assert!(check_fully(&name).is_ok(), "{:?}", name);
                proptest::prop_assert!(name.is_ascii(), "{:?}", name);
            }
        }

        /// And it takes every safe ASCII name without a `:` second or a `.` or `/`
        /// next to a `/`.
        #[test]
        fn the_shortcut_takes_plain_names(name in "[ab]{1,9}(/[ab][ab.]{0,9}[ab]){0,4}/?") {
            proptest::prop_assert!(plainly_safe(name.as_bytes()), "{:?}", name);
        }

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
