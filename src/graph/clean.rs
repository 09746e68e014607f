//! Names made safe for a terminal, for every human-readable rendering of a graph.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as is: control characters and the invisible
/// format characters that reorder or hide text (bidi overrides, zero-width characters).
fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// A name made safe for a terminal (used by [`dump::text`](crate::dump::text) and by the CLI's human output):
/// control and invisible format characters written as in a Rust string literal (`\n`,
/// `\u{1b}`), so a hostile name can neither run terminal escape sequences nor start a
/// fake line. Everything else, backslashes included, stays as it is. Attribute strings
/// in [`dump::text`](crate::dump::text) are quoted with `{:?}` instead.
pub fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if is_unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}
