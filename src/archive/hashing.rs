//! SHA-256 of tensor records on background threads, so that a save writes one tensor
//! while the manifest hashes of earlier ones are computed on the other cores.
//!
//! SHA-256 (~1.8 GB/s with SHA-NI) is the slowest step of a save; writing into the page
//! cache and CRC-32 are several times faster. A tensor handed to [`HashPool::submit`] is
//! copied (the caller's borrow ends when `param` returns) into a recycled buffer and hashed
//! by one of the workers; the writer asks for the digest only when it needs it (a dedup
//! comparison, or the tag's sha256sums.txt). The copies in flight are bounded by
//! [`IN_FLIGHT_LIMIT`], so the memory a save needs stays the tensors plus that bound.

use sha2::Digest;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Bytes copied for hashing and not yet hashed, at most. Larger tensors are not submitted
/// (the writer hashes them beside the write without a copy).
pub(crate) const IN_FLIGHT_LIMIT: usize = 32 << 20;

/// Workers at most; each is one core's worth of SHA-256.
const MAX_WORKERS: usize = 4;

/// A digest being computed by a [`HashPool`] (or already computed).
#[derive(Clone)]
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    id: u64,
}

impl Ticket {
    /// The digest, waiting for it if it is not hashed yet.
    pub(crate) fn digest(&self) -> [u8; 32] {
        let mut g = self.shared.lock();
        loop {
            if let Some(d) = g.done.get(&self.id) {
                return *d;
            }
            g = self.shared.wait(g);
        }
    }
}

/// SHA-256 of the concatenated parts, on this thread.
pub(crate) fn sha256_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

#[derive(Default)]
struct State {
    queue: VecDeque<(u64, Vec<u8>)>,
    done: HashMap<u64, [u8; 32]>,
    /// Bytes of the buffers queued or being hashed.
    in_flight: usize,
    /// Buffers hashed, kept for the next copies (their pages are already faulted in).
    free: Vec<Vec<u8>>,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker never panics while holding the lock (hashing runs unlocked), so a
        // poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(g).unwrap_or_else(|p| p.into_inner())
    }
}

/// Worker threads hashing submitted copies; see the module docs.
pub(crate) struct HashPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    next: u64,
    limit: usize,
}

impl HashPool {
    /// A pool with one worker per available core (at most [`MAX_WORKERS`]), or `None`
    /// when no thread can be started (the caller then hashes on its own thread).
    pub(crate) fn start() -> Option<HashPool> {
        Self::start_with_limit(IN_FLIGHT_LIMIT)
    }

    fn start_with_limit(limit: usize) -> Option<HashPool> {
        let n = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_WORKERS);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("modelzip-sha256-{i}"))
                .spawn(move || work(&s))
            {
                Ok(h) => workers.push(h),
                Err(_) => break,
            }
        }
        if workers.is_empty() {
            return None;
        }
        Some(HashPool {
            shared,
            workers,
            next: 0,
            limit,
        })
    }

    /// Copies `parts` (concatenated) for hashing and returns the ticket of its digest.
    /// Waits while more than the in-flight bound would be waiting to be hashed (a
    /// larger submission waits until nothing else is in flight).
    pub(crate) fn submit(&mut self, parts: &[&[u8]]) -> Ticket {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut g = self.shared.lock();
        while g.in_flight > 0 && g.in_flight + len > self.limit {
            g = self.shared.wait(g);
        }
        g.in_flight += len;
        // The smallest free buffer that fits; too small ones are dropped, so the free
        // list never holds more than the in-flight bound.
        let mut buf = match g.free.iter().position(|b| b.capacity() >= len) {
            Some(i) => g.free.swap_remove(i),
            None => {
                g.free.pop();
                Vec::new()
            }
        };
        drop(g);
        buf.clear();
        buf.reserve_exact(len);
        for p in parts {
            buf.extend_from_slice(p);
        }
        let id = self.next;
        self.next += 1;
        self.shared.lock().queue.push_back((id, buf));
        self.shared.changed.notify_all();
        Ticket {
            shared: Arc::clone(&self.shared),
            id,
        }
    }
}

impl Drop for HashPool {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn work(s: &Shared) {
    loop {
        let mut g = s.lock();
        let (id, buf) = loop {
            if let Some(job) = g.queue.pop_front() {
                break job;
            }
            if g.closed {
                return;
            }
            g = s.wait(g);
        };
        drop(g);
        let d = sha256_parts(&[&buf]);
        let mut g = s.lock();
        g.in_flight -= buf.len();
        g.done.insert(id, d);
        g.free.push(buf);
        drop(g);
        s.changed.notify_all();
    }
}

/// Lowercase hex SHA-256 of `bytes`, as a tag's sha256sums.txt records each file's (and
/// as `modelzip show --json` prints a tensor's `data_sha256`).
///
/// # Examples
///
/// ```
/// assert_eq!(
///     modelzip::sha256_hex(b"abc"),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_digest(&sha2::Sha256::digest(bytes).into())
}

/// Lowercase hex of a SHA-256 digest.
pub(crate) fn hex_digest(d: &[u8; 32]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(64);
    for b in d {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_hashing_inline_in_any_order() {
        // A small bound, so that submissions wait for the workers.
        let limit = 100_000;
        let mut pool = HashPool::start_with_limit(limit).expect("threads");
        let data: Vec<Vec<u8>> = (0..60u32)
            .map(|i| {
                let len = i as usize * 997 + (i as usize % 3) * 30_000;
                (0..len).map(|j| (j * 31 + i as usize) as u8).collect()
            })
            .collect();
        let tickets: Vec<Ticket> = data.iter().map(|d| pool.submit(&[b"hdr", d])).collect();
        for (d, t) in data.iter().zip(&tickets).rev() {
            assert_eq!(t.digest(), sha256_parts(&[b"hdr", d]));
        }
        // One over the in-flight bound goes through alone rather than waiting forever.
        let big = vec![7u8; limit + 5];
        let t = pool.submit(&[&big]);
        assert_eq!(t.digest(), sha256_parts(&[&big]));
    }
}
