//! The text files of an archive: tags.txt, params.txt, updater.txt and sha256sums.txt.

use super::tag_name::validate_tag_name;
use crate::error::{Error, ErrorKind, Result};
use crate::keyed::KeyedSet;
use std::borrow::Cow;
use std::fmt;

/// Longest line accepted in tags.txt, in bytes.
pub const MAX_TAGS_LINE: usize = 64 * 1024;
/// Longest line accepted in params.txt / updater.txt / sha256sums.txt, in bytes.
pub const MAX_TABLE_LINE: usize = 1024 * 1024;
/// Refs on one updater.txt line at most: state arrays of one parameter (Adam has 2 to 4).
pub const MAX_UPDATER_ARRAYS: usize = 256;

/// A reference to a tensor file: `N` (this tag) or `TAG/N` (another tag).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParamRef {
    /// The owning tag as written, or `None` for the tag holding the table.
    pub tag: Option<String>,
    /// The file number.
    pub index: u64,
}

impl ParamRef {
    /// Parses `N` or `TAG/N`: N is a decimal u64 without sign or leading zeros.
    pub fn parse(s: &str) -> std::result::Result<ParamRef, String> {
        // (Byte searches: this runs once a table line, and a `char` pattern's search is
        // set up for long text; BENCHMARKS.md, P5.)
        let (tag, num) = match s
            .bytes()
            .position(|b| b == b'/')
            .map(|i| (&s[..i], &s[i + 1..]))
        {
            Some((t, n)) => {
                validate_tag_name(t).map_err(|e| format!("bad tag in reference {s:?}: {e}"))?;
                (Some(t.to_string()), n)
            }
            None => (None, s),
        };
        let index = parse_index(num).map_err(|why| format!("bad reference {s:?}: {why}"))?;
        Ok(ParamRef { tag, index })
    }
}

impl fmt::Display for ParamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tag {
            Some(t) => write!(f, "{t}/{}", self.index),
            None => write!(f, "{}", self.index),
        }
    }
}

/// Parses a file number: decimal digits, no sign, no leading zeros, fits in u64.
pub fn parse_index(s: &str) -> std::result::Result<u64, &'static str> {
    if s.is_empty() {
        return Err("the number is missing");
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the number must be decimal digits only");
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err("the number has a leading zero");
    }
    s.parse::<u64>()
        .map_err(|_| "the number does not fit in 64 bits")
}

/// Escapes a parameter name: `%`, space, bytes below 0x20 and 0x7F become `%XX`.
pub fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c == ' ' || (c as u32) < 0x20 || c as u32 == 0x7f {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Decodes `%XX` (either case) escapes; any other `%` is an error.
pub fn unescape_name(s: &str) -> std::result::Result<String, String> {
    unescape(s).map(Cow::into_owned)
}

/// [`unescape_name`], borrowing a name that has no escape (most: no copy of it).
pub(crate) fn unescape(s: &str) -> std::result::Result<Cow<'_, str>, String> {
    if !s.as_bytes().contains(&b'%') {
        return Ok(Cow::Borrowed(s));
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or_else(|| {
                format!("'%' at byte {i} of {s:?} is not followed by two hex digits")
            })?;
            let v = std::str::from_utf8(hex)
                .ok()
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!("'%' at byte {i} of {s:?} is not followed by two hex digits")
                })?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| format!("{s:?} decodes to bytes that are not UTF-8"))
}

/// Splits text into (1-based line number, line) pairs, accepting `\n` and `\r\n`,
/// skipping blank lines and refusing lines longer than `max_line` bytes.
fn lines<'t>(
    text: &'t str,
    entry: &str,
    max_line: usize,
) -> impl Iterator<Item = Result<(usize, &'t str)>> {
    let entry = entry.to_string();
    let mut offset = 0u64;
    // The lines found with memchr (a `char` pattern's search costs more a line).
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let t = rest?;
        Some(match memchr::memchr(b'\n', t.as_bytes()) {
            Some(i) => {
                rest = Some(&t[i + 1..]);
                &t[..i]
            }
            None => {
                rest = None;
                t
            }
        })
    })
    .enumerate()
    .filter_map(move |(i, raw)| {
        let at = offset;
        offset += raw.len() as u64 + 1;
        if raw.len() > max_line {
            return Some(Err(Error::new(ErrorKind::LimitExceeded {
                what: "line length",
                size: raw.len() as u64,
                limit: max_line as u64,
            })
            .in_entry(entry.clone())
            .at_line(i + 1)
            .at_offset(at)));
        }
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            None
        } else {
            Some(Ok((i + 1, line)))
        }
    })
}

fn utf8<'t>(bytes: &'t [u8], entry: &str) -> Result<&'t str> {
    std::str::from_utf8(bytes).map_err(|e| {
        Error::new(ErrorKind::Syntax("text is not valid UTF-8".into()))
            .in_entry(entry)
            .at_offset(e.valid_up_to() as u64)
    })
}

fn syntax(msg: String, entry: &str, line: usize) -> Error {
    Error::new(ErrorKind::Syntax(msg))
        .in_entry(entry)
        .at_line(line)
}

/// Parses tags.txt: valid tag names, no two equal ignoring ASCII case, at least one.
pub fn parse_tags_txt(bytes: &[u8]) -> Result<Vec<String>> {
    const ENTRY: &str = "tags.txt";
    let text = utf8(bytes, ENTRY)?;
    let mut tags: Vec<String> = Vec::new();
    let mut seen: KeyedSet<String> = KeyedSet::default();
    for item in lines(text, ENTRY, MAX_TAGS_LINE) {
        let (n, line) = item?;
        validate_tag_name(line).map_err(|e| e.in_entry(ENTRY).at_line(n))?;
        if !seen.insert(line.to_ascii_lowercase()) {
            return Err(syntax(
                format!("tag {line:?} is listed twice (tags ignore ASCII case)"),
                ENTRY,
                n,
            ));
        }
        tags.push(line.to_string());
    }
    Ok(tags)
}

/// Renders tags.txt.
pub fn render_tags_txt(tags: &[String]) -> String {
    let mut s = String::new();
    for t in tags {
        s.push_str(t);
        s.push('\n');
    }
    s
}

/// One parsed line of params.txt / updater.txt.
#[cfg(any(test, feature = "test-internals"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLine {
    /// The decoded name.
    pub name: String,
    /// The refs (exactly one for params.txt, one or more for updater.txt).
    pub refs: Vec<ParamRef>,
    /// The 1-based line number.
    pub line: usize,
}

/// Parses params.txt (`updater == false`: exactly one ref per line) or updater.txt
/// (one or more refs). Names must be unique; `entry` names the file in errors. The
/// reader streams lines through `for_each_table_line`; this collecting form is for the
/// tests and fuzz targets.
#[cfg(any(test, feature = "test-internals"))]
pub fn parse_table(bytes: &[u8], entry: &str, updater: bool) -> Result<Vec<TableLine>> {
    let mut out = Vec::new();
    for_each_table_line(bytes, entry, updater, |name, refs, line| {
        out.push(TableLine {
            name: name.into_owned(),
            refs: refs.to_vec(),
            line,
        });
        Ok(())
    })?;
    check_unique_names(out.iter().map(|l| (l.name.as_str(), l.line)), entry)?;
    Ok(out)
}

/// Refuses two equal names among `names` (name, line pairs, in line order), naming the
/// first line whose name an earlier line has. A table of up to [`SET_MAX_NAMES`] names
/// goes through a set of borrowed names (sorting them cost a fifth of describing a tag
/// of 1,000 names: callgrind, BENCHMARKS.md P5; keyed, so a file cannot choose names that
/// all hash alike); a larger one is sorted (24 bytes a name, where a set's table may take
/// 34), and the same line is named.
pub(crate) fn check_unique_names<'n>(
    names: impl Iterator<Item = (&'n str, usize)>,
    entry: &str,
) -> Result<()> {
    let repeat = if names.size_hint().1.is_some_and(|n| n <= SET_MAX_NAMES) {
        let mut seen: KeyedSet<&str> = Default::default();
        seen.reserve(names.size_hint().0);
        let mut names = names;
        names.find(|(name, _)| !seen.insert(name))
    } else {
        let mut order: Vec<(&str, usize)> = names.collect();
        order.sort_unstable();
        order
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .map(|w| w[1])
            .min_by_key(|&(_, line)| line)
    };
    match repeat {
        Some((name, n)) => Err(syntax(format!("name {name:?} appears twice"), entry, n)),
        None => Ok(()),
    }
}

/// The most names [`check_unique_names`] puts in a set (~0.5 MiB at most).
const SET_MAX_NAMES: usize = 1 << 14;

/// The line-by-line core of [`parse_table`]: calls `f(name, refs, line)` for each line,
/// in order, without collecting the lines (a reader keeps only what it needs of each:
/// a params.txt of 200,000 names must not cost a parsed copy of every line on top of
/// the tag's own table). Does not check that names are unique.
pub(crate) fn for_each_table_line<'t>(
    bytes: &'t [u8],
    entry: &str,
    updater: bool,
    mut f: impl FnMut(Cow<'t, str>, &[ParamRef], usize) -> Result<()>,
) -> Result<()> {
    let text = utf8(bytes, entry)?;
    let mut refs: Vec<ParamRef> = Vec::new();
    // Reused for every line: no allocation per line.
    let mut refs_raw: Vec<&str> = Vec::new();
    for item in lines(text, entry, MAX_TABLE_LINE) {
        let (n, line) = item?;
        let mut fields = split_spaces(line);
        let raw_name = fields.next().unwrap_or("");
        refs_raw.clear();
        refs_raw.extend(fields);
        let count = refs_raw.len();
        let empty_field = refs_raw.iter().any(|r| r.is_empty());
        if raw_name.is_empty() || empty_field {
            return Err(syntax(
                "fields must be separated by exactly one space, with no leading or trailing space"
                    .into(),
                entry,
                n,
            ));
        }
        if !updater && count != 1 {
            return Err(syntax(
                format!("expected `name ref`, found {} fields", count + 1),
                entry,
                n,
            ));
        }
        if count > MAX_UPDATER_ARRAYS {
            return Err(syntax(
                format!(
                    "{count} refs on one line; a parameter has at most {MAX_UPDATER_ARRAYS} \
                     updater state arrays"
                ),
                entry,
                n,
            ));
        }
        if updater && count == 0 {
            return Err(syntax(
                "expected `name ref [ref ...]`, found only a name".into(),
                entry,
                n,
            ));
        }
        let name = unescape(raw_name).map_err(|m| syntax(m, entry, n))?;
        if name.is_empty() {
            return Err(syntax("empty name".into(), entry, n));
        }
        refs.clear();
        for r in &refs_raw {
            refs.push(ParamRef::parse(r).map_err(|m| syntax(m, entry, n))?);
        }
        f(name, &refs, n)?;
    }
    Ok(())
}

/// `line.split(' ')`, searching bytes (short lines: a plain loop beats a `char`
/// pattern's set-up).
fn split_spaces(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(line);
    std::iter::from_fn(move || {
        let t = rest?;
        Some(match t.bytes().position(|b| b == b' ') {
            Some(i) => {
                rest = Some(&t[i + 1..]);
                &t[..i]
            }
            None => {
                rest = None;
                t
            }
        })
    })
}

/// The files a tag may take from another tag through shared.txt.
pub(crate) const SHAREABLE_FILES: [&str; 3] = ["graph.fb", "graph.pdmodel", "trainingConfig.fb"];

/// Parses a tag's shared.txt: `FILE TAG` lines (FILE one of the shareable files, TAG
/// a valid tag name), as (file, tag, line). The tag's existence is the caller's check.
pub fn parse_shared(bytes: &[u8], entry: &str) -> Result<Vec<(&'static str, String, usize)>> {
    let text = utf8(bytes, entry)?;
    let mut out = Vec::new();
    for item in lines(text, entry, MAX_TAGS_LINE) {
        let (n, line) = item?;
        let (file, tag) = line
            .split_once(' ')
            .ok_or_else(|| syntax("expected `FILE TAG`".into(), entry, n))?;
        let Some(file) = SHAREABLE_FILES.iter().copied().find(|f| *f == file) else {
            return Err(syntax(
                format!(
                    "{file:?} cannot be shared; only {}",
                    SHAREABLE_FILES.join(", ")
                ),
                entry,
                n,
            ));
        };
        validate_tag_name(tag).map_err(|e| e.in_entry(entry).at_line(n))?;
        out.push((file, tag.to_string(), n));
    }
    Ok(out)
}

/// Renders shared.txt.
pub fn render_shared<'r>(rows: impl IntoIterator<Item = (&'r str, &'r str)>) -> String {
    let mut s = String::new();
    for (file, tag) in rows {
        s.push_str(file);
        s.push(' ');
        s.push_str(tag);
        s.push('\n');
    }
    s
}

/// Renders params.txt / updater.txt lines.
pub fn render_table<'r>(rows: impl IntoIterator<Item = (&'r str, &'r [ParamRef])>) -> String {
    let mut s = String::new();
    for (name, refs) in rows {
        s.push_str(&escape_name(name));
        for r in refs {
            s.push(' ');
            s.push_str(&r.to_string());
        }
        s.push('\n');
    }
    s
}

/// Parses sha256sums.txt: `<64 hex>  <path>` (or `<hex> *<path>`) per line.
pub fn parse_sums(bytes: &[u8], entry: &str) -> Result<Vec<(String, String)>> {
    Ok(parse_sums_lines(bytes, entry)?
        .into_iter()
        .map(|(hex, path, _)| (hex, path))
        .collect())
}

/// One line of a tag's shards.txt (a sharded save's per-shard digests, docs/FORMAT.md):
/// bytes `offset..offset + len` of tensor file `path` (relative to the tag), their
/// SHA-256, and the rank that wrote them (`None`: the committing rank's record header).
/// A box line (`boxed`) says which box of the tensor whose data is bytes
/// `offset..offset + len` the rank wrote; its SHA-256 is of the box's bytes in the box's
/// row-major order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardLine {
    pub path: String,
    pub offset: u64,
    pub len: u64,
    pub sha256: String,
    pub writer: Option<u32>,
    /// A box: its range `start..end` on every dimension (`box=0:4,2:6`).
    pub boxed: Option<Vec<std::ops::Range<u64>>>,
    /// 1-based line number (0 when rendered, not parsed).
    pub line: usize,
}

impl ShardLine {
    /// Who wrote the range, as messages say it: "rank 3", or "the committing rank".
    pub fn writer_name(&self) -> String {
        self.writer
            .map_or("the committing rank".to_string(), |w| format!("rank {w}"))
    }
}

/// Parses shards.txt: `path SP offset SP length SP sha256 SP writer [SP box=a:b,c:d...]`
/// per line, `writer` a rank or `-`.
pub(crate) fn parse_shards(bytes: &[u8], entry: &str) -> Result<Vec<ShardLine>> {
    let text = utf8(bytes, entry)?;
    let mut out = Vec::new();
    for item in lines(text, entry, MAX_TABLE_LINE) {
        let (n, line) = item?;
        let f: Vec<&str> = line.split(' ').collect();
        let (path, offset, len, sha, writer, boxed) = match f[..] {
            [path, offset, len, sha, writer] => (path, offset, len, sha, writer, None),
            [path, offset, len, sha, writer, b] => (path, offset, len, sha, writer, Some(b)),
            _ => {
                return Err(syntax(
                    "expected `<path> <offset> <length> <sha256> <rank or -> [box=<start>:<end>,...]`"
                        .into(),
                    entry,
                    n,
                ));
            }
        };
        let boxed = match boxed {
            None => None,
            Some(b) => Some(parse_box(b).ok_or_else(|| {
                syntax(
                    format!("{b:?} is not a box (`box=<start>:<end>,...`, start <= end)"),
                    entry,
                    n,
                )
            })?),
        };
        let num = |v: &str, what: &str| {
            v.parse::<u64>().map_err(|_| {
                syntax(
                    format!("the {what} {v:?} is not a decimal number"),
                    entry,
                    n,
                )
            })
        };
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(syntax("the hash is not 64 hex digits".into(), entry, n));
        }
        let writer = match writer {
            "-" => None,
            w => Some(
                w.parse::<u32>()
                    .map_err(|_| syntax(format!("the rank {w:?} is not a number"), entry, n))?,
            ),
        };
        if path.is_empty() {
            return Err(syntax("empty path".into(), entry, n));
        }
        out.push(ShardLine {
            path: path.to_string(),
            offset: num(offset, "offset")?,
            len: num(len, "length")?,
            sha256: sha.to_ascii_lowercase(),
            writer,
            boxed,
            line: n,
        });
    }
    Ok(out)
}

/// `box=0:4,2:6` as ranges; `None` when malformed.
fn parse_box(field: &str) -> Option<Vec<std::ops::Range<u64>>> {
    let body = field.strip_prefix("box=")?;
    if body.is_empty() {
        return Some(Vec::new());
    }
    body.split(',')
        .map(|r| {
            let (a, b) = r.split_once(':')?;
            let (a, b) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
            (a <= b).then_some(a..b)
        })
        .collect()
}

/// Renders shards.txt (see [`parse_shards`]).
pub(crate) fn render_shards(rows: &[ShardLine]) -> String {
    let mut s = String::new();
    for r in rows {
        let w = r.writer.map_or("-".to_string(), |w| w.to_string());
        s.push_str(&format!(
            "{} {} {} {} {w}",
            r.path, r.offset, r.len, r.sha256
        ));
        if let Some(b) = &r.boxed {
            s.push_str(&format!(" box={}", super::sharded::boxes::render(b)));
        }
        s.push('\n');
    }
    s
}

/// [`parse_sums`] with each row's line number (1-based; blank lines count).
pub fn parse_sums_lines(bytes: &[u8], entry: &str) -> Result<Vec<(String, String, usize)>> {
    let text = utf8(bytes, entry)?;
    let mut out = Vec::new();
    for item in lines(text, entry, MAX_TABLE_LINE) {
        let (n, line) = item?;
        let (hex, rest) = line
            .split_once(' ')
            .ok_or_else(|| syntax("expected `<sha256>  <path>`".into(), entry, n))?;
        let path = rest
            .strip_prefix(' ')
            .or_else(|| rest.strip_prefix('*'))
            .ok_or_else(|| syntax("expected two spaces between hash and path".into(), entry, n))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(syntax("the hash is not 64 hex digits".into(), entry, n));
        }
        if path.is_empty() {
            return Err(syntax("empty path".into(), entry, n));
        }
        out.push((hex.to_ascii_lowercase(), path.to_string(), n));
    }
    Ok(out)
}

/// Renders sha256sums.txt lines.
pub fn render_sums(rows: &[(String, String)]) -> String {
    let mut s = String::new();
    for (hex, path) in rows {
        s.push_str(hex);
        s.push_str("  ");
        s.push_str(path);
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_name_is_named_at_its_first_repeat_by_the_set_and_by_the_sort() {
        for n in [10, SET_MAX_NAMES + 10] {
            let mut names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
            // "n5" again at line n - 1, and "n3" again at line n - 5 (the first repeat).
            names[n - 2] = "n5".into();
            names[n - 6] = "n3".into();
            let err = check_unique_names(
                names.iter().enumerate().map(|(i, s)| (s.as_str(), i + 1)),
                "t/params.txt",
            )
            .unwrap_err();
            assert_eq!(err.location().line, Some(n - 5), "{n} names: {err}");
            assert!(err.to_string().contains("\"n3\" appears twice"), "{err}");
            names[n - 2] = "x".into();
            names[n - 6] = "y".into();
            let ok = check_unique_names(
                names.iter().enumerate().map(|(i, s)| (s.as_str(), i + 1)),
                "t/params.txt",
            );
            assert!(ok.is_ok(), "{n} names");
        }
    }

    #[test]
    fn shard_lines_with_boxes_round_trip_and_bad_boxes_are_syntax_errors() {
        let sha = "ab".repeat(32);
        let text = format!(
            "params/0.lodtensor 0 64 {sha} -\nparams/0.lodtensor 64 96 {sha} 3 box=0:4,2:6\n"
        );
        let lines = parse_shards(text.as_bytes(), "t/shards.txt").unwrap();
        assert_eq!(lines[0].boxed, None);
        assert_eq!(lines[1].boxed, Some(vec![0..4, 2..6]));
        assert_eq!(lines[1].writer, Some(3));
        assert_eq!(render_shards(&lines), text);
        for bad in ["box=4:2", "box=0:4,", "box=a:b", "bax=0:1", "box=1"] {
            let t = format!("params/0.lodtensor 64 96 {sha} 3 {bad}\n");
            let e = parse_shards(t.as_bytes(), "t/shards.txt")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("is not a box") && e.contains("line 1"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn escape_round_trip() {
        for n in [
            "plain",
            "my param%",
            "a\tb\nc\x7f",
            "my/param/name",
            "&MyParam*",
            "ü ñ",
        ] {
            let e = escape_name(n);
            assert!(!e.contains(' ') && !e.contains('\n'));
            assert_eq!(unescape_name(&e).unwrap(), n);
        }
        assert_eq!(escape_name("my param%"), "my%20param%25");
        assert_eq!(unescape_name("a%2fb%2F").unwrap(), "a/b/");
        for bad in ["%", "%2", "%zz", "a%g0", "%FF"] {
            assert!(unescape_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refs_parse() {
        assert_eq!(
            ParamRef::parse("0").unwrap(),
            ParamRef {
                tag: None,
                index: 0
            }
        );
        assert_eq!(
            ParamRef::parse("fp32/17").unwrap(),
            ParamRef {
                tag: Some("fp32".into()),
                index: 17
            }
        );
        assert_eq!(
            ParamRef::parse("18446744073709551615").unwrap().index,
            u64::MAX
        );
        for bad in [
            "",
            "01",
            "+1",
            "-1",
            "1.0",
            "a/",
            "/1",
            "a/b/1",
            "..//1",
            "18446744073709551616",
            " 1",
            "con/1",
        ] {
            assert!(ParamRef::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tags_txt_rules() {
        assert_eq!(parse_tags_txt(b"a\r\n\nB\n\n").unwrap(), vec!["a", "B"]);
        let e = parse_tags_txt(b"fp32\nFP32\n").unwrap_err();
        assert_eq!(e.location().line, Some(2));
        assert_eq!(e.location().entry.as_deref(), Some("tags.txt"));
        let e = parse_tags_txt(b"ok\nbad name\n").unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidTagName { .. }));
        assert_eq!(e.location().line, Some(2));
        let long = format!("a\n{}\n", "b".repeat(MAX_TAGS_LINE + 1));
        assert!(matches!(
            parse_tags_txt(long.as_bytes()).unwrap_err().kind(),
            ErrorKind::LimitExceeded { .. }
        ));
        assert!(parse_tags_txt(b"\xff\n").is_err());
    }

    #[test]
    fn tables_parse_and_name_lines() {
        let t = parse_table(
            b"conv1.w 0\nconv1.b shared/3\r\nmy%20param%25 1\n",
            "t/params.txt",
            false,
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[2].name, "my param%");
        assert_eq!(t[1].refs[0].tag.as_deref(), Some("shared"));
        for (bad, line) in [
            (&b"a 0\nb\n"[..], 2),
            (b"a 0 1\n", 1),
            (b"a  0\n", 1),
            (b"a 0\na 1\n", 2),
            (b"%41%4 0\n", 1),
            (b"a 00\n", 1),
            (b" 0\n", 1),
        ] {
            let e = parse_table(bad, "t/params.txt", false).unwrap_err();
            assert_eq!(e.location().line, Some(line), "{bad:?}");
            assert_eq!(e.location().entry.as_deref(), Some("t/params.txt"));
        }
        let u = parse_table(b"w 0 1\nb other/2 3\n", "t/updater.txt", true).unwrap();
        assert_eq!(u[0].refs.len(), 2);
        assert!(parse_table(b"w\n", "t/updater.txt", true).is_err());
        // At most MAX_UPDATER_ARRAYS refs on a line, so a short file cannot hold millions.
        let line = |n: usize| format!("ok 0\nw{}\n", " 0".repeat(n));
        assert!(parse_table(line(MAX_UPDATER_ARRAYS).as_bytes(), "u", true).is_ok());
        let e = parse_table(line(MAX_UPDATER_ARRAYS + 1).as_bytes(), "u", true).unwrap_err();
        assert_eq!(e.location().line, Some(2));
        assert!(
            e.to_string().contains("at most 256 updater state arrays"),
            "{e}"
        );
        let rendered = render_table(t.iter().map(|l| (l.name.as_str(), l.refs.as_slice())));
        assert_eq!(rendered, "conv1.w 0\nconv1.b shared/3\nmy%20param%25 1\n");
    }

    #[test]
    fn sums_parse() {
        let h = "a".repeat(64);
        let s = render_sums(&[(h.clone(), "params/0.lodtensor".into())]);
        assert_eq!(
            parse_sums(s.as_bytes(), "x").unwrap()[0].1,
            "params/0.lodtensor"
        );
        assert!(parse_sums(b"abc  x\n", "x").is_err());
    }
}
