//! params.txt / updater.txt (first byte chooses): parse never panics; accepted tables
//! render and parse back equal. Also: names survive escape → unescape, and an escaped
//! name is one field of a line.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::internals::text::{ParamRef, escape_name, parse_table, render_table, unescape_name};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if let Ok(s) = std::str::from_utf8(rest) {
        let e = escape_name(s);
        assert!(!e.bytes().any(|b| b == b' ' || b < 0x20 || b == 0x7f), "{e:?}");
        assert_eq!(unescape_name(&e).expect("escaped name does not unescape"), s);
        if let Ok(u) = unescape_name(s) {
            // Unescaping is the inverse of escaping up to hex case and optional escapes.
            assert_eq!(unescape_name(&escape_name(&u)).unwrap(), u);
        }
    }
    let updater = mode & 1 == 1;
    let entry = if updater { "t/updater.txt" } else { "t/params.txt" };
    let rows = match parse_table(rest, entry, updater) {
        Ok(r) => r,
        Err(e) => return drop(e.to_string()),
    };
    for r in &rows {
        assert!(!r.name.is_empty() && !r.refs.is_empty() && (updater || r.refs.len() == 1));
        for p in &r.refs {
            assert_eq!(&ParamRef::parse(&p.to_string()).expect("rendered ref does not parse"), p);
        }
    }
    let text = render_table(rows.iter().map(|r| (r.name.as_str(), r.refs.as_slice())));
    let again = parse_table(text.as_bytes(), entry, updater).expect("rendered table does not parse");
    assert_eq!(again.len(), rows.len());
    for (a, b) in again.iter().zip(&rows) {
        assert_eq!((&a.name, &a.refs), (&b.name, &b.refs));
    }
});
