//! tags.txt: parse never panics; accepted names are valid, unique ignoring ASCII
//! case, and survive render → parse unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::internals::text::{ParamRef, parse_tags_txt, render_tags_txt};
use modelzip::validate_tag_name;
use std::collections::HashSet;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        // The same name rules reached directly and through a `TAG/N` reference.
        let _ = validate_tag_name(s).map_err(|e| e.to_string());
        if let Ok(r) = ParamRef::parse(s) {
            assert_eq!(ParamRef::parse(&r.to_string()).expect("rendered ref does not parse"), r);
        }
    }
    let tags = match parse_tags_txt(data) {
        Ok(t) => t,
        Err(e) => return drop(e.to_string()),
    };
    let mut seen = HashSet::new();
    for t in &tags {
        validate_tag_name(t).expect("accepted tag name is invalid");
        assert!(seen.insert(t.to_ascii_lowercase()), "duplicate tag accepted: {t:?}");
        assert!(ParamRef::parse(&format!("{t}/0")).is_ok(), "tag {t:?} not usable in a ref");
    }
    let text = render_tags_txt(&tags);
    assert_eq!(parse_tags_txt(text.as_bytes()).expect("rendered tags.txt does not parse"), tags);
});
