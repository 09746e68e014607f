//! Appending (in place and by rewrite), removing, pruning, compacting, and the write lock.

use crate::support;

use modelzip::{
    AppendMode, Appender, Archive, ArchiveWriter, ErrorKind, Removal, Tensor, WriteOptions,
    append_tag, compact, remove_tags,
};
use std::path::{Path, PathBuf};
use support::*;

fn tmp_with(tags: &[(&str, u64)]) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("model.zip");
    let mut w = ArchiveWriter::create(&p).unwrap();
    for (n, s) in tags {
        w.add_tag(sample_tag(n, *s)).unwrap();
    }
    w.finish().unwrap();
    (d, p)
}

fn all_checks(dir: &Path, path: &Path) {
    let a = Archive::open(path).unwrap();
    let r = a.verify();
    assert!(r.is_ok(), "{:?}", r.problems);
    external_tools_accept(path);
    assert!(assert_tensor_data_aligned(path) > 0);
    assert!(
        stray_files(dir, path).is_empty(),
        "{:?}",
        stray_files(dir, path)
    );
}

#[test]
fn append_in_place_and_rewrite_keep_old_tags_and_dedup() {
    for mode in [AppendMode::InPlace, AppendMode::Rewrite] {
        let (dir, path) = tmp_with(&[("a", 1), ("b", 2)]);
        let before = {
            let a = Archive::open(&path).unwrap();
            (dump(&a.tag("a").unwrap()), dump(&a.tag("b").unwrap()))
        };
        append_tag(&path, sample_tag("c", 3), mode, &WriteOptions::default()).unwrap();
        let a = Archive::open(&path).unwrap();
        assert_eq!(a.tags(), &["a", "b", "c"], "{mode:?}");
        assert_eq!(dump(&a.tag("a").unwrap()), before.0);
        assert_eq!(dump(&a.tag("b").unwrap()), before.1);
        let c = a.tag("c").unwrap();
        // The bias is shared with the first tag, across the append.
        let b = c.params().iter().find(|p| p.name == "fc.b").unwrap();
        assert_eq!(b.location.tag(), "a");
        assert_eq!(dump(&c), {
            let (d2, p2) = tmp_with(&[("c", 3)]);
            let x = Archive::open(&p2).unwrap();
            let v = dump(&x.tag("c").unwrap());
            drop(d2);
            v
        });
        if mode == AppendMode::InPlace {
            assert!(a.dead_bytes() > 0, "old directory stays behind");
        } else {
            assert_eq!(a.dead_bytes(), 0);
        }
        // Unknown entries survive.
        assert!(a.entry_stored_size("a/notes/readme.md").is_some());
        assert!(matches!(
            append_tag(&path, sample_tag("A", 9), mode, &WriteOptions::default())
                .unwrap_err()
                .kind(),
            ErrorKind::TagExists(_)
        ));
        drop(a);
        all_checks(dir.path(), &path);
        // Compaction drops the dead bytes and keeps everything else.
        let r = compact(&path, &WriteOptions::default()).unwrap();
        let a = Archive::open(&path).unwrap();
        assert_eq!(a.dead_bytes(), 0);
        assert_eq!(r.after, a.len_bytes());
        assert!(r.after <= r.before);
        assert_eq!(a.tags(), &["a", "b", "c"]);
        assert_eq!(dump(&a.tag("a").unwrap()), before.0);
        drop(a);
        all_checks(dir.path(), &path);
    }
}

#[test]
fn streaming_appender_and_drop_rolls_back() {
    let (dir, path) = tmp_with(&[("a", 1)]);
    let original = std::fs::read(&path).unwrap();
    for mode in [AppendMode::InPlace, AppendMode::Rewrite] {
        let mut ap = Appender::open(&path, mode).unwrap();
        let mut t = ap.begin_tag("x").unwrap();
        let big = Tensor::from_slice(vec![4096], &values(5, 4096)).unwrap();
        t.param("p", &big.view()).unwrap();
        t.finish().unwrap();
        drop(ap); // never finished
        assert_eq!(std::fs::read(&path).unwrap(), original, "{mode:?}");
        assert!(stray_files(dir.path(), &path).is_empty());
    }
    let mut ap = Appender::open(&path, AppendMode::InPlace).unwrap();
    ap.add_tag(sample_tag("x", 5)).unwrap();
    ap.add_tag(sample_tag("y", 6)).unwrap();
    ap.finish().unwrap();
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a", "x", "y"]);
    all_checks(dir.path(), &path);
}

#[test]
fn second_writer_is_locked_out() {
    let (_d, path) = tmp_with(&[("a", 1)]);
    let ap = Appender::open(&path, AppendMode::InPlace).unwrap();
    let e = append_tag(
        &path,
        sample_tag("b", 2),
        AppendMode::Rewrite,
        &WriteOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Locked), "{e}");
    assert!(matches!(
        compact(&path, &WriteOptions::default()).unwrap_err().kind(),
        ErrorKind::Locked
    ));
    assert!(matches!(
        ArchiveWriter::create(&path).unwrap_err().kind(),
        ErrorKind::Locked
    ));
    // A waiting writer proceeds once the first is done.
    let p2 = path.clone();
    let waiter = std::thread::spawn(move || {
        let opts = WriteOptions {
            wait_for_lock: true,
            ..Default::default()
        };
        append_tag(&p2, sample_tag("c", 3), AppendMode::InPlace, &opts)
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut ap = ap;
    ap.add_tag(sample_tag("b", 2)).unwrap();
    ap.finish().unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a", "b", "c"]);
}

#[test]
fn remove_rehomes_shared_files_into_oldest_kept_referrer() {
    let (dir, path) = tmp_with(&[("a", 1), ("b", 2), ("c", 3)]);
    let (b_before, c_before) = {
        let a = Archive::open(&path).unwrap();
        (dump(&a.tag("b").unwrap()), dump(&a.tag("c").unwrap()))
    };
    remove_tags(&path, Removal::tags(["A"]), &WriteOptions::default()).unwrap();
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["b", "c"]);
    assert!(!a.entry_names().any(|n| n.starts_with("a/")));
    let b = a.tag("b").unwrap();
    let c = a.tag("c").unwrap();
    assert_eq!(dump(&b), b_before);
    assert_eq!(dump(&c), c_before);
    // The shared bias now lives in b (the oldest kept tag using it); c refers to b.
    let bb = b.params().iter().find(|p| p.name == "fc.b").unwrap();
    assert!(!bb.location.shared);
    let cb = c.params().iter().find(|p| p.name == "fc.b").unwrap();
    assert_eq!(cb.location.tag(), "b");
    assert!(a.entry_stored_size("b/notes/readme.md").is_some());
    drop(a);
    all_checks(dir.path(), &path);

    let removed = remove_tags(&path, Removal::keep_newest(1), &WriteOptions::default())
        .unwrap()
        .removed;
    assert_eq!(removed, vec!["b"]);
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["c"]);
    assert_eq!(dump(&a.tag("c").unwrap()), c_before);
    assert!(
        remove_tags(&path, Removal::keep_newest(5), &WriteOptions::default())
            .unwrap()
            .removed
            .is_empty()
    );
    assert!(matches!(
        remove_tags(&path, Removal::tags(["zzz"]), &WriteOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::TagNotFound { .. }
    ));
    drop(a);
    all_checks(dir.path(), &path);
}

#[test]
fn appends_after_inplace_and_many_cycles_stay_valid() {
    let (dir, path) = tmp_with(&[("t0", 0)]);
    for i in 1..8u64 {
        let mode = if i % 2 == 0 {
            AppendMode::Rewrite
        } else {
            AppendMode::InPlace
        };
        append_tag(
            &path,
            sample_tag(&format!("t{i}"), i),
            mode,
            &WriteOptions::default(),
        )
        .unwrap();
        if i % 3 == 0 {
            remove_tags(&path, Removal::keep_newest(4), &WriteOptions::default()).unwrap();
        }
    }
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags().len(), 5);
    for t in a.tags() {
        let seed: u64 = t[1..].parse().unwrap();
        let tag = a.tag(t).unwrap();
        assert_eq!(
            tag.param("fc.w").unwrap().view().to_vec::<f32>().unwrap(),
            values(seed, 128)
        );
    }
    drop(a);
    all_checks(dir.path(), &path);
}

fn journal_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".journal");
    PathBuf::from(s)
}

#[test]
fn journals_are_replayed_or_discarded_on_open() {
    let (dir, path) = tmp_with(&[("a", 1)]);
    let original = std::fs::read(&path).unwrap();
    // A torn journal (bad checksum) is discarded; the archive was never touched.
    std::fs::write(journal_of(&path), b"MZJRNL01 torn").unwrap();
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a"]);
    assert!(!journal_of(&path).exists());
    assert_eq!(std::fs::read(&path).unwrap(), original);
    // A valid journal of an append cut short is replayed: simulate by keeping the journal
    // of a finished append (a kill right before its deletion) and checking the rollback.
    let ap = Appender::open(&path, AppendMode::InPlace).unwrap();
    let journal = std::fs::read(journal_of(&path)).unwrap();
    let mut ap = ap;
    ap.add_tag(sample_tag("b", 2)).unwrap();
    ap.finish().unwrap();
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a", "b"]);
    std::fs::write(journal_of(&path), &journal).unwrap();
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["a"]);
    drop(a);
    assert_eq!(std::fs::read(&path).unwrap(), original);
    assert!(stray_files(dir.path(), &path).is_empty());
}

#[test]
fn reader_in_the_appending_process_gets_locked_not_a_deadlock() {
    let (_d, path) = tmp_with(&[("a", 1)]);
    let ap = Appender::open(&path, AppendMode::InPlace).unwrap();
    let e = Archive::open(&path).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Locked), "{e}");
    drop(ap);
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a"]);
}

/// A reader in another thread of the appending process waits for the append to finish,
/// as a reader in another process does (a checkpoint listing while an asynchronous save
/// runs), and then reads the appended tag. Only the appending thread itself gets `Locked`.
#[test]
fn reader_in_another_thread_of_the_appending_process_waits_for_the_append() {
    let (_d, path) = tmp_with(&[("a", 1)]);
    let mut ap = Appender::open(&path, AppendMode::InPlace).unwrap();
    ap.add_tag(sample_tag("b", 2)).unwrap();
    let (started, start) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            started.send(()).unwrap();
            Archive::open(&path).map(|a| a.tags().to_vec())
        });
        start.recv().unwrap();
        // Let the reader meet the held lock and the journal (not needed for correctness:
        // a reader that comes after the append reads the same tags).
        std::thread::sleep(std::time::Duration::from_millis(50));
        let e = Archive::open(&path).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Locked), "{e}");
        ap.finish().unwrap();
        let tags = reader
            .join()
            .unwrap()
            .expect("the reader waited for the append");
        assert_eq!(tags, ["a", "b"]);
    });
}

// ---- A symlinked archive path --------------------------------------------------------

/// `dir/real/s.zip` holding `tags`, and `dir/link.zip -> real/s.zip` (a relative link).
#[cfg(unix)]
fn linked(tags: &[(&str, u64)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("real")).unwrap();
    let real = d.path().join("real/s.zip");
    let mut w = ArchiveWriter::create(&real).unwrap();
    for (n, s) in tags {
        w.add_tag(sample_tag(n, *s)).unwrap();
    }
    w.finish().unwrap();
    let link = d.path().join("link.zip");
    std::os::unix::fs::symlink("real/s.zip", &link).unwrap();
    (d, real, link)
}

/// The link is still a symlink to real/s.zip, nothing but it lies beside it (no lock,
/// journal or temp file of the link's name), and the real archive holds `tags`.
#[cfg(unix)]
fn link_intact(d: &Path, real: &Path, link: &Path, tags: &[&str]) {
    let m = std::fs::symlink_metadata(link).unwrap();
    assert!(
        m.file_type().is_symlink(),
        "the link was replaced by a file"
    );
    assert_eq!(std::fs::read_link(link).unwrap(), Path::new("real/s.zip"));
    let beside: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "real" && n != "link.zip" && n != "dirlink")
        .collect();
    assert!(beside.is_empty(), "files beside the link: {beside:?}");
    let a = Archive::open(real).unwrap();
    assert_eq!(a.tags(), tags);
    let r = a.verify();
    assert!(r.is_ok(), "{:?}", r.problems);
    drop(a);
    let stray = stray_files(&d.join("real"), real);
    assert!(stray.is_empty(), "{stray:?}");
}

/// Every writer through the link and every writer through the real path (or a symlinked
/// directory) take one lock: whichever comes second gets `Locked`.
#[cfg(unix)]
#[test]
fn writers_through_a_symlink_and_the_real_path_exclude_each_other() {
    use modelzip::GraphFormat;
    use modelzip::WriteLock;
    use modelzip::convert_graph;
    let (d, real, link) = linked(&[("a", 1)]);
    std::os::unix::fs::symlink("real", d.path().join("dirlink")).unwrap();
    let via_dir = d.path().join("dirlink/s.zip");
    let opts = WriteOptions::default();
    // Each refusal takes lock::BRIEF_HOLD (250 ms): the full list only twice.
    let second_writers = |p: &Path, all: bool| {
        type Op<'a> = Box<dyn Fn() -> modelzip::Result<()> + 'a>;
        let ops: Vec<Op<'_>> = vec![
            Box::new(|| append_tag(p, sample_tag("x", 9), AppendMode::InPlace, &opts)),
            Box::new(|| append_tag(p, sample_tag("x", 9), AppendMode::Rewrite, &opts)),
            Box::new(|| ArchiveWriter::create(p).map(drop)),
            Box::new(|| compact(p, &opts).map(drop)),
            Box::new(|| remove_tags(p, Removal::tags(["a"]), &opts).map(drop)),
            Box::new(|| remove_tags(p, Removal::keep_newest(0), &opts).map(drop)),
            Box::new(|| remove_tags(p, Removal::tags(["a"]).in_place(true), &opts).map(drop)),
            Box::new(|| convert_graph(p, "a", GraphFormat::FlatBuffers, &opts).map(drop)),
            Box::new(|| WriteLock::acquire(p, false).map(drop)),
        ];
        let n = if all { ops.len() } else { 2 };
        for (i, op) in ops.iter().take(n).enumerate() {
            let e = op().expect_err("a second writer got in");
            assert!(matches!(e.kind(), ErrorKind::Locked), "writer {i}: {e}");
            // The error names the path as the caller gave it.
            assert_eq!(e.location().file.as_deref(), Some(p), "writer {i}: {e}");
        }
    };
    // First through the link, second through the real path or the linked directory.
    let mut ap = Appender::open(&link, AppendMode::InPlace).unwrap();
    second_writers(&real, true);
    second_writers(&via_dir, false);
    // A reader in this process finds the real file's journal: Locked, not a torn read.
    let e = Archive::open(&real).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Locked), "{e}");
    ap.add_tag(sample_tag("b", 2)).unwrap();
    ap.finish().unwrap();
    // First through the real path, second through the link; a reader through the link
    // finds the journal beside the real file.
    let mut ap = Appender::open(&real, AppendMode::InPlace).unwrap();
    second_writers(&link, true);
    let e = Archive::open(&link).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Locked), "{e}");
    assert_eq!(e.location().file.as_deref(), Some(link.as_path()), "{e}");
    ap.add_tag(sample_tag("c", 3)).unwrap();
    ap.finish().unwrap();
    // A rewrite through the link excludes writers through the real path too.
    let mut ap = Appender::open(&link, AppendMode::Rewrite).unwrap();
    second_writers(&real, false);
    ap.add_tag(sample_tag("d", 4)).unwrap();
    ap.finish().unwrap();
    link_intact(d.path(), &real, &link, &["a", "b", "c", "d"]);
}

/// Rewrites through a symlink (rewrite append, rm, prune, compact, convert, create)
/// replace the file it points at, never the link; in-place writes go to the same file.
#[cfg(unix)]
#[test]
fn writes_through_a_symlink_change_the_real_archive_and_keep_the_link() {
    use modelzip::GraphFormat;
    use modelzip::convert_graph;
    let (d, real, link) = linked(&[("a", 1), ("b", 2)]);
    let opts = WriteOptions::default();
    append_tag(&link, sample_tag("c", 3), AppendMode::Rewrite, &opts).unwrap();
    link_intact(d.path(), &real, &link, &["a", "b", "c"]);
    append_tag(&link, sample_tag("d", 4), AppendMode::InPlace, &opts).unwrap();
    link_intact(d.path(), &real, &link, &["a", "b", "c", "d"]);
    remove_tags(&link, Removal::tags(["c"]), &opts).unwrap();
    link_intact(d.path(), &real, &link, &["a", "b", "d"]);
    assert_eq!(
        remove_tags(&link, Removal::keep_newest(2), &opts)
            .unwrap()
            .removed,
        ["a"]
    );
    link_intact(d.path(), &real, &link, &["b", "d"]);
    remove_tags(&link, Removal::tags(["b"]).in_place(true), &opts).unwrap();
    link_intact(d.path(), &real, &link, &["d"]);
    let r = compact(&link, &opts).unwrap();
    assert!(r.after < r.before, "{r:?}");
    link_intact(d.path(), &real, &link, &["d"]);
    assert_eq!(Archive::open(&real).unwrap().dead_bytes(), 0);
    let g = convert_graph(&link, "d", GraphFormat::FlatBuffers, &opts).unwrap();
    assert!(g.changed);
    link_intact(d.path(), &real, &link, &["d"]);
    let a = Archive::open(&real).unwrap();
    assert_eq!(
        a.tag("d").unwrap().graph().unwrap().unwrap().0,
        GraphFormat::FlatBuffers
    );
    drop(a);
    // Creating through the link replaces the file it points at.
    let mut w = ArchiveWriter::create(&link).unwrap();
    w.add_tag(sample_tag("n", 5)).unwrap();
    w.finish().unwrap();
    link_intact(d.path(), &real, &link, &["n"]);
    // A dangling link: the archive is created where it points, the link stays.
    std::fs::remove_file(&real).unwrap();
    let mut w = ArchiveWriter::create(&link).unwrap();
    w.add_tag(sample_tag("m", 6)).unwrap();
    w.finish().unwrap();
    link_intact(d.path(), &real, &link, &["m"]);
    // A link into a directory that does not exist is refused, naming the link.
    let bad = d.path().join("bad.zip");
    std::os::unix::fs::symlink("nowhere/x.zip", &bad).unwrap();
    let e = ArchiveWriter::create(&bad).unwrap_err();
    assert!(e.to_string().contains("symbolic link to"), "{e}");
    assert_eq!(e.location().file.as_deref(), Some(bad.as_path()), "{e}");
    assert!(!d.path().join("nowhere").exists());
    std::fs::remove_file(&bad).unwrap();
}

/// The journal of an interrupted in-place append lies beside the real file; opening
/// through the link finds it and rolls the append back.
#[cfg(unix)]
#[test]
fn a_reader_through_a_symlink_rolls_back_the_real_files_journal() {
    let (d, real, link) = linked(&[("a", 1)]);
    let original = std::fs::read(&real).unwrap();
    let mut ap = Appender::open(&link, AppendMode::InPlace).unwrap();
    assert!(journal_of(&real).exists());
    assert!(!journal_of(&link).exists());
    let journal = std::fs::read(journal_of(&real)).unwrap();
    ap.add_tag(sample_tag("b", 2)).unwrap();
    ap.finish().unwrap();
    // As if the writer were killed right before deleting its journal.
    std::fs::write(journal_of(&real), &journal).unwrap();
    let a = Archive::open(&link).unwrap();
    assert_eq!(a.tags(), &["a"]);
    assert_eq!(a.path(), Some(link.as_path()));
    drop(a);
    assert_eq!(std::fs::read(&real).unwrap(), original);
    assert!(!journal_of(&real).exists());
    link_intact(d.path(), &real, &link, &["a"]);
}

/// A journal or lock file that is not a regular file (a FIFO would block forever) is an
/// error naming it, and a garbage journal larger than the archive could have saved is
/// discarded without being read whole.
#[test]
fn sidecars_that_are_not_journals_never_hang_or_cost_memory() {
    let (_dir, path) = tmp_with(&[("a", 1)]);
    let fifo = |p: &Path| {
        let ok = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(ok.success());
    };
    fifo(&journal_of(&path));
    let e = Archive::open(&path).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::NotARegularFile("journal")),
        "{e}"
    );
    assert!(
        e.to_string().contains("journal is not a regular file"),
        "{e}"
    );
    // A writer replacing the archive neither opens it nor removes it (it is not a journal
    // modelzip wrote), and says so.
    let e = ArchiveWriter::create(&path).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::NotARegularFile("journal")),
        "{e}"
    );
    assert!(journal_of(&path).exists());
    std::fs::remove_file(journal_of(&path)).unwrap();
    // A directory under the journal's name: the same clear error, from a reader and from
    // a writer (which used to fail with the raw error of removing it), also when there
    // is no archive yet.
    std::fs::create_dir(journal_of(&path)).unwrap();
    for e in [
        Archive::open(&path).unwrap_err(),
        ArchiveWriter::create(&path).unwrap_err(),
    ] {
        assert!(
            e.to_string().contains("journal is not a regular file"),
            "{e}"
        );
    }
    let fresh = path.with_file_name("fresh.zip");
    std::fs::create_dir(journal_of(&fresh)).unwrap();
    let e = ArchiveWriter::create(&fresh).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::NotARegularFile("journal")),
        "{e}"
    );
    std::fs::remove_dir(journal_of(&fresh)).unwrap();
    std::fs::remove_dir(journal_of(&path)).unwrap();
    let lock = path.with_extension("zip.lock");
    let _ = std::fs::remove_file(&lock);
    fifo(&lock);
    let e = append_tag(
        &path,
        sample_tag("b", 2),
        AppendMode::InPlace,
        &WriteOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("lock file is not a regular file"), "{e}");
    // A reader that finds a journal but cannot take the lock to roll it back.
    std::fs::write(journal_of(&path), b"MZJRNL01").unwrap();
    let e = Archive::open(&path).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::UnfinishedAppend { .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("unfinished append") && e.to_string().contains("lock file"),
        "{e}"
    );
    std::fs::remove_file(journal_of(&path)).unwrap();
    std::fs::remove_file(&lock).unwrap();
    // 3 GiB of nothing (sparse), next to an archive of a few KiB.
    let j = std::fs::File::create(journal_of(&path)).unwrap();
    j.set_len(3 << 30).unwrap();
    drop(j);
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a"]);
    assert!(!journal_of(&path).exists());
}

/// An archive with a second name (a hard link) is not written in place: the lock and the
/// journal of one name do not protect the other. A rewrite is fine.
#[cfg(unix)]
#[test]
fn in_place_writes_refuse_an_archive_with_hard_links() {
    let (dir, path) = tmp_with(&[("a", 1)]);
    let other = dir.path().join("other-name.zip");
    std::fs::hard_link(&path, &other).unwrap();
    let before = std::fs::read(&path).unwrap();
    let e = append_tag(
        &path,
        sample_tag("b", 2),
        AppendMode::InPlace,
        &WriteOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::HardLinked(2)), "{e}");
    assert!(e.to_string().contains("2 hard links"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    append_tag(
        &path,
        sample_tag("b", 2),
        AppendMode::Rewrite,
        &WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(Archive::open(&path).unwrap().tags(), &["a", "b"]);
    assert_eq!(Archive::open(&other).unwrap().tags(), &["a"]);
}

/// A reader that mapped the archive before an in-place removal shrank it (the new
/// directory, shorter, is written where the old one was, and the file cut after it)
/// counts its dead bytes and reads its tensors without a fault: the old directory, past
/// the new end, is not read from the map again (it was: SIGBUS).
#[test]
fn a_reader_of_an_archive_shrunk_by_an_in_place_removal_does_not_fault() {
    use modelzip::TagBuilder;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("model.zip");
    let mut w = ArchiveWriter::create(&p).unwrap();
    w.add_tag(
        TagBuilder::new("keep").param("w", Tensor::from_slice(vec![2], &[1f32, 2.0]).unwrap()),
    )
    .unwrap();
    let mut big = TagBuilder::new("big");
    for i in 0..3000 {
        big = big.param(
            format!("layer_{i:05}.a_rather_long_parameter_name"),
            Tensor::from_slice(vec![1], &[i as f32]).unwrap(),
        );
    }
    w.add_tag(big).unwrap();
    w.finish().unwrap();
    let before = std::fs::metadata(&p).unwrap().len();
    let reader = Archive::open(&p).unwrap();
    remove_tags(
        &p,
        Removal::tags(["big"]).in_place(true),
        &WriteOptions::default(),
    )
    .unwrap();
    let after = std::fs::metadata(&p).unwrap().len();
    assert!(
        after + (64 << 10) < before,
        "the removal did not shrink the file by 64 KiB: {before} -> {after}"
    );
    // The archive as the reader opened it: nothing dead in it.
    assert_eq!(reader.dead_bytes(), 0);
    let t = reader.tag("keep").unwrap();
    assert_eq!(
        t.param("w").unwrap().view().to_vec::<f32>().unwrap(),
        [1.0, 2.0]
    );
    drop(reader);
    let a = Archive::open(&p).unwrap();
    assert_eq!(a.tags(), ["keep"]);
    assert!(a.verify().is_ok());
}
