//! The library's equivalent of `modelzip tags`: every tag of an archive, oldest first,
//! with its parameter count, bytes of its own, bytes shared from other tags, graph
//! encoding and dtypes; the default (newest) tag is marked.
//!
//! `cargo run --example list_tags -- ARCHIVE`

use modelzip::Archive;
use std::collections::{BTreeSet, HashSet};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: list_tags ARCHIVE")?;
    let archive = Archive::open(&path)?;
    let default = archive.default_tag().map(str::to_string);
    for name in archive.tags() {
        let tag = archive.tag(name)?;
        let own: u64 = tag
            .own_entries()
            .iter()
            .filter_map(|e| archive.entry_stored_size(e))
            .sum();
        let mut shared = HashSet::new();
        let mut dtypes = BTreeSet::new();
        for p in tag.params() {
            if p.location.shared {
                shared.insert(p.location.entry().to_string());
            }
            dtypes.insert(tag.tensor(&p.location)?.view().dtype().name());
        }
        let shared: u64 = shared
            .iter()
            .filter_map(|e| archive.entry_stored_size(e))
            .sum();
        let graph = match tag.graph()? {
            Some((enc, _)) => enc.file_name(),
            None => "-",
        };
        let mark = if Some(name) == default.as_ref() {
            "*"
        } else {
            " "
        };
        println!(
            "{mark} {name:<20} {:>5} params  {own:>10} B own  {shared:>10} B shared  {graph:<14} {}",
            tag.params().len(),
            dtypes.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    Ok(())
}
