//! Progress reporting for long operations. The library never prints: a caller that
//! wants a progress bar passes a hook, and the operation calls it as work is done.
//!
//! The hook is called with `(done, total)` units of work; what a unit is depends on
//! the operation (documented where the hook is accepted). It is called once with
//! `done == 0` when the total is known, then after each unit, and `done` never
//! exceeds `total`. It is called on the operation's thread, so it should be cheap.
//!
//! ```
//! use modelzip::progress::ProgressHook;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! let last = Arc::new(AtomicU64::new(0));
//! let seen = last.clone();
//! let hook = ProgressHook::new(move |done, _total| seen.store(done, Ordering::Relaxed));
//! hook.report(3, 10);
//! assert_eq!(last.load(Ordering::Relaxed), 3);
//! ```

use std::sync::Arc;

/// The callback: `(done, total)` units of work.
pub(crate) type ProgressFn = dyn Fn(u64, u64) + Send + Sync;

/// A shareable progress callback (cheap to clone). Two hooks are equal when they are
/// clones of one another.
#[derive(Clone)]
pub struct ProgressHook(Arc<ProgressFn>);

impl ProgressHook {
    /// A hook calling `f(done, total)`.
    pub fn new(f: impl Fn(u64, u64) + Send + Sync + 'static) -> Self {
        ProgressHook(Arc::new(f))
    }

    /// Calls the hook.
    pub fn report(&self, done: u64, total: u64) {
        (self.0)(done, total)
    }

    /// The callback, for functions that take a `&dyn Fn(u64, u64)`.
    pub(crate) fn as_fn(&self) -> &ProgressFn {
        &*self.0
    }
}

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook(..)")
    }
}

impl PartialEq for ProgressHook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ProgressHook {}

/// Counts units of work and reports them to an optional callback.
pub(crate) struct Ticker<'a> {
    hook: Option<&'a (dyn Fn(u64, u64) + 'a)>,
    done: u64,
    total: u64,
}

impl<'a> Ticker<'a> {
    /// A ticker for `total` units; reports `(0, total)` at once.
    pub fn new(hook: Option<&'a (dyn Fn(u64, u64) + 'a)>, total: u64) -> Self {
        let t = Ticker {
            hook,
            done: 0,
            total,
        };
        t.report();
        t
    }

    /// A ticker over an optional [`ProgressHook`] (as options structs hold it).
    pub fn from_hook(hook: Option<&'a ProgressHook>, total: u64) -> Self {
        Ticker::new(hook.map(|h| h.as_fn() as &dyn Fn(u64, u64)), total)
    }

    /// One more unit done.
    pub fn tick(&mut self) {
        self.done = (self.done + 1).min(self.total);
        self.report();
    }

    fn report(&self) {
        if let Some(h) = self.hook {
            h(self.done, self.total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn ticker_reports_start_each_tick_and_never_passes_the_total() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let hook = ProgressHook::new(move |d, t| s.lock().unwrap().push((d, t)));
        let mut t = Ticker::from_hook(Some(&hook), 2);
        t.tick();
        t.tick();
        t.tick();
        assert_eq!(*seen.lock().unwrap(), [(0, 2), (1, 2), (2, 2), (2, 2)]);
        assert_eq!(hook, hook.clone());
        assert_ne!(hook, ProgressHook::new(|_, _| {}));
        assert_eq!(format!("{hook:?}"), "ProgressHook(..)");
        Ticker::new(None, 5).tick();
    }

    /// Every `(done, total)` call a hook received.
    type Calls = Arc<Mutex<Vec<(u64, u64)>>>;

    /// Records every `(done, total)` call of a hook.
    fn recorder() -> (ProgressHook, Calls) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (
            ProgressHook::new(move |d, t| s.lock().unwrap().push((d, t))),
            seen,
        )
    }

    /// Calls go 0..=total by one, with a fixed total.
    fn assert_counts_up(calls: &[(u64, u64)]) {
        assert!(!calls.is_empty());
        let total = calls[0].1;
        assert!(total > 0);
        let done: Vec<u64> = calls.iter().map(|c| c.0).collect();
        assert_eq!(done, (0..=total).collect::<Vec<_>>());
        assert!(calls.iter().all(|c| c.1 == total), "{calls:?}");
    }

    #[test]
    fn rewrites_verify_and_variants_report_progress() {
        use crate::archive::{Archive, ArchiveWriter, TagBuilder, WriteOptions};
        use crate::tensor::Tensor;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.zip");
        let w = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let b = Tensor::from_slice(vec![2], &[0.5f32, 0.25]).unwrap();
        let mut writer = ArchiveWriter::create(&path).unwrap();
        for t in ["a", "b", "c"] {
            let tag = TagBuilder::new(t)
                .param("w", w.clone())
                .param("b", b.clone());
            writer.add_tag(tag).unwrap();
        }
        writer.finish().unwrap();

        let (hook, seen) = recorder();
        let opts = WriteOptions {
            fsync: false,
            progress: Some(hook),
            ..WriteOptions::default()
        };
        let r = crate::archive::remove_tags(&path, crate::Removal::keep_newest(2), &opts).unwrap();
        assert_eq!(r.removed, ["a"]);
        assert_eq!(r.kept, ["b", "c"]);
        assert_eq!(r.rehomed, 2);
        assert_counts_up(&seen.lock().unwrap());

        seen.lock().unwrap().clear();
        crate::archive::compact(&path, &opts).unwrap();
        assert_counts_up(&seen.lock().unwrap());

        seen.lock().unwrap().clear();
        let q = crate::variants::QuantizeOptions { per_channel: false };
        crate::variants::quantize(&path, "c", "int8", &q, &Default::default(), &opts).unwrap();
        let calls = seen.lock().unwrap().clone();
        assert_counts_up(&calls);
        assert_eq!(calls[0].1, 4, "two params, each derived then written");

        let archive = Archive::open(&path).unwrap();
        let calls = Mutex::new(Vec::new());
        let report = archive.verify_with_progress(&|d, t| calls.lock().unwrap().push((d, t)));
        assert!(report.is_ok(), "{report:?}");
        let calls = calls.into_inner().unwrap();
        assert_counts_up(&calls);
        assert_eq!(calls[0].1, (archive.entry_names().count() + 3) as u64);
    }
}
