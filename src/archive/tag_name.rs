//! Tag names: the naming rules of FORMAT.md, each refused with its own message.

use crate::error::{ErrorKind, Result};

/// Longest tag name, in bytes.
pub const MAX_TAG_NAME_LEN: usize = 128;

/// Checks a tag name: 1–128 bytes of ASCII letters, digits, `.`, `_`, `-`; starts with a
/// letter or digit; does not end with `.`; not a Windows device name; not `tags.txt`.
pub fn validate_tag_name(name: &str) -> Result<()> {
    let fail = |rule: &'static str| Err(ErrorKind::invalid_tag_name(name, rule).into());
    if name.is_empty() {
        return fail("a tag name must not be empty");
    }
    if name.len() > MAX_TAG_NAME_LEN {
        return fail("a tag name must be at most 128 bytes long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return fail("a tag name may only hold ASCII letters, digits, '.', '_' and '-'");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return fail("a tag name must start with a letter or digit");
    }
    if name.ends_with('.') {
        return fail("a tag name must not end with '.'");
    }
    if name.eq_ignore_ascii_case("tags.txt") {
        return fail("a tag name must not be tags.txt");
    }
    if is_windows_device_name(name) {
        return fail(
            "a tag name must not be a Windows device name (CON, PRN, AUX, NUL, COM1-9, LPT1-9)",
        );
    }
    Ok(())
}

/// CON, PRN, AUX, NUL, COM1–9, LPT1–9 in any case, alone or before an extension.
fn is_windows_device_name(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name).to_ascii_uppercase();
    match stem.as_str() {
        "CON" | "PRN" | "AUX" | "NUL" => true,
        s if s.len() == 4 && (s.starts_with("COM") || s.starts_with("LPT")) => {
            matches!(s.as_bytes()[3], b'1'..=b'9')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule `name` breaks: the message after `invalid tag name "<name>": `.
    fn rule(name: &str) -> String {
        let e = validate_tag_name(name).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidTagName(_)), "{e}");
        let prefix = format!("invalid tag name {name:?}: ");
        let message = e.to_string();
        message.strip_prefix(&prefix).expect(&message).to_string()
    }

    #[test]
    fn accepts_good_names() {
        for n in [
            "fp32",
            "INT8",
            "step-1000",
            "v1.2_b",
            "0",
            "a",
            "com10",
            "console",
        ] {
            assert!(validate_tag_name(n).is_ok(), "{n}");
        }
        assert!(validate_tag_name(&"a".repeat(128)).is_ok());
    }

    #[test]
    fn each_rule_has_its_message() {
        assert!(rule("").contains("empty"));
        assert!(rule(&"a".repeat(129)).contains("128"));
        assert!(rule("a b").contains("only hold"));
        assert!(rule("a/b").contains("only hold"));
        assert!(rule("é").contains("only hold"));
        assert!(rule("_a").contains("start"));
        assert!(rule(".a").contains("start"));
        assert!(rule("a.").contains("end"));
        assert!(rule("TAGS.TXT").contains("tags.txt"));
        for n in ["con", "PRN", "aux.txt", "Nul", "COM1", "lpt9.x.y", "com5"] {
            assert!(rule(n).contains("device"), "{n}");
        }
    }
}
