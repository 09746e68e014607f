//! Removing tags, pruning old ones and compacting: atomic rewrites that never lose a
//! tensor a kept tag references.

use super::append::{
    abandon_in_place, finish_in_place, finish_rewrite, in_place_session, open_locked,
};
use super::archive_path::ArchivePath;
use super::durable::TempTarget;
use super::hashing::sha256_hex;
use super::reader::{Archive, TensorKind, TensorLocation};
use super::session::{Session, WriteOptions};
use super::summary::written_by_commit;
use super::tag::SHARED_TXT;
use super::text::{self, ParamRef};
use crate::error::{Error, ErrorKind, Result};
use crate::progress::Ticker;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// Sizes before and after a compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactReport {
    /// File size before (an `s3://` or `az://` archive: the object's).
    pub before: u64,
    /// File size after.
    pub after: u64,
    /// For an `s3://` or `az://` archive ([`crate::remote::compact`]): the remote write's
    /// versions and costs; `None` when the object had no dead bytes (nothing written).
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

/// What [`remove_tags`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveReport {
    /// The tags removed (canonical names, tags.txt order).
    pub removed: Vec<String>,
    /// The tags kept, in tags.txt order.
    pub kept: Vec<String>,
    /// Tensor files of removed tags that kept tags referenced, moved into a kept tag.
    pub rehomed: u64,
    /// File size before.
    pub before: u64,
    /// File size after.
    pub after: u64,
    /// For an `s3://` or `az://` archive ([`crate::remote::remove_tags`]): the remote
    /// write's versions and costs; `None` when the removal picked nothing (nothing
    /// written).
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

/// The tags picked from the archive as it is under the write lock.
type Picker<'a> = Box<dyn FnOnce(&Archive) -> Result<Vec<String>> + 'a>;

/// Which tags [`remove_tags`] removes, and how: by a rewrite of the archive (the
/// default) or in place ([`Removal::in_place`]).
///
/// The tags are picked from the archive as it is under the write lock, so a removal
/// never races another writer's append.
pub struct Removal<'a> {
    pick: Picker<'a>,
    in_place: bool,
}

impl<'a> Removal<'a> {
    /// These tags (ASCII case ignored; a name given twice is removed once). A name that
    /// is not a tag of the archive fails the removal with [`ErrorKind::TagNotFound`]
    /// before anything is written.
    pub fn tags<I, S>(names: I) -> Removal<'a>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: Vec<String> = names.into_iter().map(|n| n.as_ref().to_string()).collect();
        Removal::picked_by(move |a: &Archive| {
            let mut picked: Vec<String> = Vec::with_capacity(names.len());
            for name in &names {
                let tag = a
                    .canonical_tag(name)
                    .ok_or_else(|| Error::from(ErrorKind::tag_not_found(name, a.tags())))?;
                if !picked.iter().any(|p| p == tag) {
                    picked.push(tag.to_string());
                }
            }
            Ok(picked)
        })
    }

    /// All but the newest `n` tags (tags.txt order); none when the archive has `n` tags
    /// or fewer.
    pub fn keep_newest(n: usize) -> Removal<'a> {
        Removal::picked_by(move |a: &Archive| {
            let k = a.tags().len().saturating_sub(n);
            Ok(a.tags()[..k].to_vec())
        })
    }

    /// The tags `pick` returns (canonical names, as [`Archive::tags`] spells them) from
    /// the archive as it is under the write lock. Retention policies use this to drop
    /// several checkpoints at the cost of one removal.
    pub fn picked_by(pick: impl FnOnce(&Archive) -> Result<Vec<String>> + 'a) -> Removal<'a> {
        Removal {
            pick: Box::new(pick),
            in_place: false,
        }
    }

    /// Removes **in place** (`true`) instead of rewriting the archive (`false`, the
    /// default): the cost is proportional to what changes, not to the archive. Files of
    /// removed tags that kept tags reference are copied into a kept tag, the kept tags'
    /// tables are rewritten to match, and a new tags.txt and central directory that no
    /// longer list the removed tags' files are appended under the same rollback journal
    /// as an in-place append. The removed tags' bytes stay in the file as dead bytes
    /// until a [`compact`]. Picking nothing writes nothing.
    pub fn in_place(mut self, in_place: bool) -> Removal<'a> {
        self.in_place = in_place;
        self
    }
}

impl std::fmt::Debug for Removal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Removal")
            .field("in_place", &self.in_place)
            .finish_non_exhaustive()
    }
}

/// Removes the tags `removal` picks, in one atomic step, and reports what was removed,
/// kept and moved. Files of removed tags that kept tags reference move into the oldest
/// such kept tag, so nothing a kept tag uses is lost. By default the archive is
/// rewritten to a new file renamed over the old one (a symlinked `path` rewrites the
/// file it points at; the link stays); [`Removal::in_place`] appends the changes
/// instead.
///
/// # Examples
///
/// ```
/// use modelzip::{ArchiveWriter, Removal, TagBuilder, Tensor, WriteOptions};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.zip");
/// let mut writer = ArchiveWriter::create(&path)?;
/// for step in ["step-1", "step-2", "step-3"] {
///     writer.add_tag(TagBuilder::new(step).param("w", Tensor::from_slice(vec![1], &[1.0f32])?))?;
/// }
/// writer.finish()?;
/// let opts = WriteOptions::default();
/// let r = modelzip::remove_tags(&path, Removal::tags(["STEP-2"]), &opts)?;
/// assert_eq!(r.removed, ["step-2"]);
/// let r = modelzip::remove_tags(&path, Removal::keep_newest(1).in_place(true), &opts)?;
/// assert_eq!((r.removed, r.kept), (vec!["step-1".to_string()], vec!["step-3".to_string()]));
/// assert_eq!(modelzip::Archive::open(&path)?.tags(), &["step-3"]);
/// # Ok::<(), modelzip::Error>(())
/// ```
pub fn remove_tags(
    path: impl AsRef<Path>,
    removal: Removal<'_>,
    opts: &WriteOptions,
) -> Result<RemoveReport> {
    if removal.in_place {
        remove_in_place(path.as_ref(), opts, removal.pick)
    } else {
        rewrite(path.as_ref(), opts, removal.pick)
    }
}

/// The in-place removal ([`Removal::in_place`]).
fn remove_in_place(
    path: &Path,
    opts: &WriteOptions,
    choose: impl FnOnce(&Archive) -> Result<Vec<String>>,
) -> Result<RemoveReport> {
    let ap = ArchivePath::resolve(path)?;
    let path = ap.real.as_path();
    let run = || -> Result<RemoveReport> {
        let (_lock, base) = open_locked(&ap, opts)?;
        let removed = choose(&base)?;
        let before = base.len_bytes();
        if removed.is_empty() {
            return Ok(RemoveReport {
                removed,
                kept: base.tags().to_vec(),
                rehomed: 0,
                before,
                after: before,
                #[cfg(feature = "remote")]
                remote: None,
            });
        }
        let plan = Plan::make(&base, &removed)?;
        let (mut s, file) = in_place_session(path, &base, opts, |e| plan.keeps(e))?;
        let written = plan.write(&mut s, &base, opts);
        let rehomed = plan.copies.len() as u64;
        if let Err(e) = written {
            // Unmap the old file before its length changes.
            drop(base);
            drop(s);
            abandon_in_place(path, file);
            return Err(e);
        }
        let after = finish_in_place(path, s, file, Some(base))?;
        Ok(RemoveReport {
            removed,
            kept: plan.kept,
            rehomed,
            before,
            after,
            #[cfg(feature = "remote")]
            remote: None,
        })
    };
    run().map_err(|e| ap.located(e))
}

/// Rewrites the archive without the dead bytes in-place appends and removals leave
/// behind, atomically (a new file renamed over the old one).
///
/// # Examples
///
/// ```
/// use modelzip::{AppendMode, ArchiveWriter, TagBuilder, Tensor, WriteOptions};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.zip");
/// let mut writer = ArchiveWriter::create(&path)?;
/// writer.add_tag(TagBuilder::new("a").param("w", Tensor::from_slice(vec![1], &[1.0f32])?))?;
/// writer.finish()?;
/// let b = TagBuilder::new("b").param("w", Tensor::from_slice(vec![1], &[2.0f32])?);
/// modelzip::append_tag(&path, b, AppendMode::InPlace, &WriteOptions::default())?;
/// assert!(modelzip::Archive::open(&path)?.dead_bytes() > 0); // the old tags.txt and summary
/// modelzip::compact(&path, &WriteOptions::default())?;
/// assert_eq!(modelzip::Archive::open(&path)?.dead_bytes(), 0);
/// # Ok::<(), modelzip::Error>(())
/// ```
pub fn compact(path: impl AsRef<Path>, opts: &WriteOptions) -> Result<CompactReport> {
    rewrite(path.as_ref(), opts, |_| Ok(Vec::new())).map(|r| CompactReport {
        before: r.before,
        after: r.after,
        #[cfg(feature = "remote")]
        remote: None,
    })
}

/// Rewrites the archive without the tags `choose` returns (canonical names). Progress
/// counts the old archive's entries and then the re-homed files. A symlinked `path`
/// rewrites the file it points at; the link stays.
fn rewrite(
    path: &Path,
    opts: &WriteOptions,
    choose: impl FnOnce(&Archive) -> Result<Vec<String>>,
) -> Result<RemoveReport> {
    let ap = ArchivePath::resolve(path)?;
    let path = ap.real.as_path();
    let run = || -> Result<RemoveReport> {
        let (_lock, base) = open_locked(&ap, opts)?;
        let removed = choose(&base)?;
        let before = base.len_bytes();
        let plan = Plan::make(&base, &removed)?;
        let temp = TempTarget::create(path)?;
        let mut s = Session::new(Box::new(temp.writer(opts.fsync)?), 0, opts.clone());
        let removed_set: HashSet<&str> = removed.iter().map(String::as_str).collect();
        let total = (base.listing().entries.len() + plan.copies.len()) as u64;
        let mut ticker = Ticker::from_hook(opts.progress.as_ref(), total);
        let skip = |e: &super::container::ZipEntry| {
            written_by_commit(&e.name)
                || plan.dropped.contains(&*e.name)
                || e.name
                    .split_once('/')
                    .is_some_and(|(top, _)| removed_set.contains(top))
        };
        s.copy_archive(&base, skip, &plan.replaced, &mut || ticker.tick())?;
        s.copy_entries(&base, &plan.copies, &mut || ticker.tick())?;
        let rehomed = plan.copies.len() as u64;
        let kept = plan.kept.clone();
        s.keep_tags_of(&base);
        s.set_tags(plan.kept);
        let after = finish_rewrite(s, temp, Some(base))?;
        Ok(RemoveReport {
            removed,
            kept,
            rehomed,
            before,
            after,
            #[cfg(feature = "remote")]
            remote: None,
        })
    };
    run().map_err(|e| ap.located(e))
}

/// What a rewrite changes: files re-homed from removed tags into kept ones, and the
/// text files of kept tags rewritten to match.
struct Plan {
    /// The tags removed, spelled as in tags.txt.
    removed: HashSet<String>,
    kept: Vec<String>,
    /// (source entry, new entry) of each re-homed tensor file.
    copies: Vec<(String, String)>,
    /// New content of existing entries (params.txt, updater.txt, shared.txt,
    /// sha256sums.txt).
    replaced: HashMap<String, Vec<u8>>,
    /// Entries of kept tags left out (a shared.txt whose every line was re-homed).
    dropped: HashSet<String>,
}

type FileKey = (String, TensorKind, u64);

/// The SHA-256 of the files a removal re-homes, for the kept tags' new manifests.
/// Locally the bytes are hashed (they are mapped). From a remote archive, the digest its
/// owner's sha256sums.txt records is taken instead, so that a re-homed file is read once
/// (by its copy), not twice; a file the manifest does not list is hashed.
#[derive(Default)]
struct Digests {
    /// Per tag whose manifest was read: its files' digests by entry name.
    recorded: HashMap<String, HashMap<String, String>>,
}

impl Digests {
    fn of(&mut self, base: &Archive, entry: &str) -> Result<String> {
        if base.is_remote()
            && let Some((tag, _)) = entry.split_once('/')
        {
            if !self.recorded.contains_key(tag) {
                let sums = format!("{tag}/sha256sums.txt");
                let mut map = HashMap::new();
                if base.entry(&sums).is_some() {
                    for (hex, path) in text::parse_sums(&base.entry_bytes(&sums)?, &sums)? {
                        map.insert(format!("{tag}/{path}"), hex.to_ascii_lowercase());
                    }
                }
                self.recorded.insert(tag.to_string(), map);
            }
            if let Some(hex) = self.recorded.get(tag).and_then(|m| m.get(entry)) {
                return Ok(hex.clone());
            }
        }
        Ok(sha256_hex(&base.entry_bytes(entry)?))
    }
}

/// What [`removal_session`] composed: the session to finish, and the removal's facts.
#[cfg(feature = "remote")]
pub(crate) struct RemovalSession {
    pub session: Session,
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    pub rehomed: u64,
}

/// A removal composed onto a session continuing `base` (a remote archive's new version
/// is written this way: the same pick, plan, re-homing and tables as a local in-place
/// removal). `None` when the removal picks nothing (nothing to write).
#[cfg(feature = "remote")]
pub(crate) fn removal_session(
    sink: Box<dyn std::io::Write>,
    base: &Archive,
    removal: Removal<'_>,
    opts: &WriteOptions,
) -> Result<Option<RemovalSession>> {
    let removed = (removal.pick)(base)?;
    if removed.is_empty() {
        return Ok(None);
    }
    let plan = Plan::make(base, &removed)?;
    let mut session = Session::in_place(sink, base, opts.clone(), |e| plan.keeps(e))?;
    plan.write(&mut session, base, opts)?;
    Ok(Some(RemovalSession {
        session,
        removed,
        rehomed: plan.copies.len() as u64,
        kept: plan.kept,
    }))
}

/// The session that ends a compaction composed elsewhere (a remote archive's: the store
/// moves the live entries' bytes): its central directory lists `base`'s live entries
/// (all but tags.txt and the summary, which it writes anew), each moved `moved_by(e)`
/// bytes towards the start, in `base`'s directory order; `sink`'s first byte lands at
/// `start`, after the moved entries. Finishing it writes tags.txt (`base`'s tags), the
/// summary and the central directory: what a local [`compact`] writes after the entries.
#[cfg(feature = "remote")]
pub(crate) fn compaction_session(
    sink: Box<dyn std::io::Write>,
    base: &Archive,
    start: u64,
    opts: &WriteOptions,
    moved_by: impl Fn(&super::container::ZipEntry) -> u64,
) -> Result<Session> {
    let mut s = Session::new(sink, start, opts.clone());
    s.out.entries = base
        .directory()?
        .entries
        .iter()
        .filter(|e| !written_by_commit(&e.name))
        .map(|e| {
            let by = moved_by(e);
            let mut moved = e.clone();
            moved.header_offset -= by;
            moved.data_offset -= by;
            moved
        })
        .collect();
    s.keep_tags_of(base);
    Ok(s)
}

impl Plan {
    /// Whether an entry of the base stays listed: not a table the commit rewrites, not
    /// replaced or dropped by the plan, not under a removed tag.
    fn keeps(&self, e: &super::container::ZipEntry) -> bool {
        !written_by_commit(&e.name)
            && !self.replaced.contains_key(&*e.name)
            && !self.dropped.contains(&*e.name)
            && !e
                .name
                .split_once('/')
                .is_some_and(|(top, _)| self.removed.contains(top))
    }

    /// Writes the plan onto `s`: the replaced tables, the re-homed files, the kept tags.
    fn write(&self, s: &mut Session, base: &Archive, opts: &WriteOptions) -> Result<()> {
        let total = (self.replaced.len() + self.copies.len()) as u64;
        let mut ticker = Ticker::from_hook(opts.progress.as_ref(), total);
        let mut replaced: Vec<(&String, &Vec<u8>)> = self.replaced.iter().collect();
        replaced.sort();
        for (name, bytes) in replaced {
            s.write_text(name, bytes)?;
            ticker.tick();
        }
        s.copy_entries(base, &self.copies, &mut || ticker.tick())?;
        s.set_tags(self.kept.clone());
        Ok(())
    }

    fn make(base: &Archive, removed: &[String]) -> Result<Plan> {
        let removed_set: HashSet<&str> = removed.iter().map(String::as_str).collect();
        let kept: Vec<String> = base
            .tags()
            .iter()
            .filter(|t| !removed_set.contains(t.as_str()))
            .cloned()
            .collect();
        let mut plan = Plan {
            removed: removed.iter().cloned().collect(),
            kept: kept.clone(),
            copies: Vec::new(),
            replaced: HashMap::new(),
            dropped: HashSet::new(),
        };
        if removed.is_empty() {
            return Ok(plan);
        }
        let tags = kept
            .iter()
            .map(|t| base.tag(t))
            .collect::<Result<Vec<_>>>()?;
        let mut digests = Digests::default();
        // New homes, oldest referencing kept tag first.
        let mut moves: HashMap<FileKey, (String, u64)> = HashMap::new();
        let mut next: HashMap<(String, TensorKind), u64> = HashMap::new();
        let mut added_files: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for tag in &tags {
            let locs = tag.locations();
            for loc in locs {
                if !removed_set.contains(loc.tag.as_str()) {
                    continue;
                }
                let key = (loc.tag.to_string(), loc.kind, loc.index);
                if moves.contains_key(&key) {
                    continue;
                }
                let owner = tag.name().to_string();
                let n = next
                    .entry((owner.clone(), loc.kind))
                    .or_insert_with(|| first_free_index(base, &owner, loc.kind));
                let index = *n;
                *n += 1;
                let rel = format!("{}/{index}.lodtensor", loc.kind.dir());
                let to = format!("{owner}/{rel}");
                let hash = digests.of(base, &loc.entry)?;
                added_files
                    .entry(owner.clone())
                    .or_default()
                    .push((hash, rel));
                plan.copies.push((loc.entry.to_string(), to));
                moves.insert(key, (owner, index));
            }
        }
        // Shared graphs and training configs of removed tags: the oldest kept tag that
        // uses one gets the file; later ones point at it.
        let mut file_moves: HashMap<(String, &'static str), String> = HashMap::new();
        let mut new_shared: HashMap<String, Vec<(&'static str, String)>> = HashMap::new();
        for tag in &tags {
            if !tag
                .shared_files()
                .iter()
                .any(|(_, o)| removed_set.contains(o))
            {
                continue;
            }
            let me = tag.name().to_string();
            let mut rows = Vec::new();
            for &(file, owner) in tag.shared_files() {
                if !removed_set.contains(owner) {
                    rows.push((file, owner.to_string()));
                    continue;
                }
                let key = (owner.to_string(), file);
                if let Some(home) = file_moves.get(&key) {
                    rows.push((file, home.clone()));
                    continue;
                }
                let from = format!("{owner}/{file}");
                let hash = digests.of(base, &from)?;
                added_files
                    .entry(me.clone())
                    .or_default()
                    .push((hash, file.to_string()));
                plan.copies.push((from, format!("{me}/{file}")));
                file_moves.insert(key, me.clone());
            }
            new_shared.insert(me, rows);
        }
        for tag in &tags {
            let me = tag.name();
            let new_ref = |loc: &TensorLocation| -> ParamRef {
                let (owner, index) = moves
                    .get(&(loc.tag.to_string(), loc.kind, loc.index))
                    .cloned()
                    .unwrap_or_else(|| (loc.tag.to_string(), loc.index));
                ParamRef {
                    tag: (owner != me).then_some(owner),
                    index,
                }
            };
            let touched = |locs: &mut dyn Iterator<Item = &TensorLocation>| {
                locs.filter(|l| removed_set.contains(l.tag.as_str()))
                    .count()
                    > 0
            };
            let mut changed: Vec<(String, Vec<u8>)> = Vec::new();
            if touched(&mut tag.params().iter().map(|p| &p.location)) {
                let rows: Vec<(String, Vec<ParamRef>)> = tag
                    .params()
                    .iter()
                    .map(|p| (p.name.clone(), vec![new_ref(&p.location)]))
                    .collect();
                let txt = text::render_table(rows.iter().map(|(n, r)| (n.as_str(), r.as_slice())));
                changed.push(("params.txt".into(), txt.into_bytes()));
            }
            if touched(&mut tag.updater().iter().flat_map(|u| u.arrays.iter())) {
                let rows: Vec<(String, Vec<ParamRef>)> = tag
                    .updater()
                    .iter()
                    .map(|u| (u.name.clone(), u.arrays.iter().map(new_ref).collect()))
                    .collect();
                let txt = text::render_table(rows.iter().map(|(n, r)| (n.as_str(), r.as_slice())));
                changed.push(("updater.txt".into(), txt.into_bytes()));
            }
            let mut dropped: Option<String> = None;
            if let Some(rows) = new_shared.remove(me) {
                if rows.is_empty() {
                    dropped = Some(SHARED_TXT.to_string());
                } else {
                    let txt = text::render_shared(rows.iter().map(|(f, t)| (*f, t.as_str())));
                    changed.push((SHARED_TXT.into(), txt.into_bytes()));
                }
            }
            let new_files = added_files.remove(me).unwrap_or_default();
            if changed.is_empty() && new_files.is_empty() && dropped.is_none() {
                continue;
            }
            let sums_name = format!("{me}/sha256sums.txt");
            let mut sums = match base.entry(&sums_name) {
                Some(_) => Some(text::parse_sums(
                    &base.entry_bytes(&sums_name)?,
                    &sums_name,
                )?),
                None => None,
            };
            for (rel, bytes) in changed {
                if let Some(sums) = sums.as_mut() {
                    let h = sha256_hex(&bytes);
                    match sums.iter_mut().find(|(_, p)| *p == rel) {
                        Some(row) => row.0 = h,
                        None => sums.push((h, rel.clone())),
                    }
                }
                plan.replaced.insert(format!("{me}/{rel}"), bytes);
            }
            if let Some(rel) = dropped {
                if let Some(sums) = sums.as_mut() {
                    sums.retain(|(_, p)| *p != rel);
                }
                plan.dropped.insert(format!("{me}/{rel}"));
            }
            if let Some(mut sums) = sums {
                sums.extend(new_files);
                plan.replaced
                    .insert(sums_name, text::render_sums(&sums).into_bytes());
            }
        }
        Ok(plan)
    }
}

/// One past the highest own file number of `tag` of that kind.
fn first_free_index(base: &Archive, tag: &str, kind: TensorKind) -> u64 {
    let prefix = format!("{tag}/{}/", kind.dir());
    // The tag's own entries only (its run of the directory), not every entry: a removal
    // asks once per kept tag that receives files.
    base.entries_under(tag)
        .filter_map(|e| e.name.strip_prefix(&prefix))
        .filter_map(|r| r.strip_suffix(".lodtensor"))
        .filter_map(|n| text::parse_index(n).ok())
        .map(|n| n.saturating_add(1))
        .max()
        .unwrap_or(0)
}
