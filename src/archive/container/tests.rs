use super::read::*;
use super::write::{EntrySpec, ZipOut};
use super::*;

#[test]
fn round_trip_and_alignment() {
    let mut out = ZipOut::new(Vec::new(), 0);
    out.write_bytes("a.txt", b"hello hello hello", true)
        .unwrap();
    let e = out
        .write_entry(EntrySpec {
            align_after: Some(2),
            ..EntrySpec::stored(
                "t/params/0.lodtensor",
                crc32fast::hash(b"xyzw"),
                &[b"xy", b"zw"],
            )
        })
        .unwrap();
    assert_eq!((e.data_offset + 2) % 64, 0);
    let (bytes, end) = out.finish(b"").unwrap();
    assert_eq!(end, bytes.len() as u64);
    let dir = parse(&bytes).unwrap();
    assert_eq!(dir.entries.len(), 2);
    let e = &dir.entries[dir.index.get(&dir.entries, "t/params/0.lodtensor").unwrap()];
    assert_eq!(
        &bytes[e.data_offset as usize..e.data_end() as usize],
        b"xyzw"
    );
}

#[test]
fn hostile_headers_are_refused() {
    let mut out = ZipOut::new(Vec::new(), 0);
    out.write_bytes("a", b"abc", false).unwrap();
    let (good, _) = out.finish(b"").unwrap();
    // Truncation anywhere must error, never panic.
    for cut in 0..good.len() {
        let _ = parse(&good[..cut]);
    }
    // Any single-byte corruption must error or parse, never panic.
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0xff;
        let _ = parse(&b);
    }
    // Local name differing from the central directory.
    let mut b = good.clone();
    b[30] = b'b';
    assert!(
        parse(&b)
            .unwrap_err()
            .to_string()
            .contains("local header name")
    );
}

/// (file, descriptor length of each entry in central-directory order).
const FOREIGN: [(&str, &[u8], &[u64]); 4] = [
    (
        "python-streamed.zip",
        include_bytes!("../../../tests/fixtures/foreign/python-streamed.zip"),
        &[16, 16, 24],
    ),
    (
        "infozip-fd.zip",
        include_bytes!("../../../tests/fixtures/foreign/infozip-fd.zip"),
        &[16, 16, 16],
    ),
    (
        "infozip-pipe.zip",
        include_bytes!("../../../tests/fixtures/foreign/infozip-pipe.zip"),
        &[16, 16, 16],
    ),
    (
        "infozip-stdin.zip",
        include_bytes!("../../../tests/fixtures/foreign/infozip-stdin.zip"),
        &[16, 16, 16, 24],
    ),
];

#[test]
fn foreign_descriptors_are_measured_exactly() {
    for (file, bytes, lens) in FOREIGN {
        let dir = parse(bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_lazy_agrees(bytes, file);
        let found: Vec<u64> = dir
            .entries
            .iter()
            .map(|e| u64::from(e.descriptor_len))
            .collect();
        assert_eq!(found, lens, "{file}");
        // The entries tile the file up to the central directory: each one's footprint
        // ends where the next local header (or the directory) starts.
        let mut pos = 0;
        for e in &dir.entries {
            assert_eq!(e.header_offset, pos, "{file}: {}", e.name);
            pos += e.footprint();
        }
        assert_eq!(pos, dir.cd_offset, "{file}");
    }
}

#[test]
fn an_overlap_with_a_zip64_descriptor_is_refused() {
    let (_, bytes, _) = FOREIGN[0];
    let dir = parse(bytes).unwrap();
    let mut entries = dir.entries.clone();
    // Move the entry before the Zip64 descriptor's entry to 8 bytes before that
    // descriptor's end (a count of 16 bytes missed them; of 12, by 12 bytes).
    assert_eq!(entries[2].descriptor_len, 24);
    let end = entries[2].header_offset + entries[2].footprint();
    entries[1].header_offset = end - 8;
    let e = check_overlaps(&mut entries).unwrap_err().to_string();
    assert!(e.contains("overlap"), "{e}");
    entries[1].header_offset = end;
    check_overlaps(&mut entries).unwrap();
}

/// Entries listed in file order (the common case, checked without sorting) and the same
/// entries listed in another order (sorted first) give the same verdicts and limits.
#[test]
fn overlaps_are_found_in_file_order_and_in_any_other() {
    let (_, bytes, _) = FOREIGN[0];
    let dir = parse_lazy(bytes).unwrap();
    let in_order = dir.entries.clone();
    assert!(
        in_order
            .windows(2)
            .all(|w| w[0].header_offset < w[1].header_offset)
    );
    let limits = |entries: &[ZipEntry]| {
        let mut l: Vec<(String, Option<std::num::NonZeroU64>)> = entries
            .iter()
            .map(|e| (e.name.to_string(), e.unchecked_until))
            .collect();
        l.sort();
        l
    };
    let mut a = in_order.clone();
    let mut b: Vec<ZipEntry> = in_order.iter().rev().cloned().collect();
    check_overlaps(&mut a).unwrap();
    check_overlaps(&mut b).unwrap();
    assert_eq!(limits(&a), limits(&b));
    // The first entry's data made 1 byte longer runs into the second's header.
    let mut a = in_order.clone();
    a[0].compressed_size += (a[1].header_offset - a[0].header_offset) - a[0].footprint() + 1;
    let mut b: Vec<ZipEntry> = a.iter().rev().cloned().collect();
    let (ea, eb) = (check_overlaps(&mut a), check_overlaps(&mut b));
    let ea = ea.unwrap_err().to_string();
    assert!(ea.contains("overlap"), "{ea}");
    assert_eq!(ea, eb.unwrap_err().to_string());
}

/// A one-entry archive ("a", stored "abc") whose entry has flag bit 3 set and
/// `descriptor` after its data.
fn with_descriptor(descriptor: &[u8]) -> Vec<u8> {
    let mut out = ZipOut::new(Vec::new(), 0);
    out.write_bytes("a", b"abc", false).unwrap();
    let (plain, _) = out.finish(b"").unwrap();
    let data_end = 30 + 1 + 3;
    let mut b = plain[..data_end].to_vec();
    b.extend_from_slice(descriptor);
    b.extend_from_slice(&plain[data_end..]);
    let cd = data_end + descriptor.len();
    b[6] |= FLAG_DESCRIPTOR as u8;
    b[cd + 8] |= FLAG_DESCRIPTOR as u8;
    let eocd = b.len() - 22;
    b[eocd + 16..eocd + 20].copy_from_slice(&(cd as u32).to_le_bytes());
    b
}

/// The local header here has no Zip64 extra field: the 8-byte forms after it are accepted
/// too (FORMAT.md, "Zip container": a streaming writer learns the sizes' width last).
#[test]
fn all_four_descriptor_forms_are_measured() {
    let crc = crc32fast::hash(b"abc").to_le_bytes();
    let sig = SIG_DESCRIPTOR.to_le_bytes();
    let (s32, s64) = (3u32.to_le_bytes(), 3u64.to_le_bytes());
    let forms: [Vec<u8>; 4] = [
        [&crc[..], &s32, &s32].concat(),
        [&sig[..], &crc, &s32, &s32].concat(),
        [&crc[..], &s64, &s64].concat(),
        [&sig[..], &crc, &s64, &s64].concat(),
    ];
    for d in forms {
        let bytes = with_descriptor(&d);
        let dir = parse(&bytes).unwrap_or_else(|e| panic!("{} bytes: {e}", d.len()));
        assert_eq!(u64::from(dir.entries[0].descriptor_len), d.len() as u64);
        assert_eq!(dir.entries[0].footprint(), dir.cd_offset);
    }
    // A descriptor that does not repeat the central directory's CRC and sizes.
    let wrong = [&sig[..], &crc, &s32, &2u32.to_le_bytes()].concat();
    let e = parse(&with_descriptor(&wrong)).unwrap_err();
    assert!(e.to_string().contains("no data descriptor"), "{e}");
    assert_eq!(e.location().offset, Some(34));
    assert_eq!(e.location().entry.as_deref(), Some("a"));
}

/// Reads `bytes` as `pread` reads a file: an error past the end.
fn reader(bytes: &[u8]) -> impl Fn(&mut [u8], u64) -> std::io::Result<()> + '_ {
    move |buf, at| {
        let start = usize::try_from(at).map_err(std::io::Error::other)?;
        match bytes.get(start..start + buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(std::io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// What a parse found, without `read_head` (which says only how it was found).
fn outcome(r: Result<Directory>) -> std::result::Result<Vec<(String, u64, u64)>, String> {
    r.map(|d| {
        d.entries
            .iter()
            .map(|e| {
                (
                    e.name.to_string(),
                    e.data_offset,
                    u64::from(e.descriptor_len),
                )
            })
            .collect()
    })
    .map_err(|e| e.to_string())
}

/// What [`parse_lazy`] and then [`check_local_lazy`] of every entry it left unread found,
/// the headers read with `read_at` where that path applies: each entry's name and data
/// offset, or that something was refused. It must accept exactly what [`parse`] accepts,
/// with the same offsets ([`eager_offsets`]).
fn lazy_outcome(
    b: &[u8],
    read_at: Option<ReadAt<'_>>,
) -> std::result::Result<Vec<(String, u64)>, ()> {
    let dir = parse_lazy(b).map_err(drop)?;
    (0..dir.entries.len())
        .map(|i| {
            let e = &dir.entries[i];
            let start = match e.unchecked_until {
                Some(_) => {
                    check_local_lazy(b, read_at, &dir.entries, i, dir.cd_offset)
                        .map_err(drop)?
                        .0
                }
                None => e.data_offset,
            };
            Ok((e.name.to_string(), start))
        })
        .collect()
}

/// [`parse`]'s answer as [`lazy_outcome`] gives it.
fn eager_offsets(b: &[u8]) -> std::result::Result<Vec<(String, u64)>, ()> {
    parse(b)
        .map(|d| {
            d.entries
                .iter()
                .map(|e| (e.name.to_string(), e.data_offset))
                .collect()
        })
        .map_err(drop)
}

/// The lazy open agrees with the eager one, with its header reads through the map and
/// through `read_at`.
fn assert_lazy_agrees(b: &[u8], what: &str) {
    let eager = eager_offsets(b);
    assert_eq!(lazy_outcome(b, None), eager, "{what}: lazy, map");
    assert_eq!(
        lazy_outcome(b, Some(&reader(b))),
        eager,
        "{what}: lazy, read"
    );
}

/// An extra field that pushes an entry's data into the next entry: the eager parse
/// refuses the archive; the lazy open accepts the central directory and the read of that
/// entry refuses it (saying so), while the next entry reads.
#[test]
fn an_extra_field_into_the_next_entry_is_refused_when_read() {
    let mut out = ZipOut::new(Vec::new(), 0);
    out.write_bytes("a", b"abcdef", false).unwrap();
    out.write_bytes("b", b"ghijkl", false).unwrap();
    let (mut b, _) = out.finish(b"").unwrap();
    // Entry "a": no extra field; say it has 10 bytes of one (its data then ends 4 bytes
    // into "b"'s local header).
    assert_eq!(u16::from_le_bytes([b[28], b[29]]), 0);
    b[28] = 10;
    assert!(parse(&b).unwrap_err().to_string().contains("overlap"));
    let dir = parse_lazy(&b).unwrap();
    let e = check_local_lazy(&b, None, &dir.entries, 0, dir.cd_offset)
        .unwrap_err()
        .to_string();
    assert!(e.contains("overlaps the next entry"), "{e}");
    check_local_lazy(&b, None, &dir.entries, 1, dir.cd_offset).unwrap();
    assert_lazy_agrees(&b, "extra field");
}

/// Local headers read with `pread` ([`parse_mapped`]) must give exactly what the map gives:
/// every hostile archive of tests/hostile and every single-byte corruption of the local
/// headers of an archive of far-apart entries (the layout that takes the read path).
#[test]
fn local_headers_read_or_mapped_agree_on_every_input() {
    let hostile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut n = 0;
    for f in std::fs::read_dir(&hostile).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|x| x == "zip") {
            let b = std::fs::read(&f).unwrap();
            assert_lazy_agrees(&b, &f.display().to_string());
            assert_eq!(
                outcome(parse(&b)),
                outcome(parse_all_read(&b, &reader(&b))),
                "{}",
                f.display()
            );
            n += 1;
        }
    }
    assert!(n > 100, "only {n} hostile archives");

    let mut out = ZipOut::new(Vec::new(), 0);
    let big = vec![7u8; 70_000];
    let mut headers = vec![];
    for i in 0..3 {
        let name = format!("t/params/{i}.lodtensor");
        let e = out
            .write_entry(EntrySpec {
                align_after: Some(20),
                ..EntrySpec::stored(&name, crc32fast::hash(&big), &[&big])
            })
            .unwrap();
        headers.push((e.header_offset as usize, e.data_offset as usize));
    }
    let (good, _) = out.finish(b"").unwrap();
    let dir = parse_mapped(&good, &reader(&good)).unwrap();
    assert!(
        dir.entries.iter().all(|e| e.read_head.is_some()),
        "far apart: read"
    );
    assert!(
        parse(&good)
            .unwrap()
            .entries
            .iter()
            .all(|e| e.read_head.is_none())
    );
    assert_eq!(
        outcome(parse(&good)),
        outcome(parse_mapped(&good, &reader(&good)))
    );
    let mut refused = 0;
    for &(h, d) in &headers {
        for i in h..d {
            for flip in [0xffu8, 0x01, 0x80] {
                let mut b = good.clone();
                b[i] ^= flip;
                let mapped = outcome(parse(&b));
                refused += usize::from(mapped.is_err());
                assert_lazy_agrees(&b, &format!("byte {i} ^ {flip:#x}"));
                assert_eq!(
                    mapped,
                    outcome(parse_mapped(&b, &reader(&b))),
                    "byte {i} ^ {flip:#x}"
                );
            }
        }
    }
    assert!(refused > 50, "corruptions refused: {refused}");
}

/// Entries packed close together are checked through the map (one fault covers many),
/// and a reader that fails sends the check to the map too.
#[test]
fn dense_entries_and_failed_reads_use_the_map() {
    let mut out = ZipOut::new(Vec::new(), 0);
    for i in 0..10 {
        out.write_bytes(&format!("a/{i}"), b"small", false).unwrap();
    }
    let (b, _) = out.finish(b"").unwrap();
    let dir = parse_mapped(&b, &reader(&b)).unwrap();
    assert!(dir.entries.iter().all(|e| e.read_head.is_none()));
    let failing = |_: &mut [u8], _: u64| Err(std::io::ErrorKind::Other.into());
    let dir = parse_all_read(&b, &failing).unwrap();
    assert!(dir.entries.iter().all(|e| e.read_head.is_none()));
    assert_eq!(outcome(Ok(dir)), outcome(parse(&b)));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Archives mixing small and large entries (so some headers take the `pread` path
    /// and some the map, decided by their neighbours), with one byte of a local header
    /// (or, one time in four, anywhere) changed: [`parse_mapped`] answers exactly as
    /// [`parse`] does.
    #[test]
    fn parse_mapped_agrees_with_parse_on_mixed_archives(
        sizes in proptest::collection::vec(
            proptest::prop_oneof![0usize..300, 60_000usize..140_000], 1..12),
        which in proptest::prelude::any::<proptest::sample::Index>(),
        offset in proptest::prelude::any::<proptest::sample::Index>(),
        anywhere in 0u8..4,
        flip in 1u8..=255,
    ) {
        let mut out = ZipOut::new(Vec::new(), 0);
        let mut headers = vec![];
        for (i, &n) in sizes.iter().enumerate() {
            let data = vec![(i % 251) as u8; n];
            let name = format!("t/params/{i}.lodtensor");
            let e = out
                .write_entry(EntrySpec::stored(&name, crc32fast::hash(&data), &[&data]))
                .unwrap();
            headers.push((e.header_offset as usize, e.data_offset as usize));
        }
        let (good, _) = out.finish(b"").unwrap();
        let dir = parse_mapped(&good, &reader(&good)).unwrap();
        // Read with `pread`: exactly the headers with fewer than 4 in their 64 KiB block.
        for (e, &(h, _)) in dir.entries.iter().zip(&headers) {
            let in_block = headers.iter().filter(|&&(o, _)| o >> 16 == h >> 16).count();
            proptest::prop_assert_eq!(e.read_head.is_some(), in_block < 4, "header at {}", h);
        }
        proptest::prop_assert_eq!(outcome(parse(&good)), outcome(Ok(dir)));
        let mut b = good.clone();
        let i = if anywhere == 0 {
            offset.index(b.len())
        } else {
            let (h, d) = headers[which.index(headers.len())];
            h + offset.index(d - h)
        };
        b[i] ^= flip;
        let eager = eager_offsets(&b);
        proptest::prop_assert_eq!(lazy_outcome(&b, None), eager.clone(), "lazy, map: byte {}", i);
        proptest::prop_assert_eq!(lazy_outcome(&b, Some(&reader(&b))), eager, "lazy, read: byte {}", i);
        proptest::prop_assert_eq!(
            outcome(parse(&b)),
            outcome(parse_mapped(&b, &reader(&b))),
            "byte {}",
            i
        );
    }
}

#[test]
fn write_bytes_stores_what_the_default_reader_would_refuse_deflated() {
    // 16 MiB + 1 of zeros deflates about 1000:1, over the reader's 100:1 limit for
    // entries over 16 MiB: stored. 16 MiB exactly is not held to the ratio: deflated.
    // Text that compresses only about 2:1 stays deflated at any size.
    let free = crate::archive::INFLATE_RATIO_FREE as usize;
    let zeros = vec![0u8; free + 1];
    let mut noisy = Vec::with_capacity(free + 1);
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    while noisy.len() <= free {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noisy.push(b'a' + (x % 4) as u8);
    }
    let mut out = ZipOut::new(Vec::new(), 0);
    let big = out.write_bytes("big", &zeros, true).unwrap();
    let free_sized = out.write_bytes("free", &zeros[..free], true).unwrap();
    let text = out.write_bytes("text", &noisy, true).unwrap();
    assert_eq!(big.method, METHOD_STORED);
    assert_eq!(big.compressed_size, free as u64 + 1);
    assert_eq!(free_sized.method, METHOD_DEFLATED);
    assert!(free_sized.compressed_size * 100 < free as u64);
    assert_eq!(text.method, METHOD_DEFLATED);
    out.write_bytes("tags.txt", b"", true).unwrap();
    let (bytes, _) = out.finish(b"").unwrap();
    let a = crate::archive::Archive::from_reader(std::io::Cursor::new(bytes)).unwrap();
    assert_eq!(*a.entry_bytes("big").unwrap(), zeros[..]);
    assert_eq!(*a.entry_bytes("free").unwrap(), zeros[..free]);
    assert_eq!(*a.entry_bytes("text").unwrap(), noisy[..]);
}

/// Names that all hash alike under an unseeded hash are spread by the name index's.
///
/// rustc-hash's FxHash (2.x), which the index used before, hashes a name of over 16 bytes
/// in rounds of 16 bytes `(x, y)` that replace its state with the folded product of
/// `s0 ^ x` and `K ^ y`: a round whose `x` equals `s0` zeroes the state whatever its `y`,
/// and `s0` is the output of the first round, which a file can choose (here: 8 ASCII
/// letters or digits). So every name below, one per value of its bytes 40..48, has one
/// FxHash, and a table of n of them cost n² / 2 name comparisons to build.
#[test]
fn names_that_collide_under_an_unseeded_hash_are_spread() {
    fn folded(x: u64, y: u64) -> u64 {
        let f = u128::from(x) * u128::from(y);
        (f as u64) ^ ((f >> 64) as u64)
    }
    const SEED1: u64 = 0x243f_6a88_85a3_08d3;
    const K: u64 = 0xa409_3822_299f_31d0;
    const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let word = |mut n: u64| -> [u8; 8] {
        let mut w = [b'0'; 8];
        for b in &mut w {
            *b = ALNUM[(n % 62) as usize];
            n /= 62;
        }
        w
    };
    // The first round's 16 bytes: "pick" + a counter, until its output is 8 alphanumerics.
    let (first, t1) = (0u64..)
        .map(|n| {
            let mut p = *b"pick____________";
            p[8..].copy_from_slice(&word(n));
            let x = u64::from_le_bytes(p[..8].try_into().unwrap());
            let y = u64::from_le_bytes(p[8..].try_into().unwrap());
            (p, folded(SEED1 ^ x, K ^ y))
        })
        .find(|(_, t)| t.to_le_bytes().iter().all(|b| ALNUM.contains(b)))
        .unwrap();
    let names: Vec<String> = (0..2000u64)
        .map(|n| {
            let mut b = first.to_vec();
            b.extend_from_slice(b"/fixed-16-bytes-");
            b.extend_from_slice(&t1.to_le_bytes());
            b.extend_from_slice(&word(n));
            b.extend_from_slice(b"/and-17-fixed-end");
            String::from_utf8(b).unwrap()
        })
        .collect();
    let fx: std::collections::HashSet<u64> = names
        .iter()
        .map(|n| rustc_hash::FxBuildHasher.hash_one(n.as_str()))
        .collect();
    assert_eq!(
        fx.len(),
        1,
        "the premise: one FxHash for all {} names",
        names.len()
    );

    let entries: Vec<ZipEntry> = names.iter().map(|n| entry(n)).collect();
    let mut index = NameIndex::with_capacity(entries.len());
    for i in 0..entries.len() {
        assert!(index.insert(&entries, i));
    }
    let hashes: std::collections::HashSet<u64> = names
        .iter()
        .map(|n| index.hasher.hash_one(n.as_str()))
        .collect();
    assert_eq!(hashes.len(), names.len(), "the index's hash spreads them");
    for (i, n) in names.iter().enumerate() {
        assert_eq!(index.get(&entries, n), Some(i));
    }
}

/// A directory entry of name `name` (the rest zero: only the name is looked at).
fn entry(name: &str) -> ZipEntry {
    ZipEntry {
        name: name.into(),
        method: METHOD_STORED,
        flags: 0,
        crc32: 0,
        compressed_size: 0,
        uncompressed_size: 0,
        header_offset: 0,
        data_offset: 0,
        descriptor_len: 0,
        dos_time: 0,
        dos_date: 0,
        version_made_by: 0,
        external_attrs: 0,
        internal_attrs: 0,
        rare: None,
        read_head: None,
        unchecked_until: None,
    }
}

/// An archive of `n` one-byte entries named `d/00000`, `d/00001`, ... (many enough that
/// the central directory is parsed on two threads).
fn many_entries(n: usize) -> Vec<u8> {
    let mut out = ZipOut::new(Vec::new(), 0);
    for i in 0..n {
        out.write_bytes(&format!("d/{i:05}"), b"x", false).unwrap();
    }
    out.finish(b"").unwrap().0
}

/// Where central-directory record `i` of [`many_entries`] starts: its name is the last
/// place the name appears (the directory follows the data).
fn record_at(bytes: &[u8], i: usize) -> usize {
    let name = format!("d/{i:05}");
    bytes
        .windows(name.len())
        .rposition(|w| w == name.as_bytes())
        .unwrap()
        - 46
}

/// Renames entry `from` to `to` in its local header and its directory record.
fn rename(bytes: &mut [u8], from: usize, to: usize) {
    let (from, to) = (format!("d/{from:05}"), format!("d/{to:05}"));
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_bytes())
        .map(|(p, _)| p)
        .collect();
    assert_eq!(at.len(), 2, "one local header, one directory record");
    for p in at {
        bytes[p..p + to.len()].copy_from_slice(to.as_bytes());
    }
}

/// The two-thread parse of a large directory gives what the one-pass parse gives: every
/// entry in order, and the first problem in directory order with its offset, whichever
/// half it lies in.
#[test]
fn a_large_directory_parses_on_two_threads_as_in_one_pass() {
    const N: usize = 20_000;
    let good = many_entries(N);
    let dir = parse(&good).unwrap();
    assert_eq!(dir.entries.len(), N);
    for (i, e) in dir.entries.iter().enumerate() {
        assert_eq!(&*e.name, format!("d/{i:05}"));
        assert_eq!(dir.index.get(&dir.entries, &e.name), Some(i));
    }
    let twice = |bytes: &[u8], i: usize| {
        let err = parse(bytes).unwrap_err();
        assert!(err.to_string().contains("appears twice"), "{err}");
        assert_eq!(err.location().entry.as_deref(), Some("d/00100"));
        assert_eq!(err.location().offset, Some(record_at(&good, i) as u64));
    };
    let bad_signature = |bytes: &[u8], at: usize| {
        let err = parse(bytes).unwrap_err();
        assert!(
            err.to_string()
                .contains("bad central directory record signature"),
            "{err}"
        );
        assert_eq!(err.location().offset, Some(at as u64));
    };
    // A name in the second half repeats one of the first.
    let mut b = good.clone();
    rename(&mut b, 15_000, 100);
    // (The renamed record is found by its old neighbour: record 15,001 follows it.)
    let dup_at = record_at(&good, 15_000);
    let err = parse(&b).unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
    assert_eq!(err.location().offset, Some(dup_at as u64));
    // ... and a record after it does not parse: the repeat comes first.
    let sig_late = record_at(&good, 18_000);
    b[sig_late] ^= 0xff;
    let err = parse(&b).unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
    // A record of the second half does not parse.
    let mut b = good.clone();
    b[sig_late] ^= 0xff;
    bad_signature(&b, sig_late);
    // A record of the first half does not parse (the walk to the second half stops
    // there), and a name repeats after it: the record comes first.
    let mut b = good.clone();
    let sig_early = record_at(&good, 500);
    b[sig_early] ^= 0xff;
    rename(&mut b, 15_000, 100);
    bad_signature(&b, sig_early);
    // Both repeats in the first half.
    let mut b = good.clone();
    rename(&mut b, 200, 100);
    twice(&b, 200);
    // A record of the first half parses as a record (the walk passes it) but its name is
    // refused, while the second half parses whole: the first half's error, its entries
    // before the bad one kept and the second half's dropped (each once: a double drop of
    // their names would abort in the allocator).
    let mut b = good.clone();
    let bad_name = record_at(&good, 700);
    b[bad_name + 46..bad_name + 46 + 7].copy_from_slice(b"d/../00");
    let err = parse(&b).unwrap_err();
    assert!(err.to_string().contains(".."), "{err}");
    assert_eq!(err.location().offset, Some(bad_name as u64));
}

#[test]
fn an_entry_stays_small() {
    // 100,000 entries are 100,000 of these in a listing's fresh memory, which this VM
    // zeroes at ~3 GB/s: 56 bytes more an entry cost `tags` 3-5 ms of 17. The name as a
    // `Box<str>` and the pread head as a thin box took it from 112 bytes to 96.
    let size = std::mem::size_of::<ZipEntry>();
    assert!(size <= 96, "ZipEntry is {size} bytes");
}
