//! A whole archive from memory: open never panics (zip bombs are limited to 64 MiB),
//! and every tag, table, tensor, graph, training config and metadata of an opened
//! archive can be walked; verify() runs to the end.
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::dump;
use modelzip::{Graph, OpenOptions, TrainingConfig};
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let limits = OpenOptions { max_inflated_size: 64 << 20, ..OpenOptions::default() };
    let a = match limits.from_reader(Cursor::new(data)) {
        Ok(a) => a,
        Err(e) => return drop(e.to_string()),
    };
    let _ = (a.default_tag(), a.dead_bytes(), a.len_bytes(), format!("{a:?}"));
    for name in a.entry_names() {
        let _ = (a.entry_stored_size(name), a.entry_bytes(name).map(|b| b.len()));
    }
    for t in a.tags() {
        assert_eq!(a.canonical_tag(&t.to_ascii_uppercase()), Some(t.as_str()));
        let tag = match a.tag(t) {
            Ok(tag) => tag,
            Err(e) => {
                drop(e.to_string());
                continue;
            }
        };
        let _ = tag.own_entries();
        for p in tag.params() {
            assert_eq!(p.location.tag == *t, !p.location.shared);
            if let Ok(d) = tag.param(&p.name) {
                let v = d.view();
                let _ = (v.to_f32_vec(), v.numel(), v.lod().len());
                assert_eq!(tag.tensor(&p.location).unwrap(), d);
            }
        }
        for u in tag.updater() {
            for loc in &u.arrays {
                let _ = tag.tensor(loc).map(|d| d.view().to_owned());
            }
        }
        if let Ok(Some((enc, bytes))) = tag.graph() {
            if let Ok(g) = Graph::decode(enc, &bytes) {
                let _ = (dump::text(&g), dump::json(&g), g.encode(enc));
            }
        }
        if let Ok(Some(b)) = tag.training_config() {
            let _ = TrainingConfig::decode(&b).map(|c| c.encode());
        }
        if let Ok(Some(m)) = tag.metadata() {
            let _ = serde_json::from_slice::<serde_json::Value>(&m);
        }
    }
    let report = a.verify();
    for p in &report.problems {
        let _ = (&p.entry, &p.message);
    }
});
