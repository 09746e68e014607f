//! Hash maps and sets keyed by what a file says: entry names, parameter names, paths.
//!
//! Their hasher is seeded at random for each map (foldhash's `RandomState`), so that no
//! archive can be made whose names all land in one bucket. An unseeded hash (FxHash, which
//! these maps used before) lets a file choose its keys' hashes: names that all hash alike
//! are easy to make for it (`container::tests`), and a map of n of them costs n² / 2
//! comparisons to build, against "work grows with an archive's distinct entries"
//! (docs/RELIABILITY.md). foldhash is as fast as FxHash on short strings.

/// The hasher of the maps below: one random seed per map.
pub(crate) type KeyedState = foldhash::fast::RandomState;
/// A `HashMap` with a [`KeyedState`].
pub(crate) type KeyedMap<K, V> = std::collections::HashMap<K, V, KeyedState>;
/// A `HashSet` with a [`KeyedState`].
pub(crate) type KeyedSet<K> = std::collections::HashSet<K, KeyedState>;
