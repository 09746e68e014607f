//! `modelzip._modelzip`: the native half of the Python package.
//!
//! Everything here is a thin layer over the `modelzip` crate — the same reader, writer,
//! validation and journal code the CLI uses; no format logic lives in this crate. The
//! pure-Python half (`python/modelzip/__init__.py`) turns the buffers handed out here into
//! numpy arrays and holds the documented API.
//!
//! Zero-copy reads: [`TensorBuffer`] exports a tensor's bytes through the buffer protocol.
//! For a stored (uncompressed) entry the bytes are the archive's memory map, and the
//! buffer holds an `Arc` of the archive, so the map lives as long as any array made
//! from it (numpy's `.base` chain keeps the buffer object alive).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use modelzip::checkpoint::{
    self, Checkpoint, CheckpointOptions, Checkpointer as CoreCheckpointer, Goal, KeepBest,
    Retention, SaveHandle as CoreSaveHandle, SaveReport,
};
use modelzip::interop::paddle;
use modelzip::interop::{ExportOptions, ImportOptions, ImportReport};
use modelzip::{
    AppendMode, Appender, Archive as CoreArchive, ArchiveWriter, DType, Error, ErrorKind,
    GraphFormat, OpenOptions, ParamEntry, TagWriter, Tensor, TensorData, TensorLocation,
    TensorView, UpdaterEntry, WriteOptions,
};
use numpy::PyArrayDescr;
use numpy::npyffi::{
    NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE, NpyTypes, PY_ARRAY_API, npy_intp,
};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::hash::BuildHasher;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// The snake_case name of an error kind (`ModelzipError.kind` in Python): the variant's
/// name, so every kind the library adds is named without a change here.
fn kind_name(kind: &ErrorKind) -> String {
    let debug = format!("{kind:?}");
    let mut out = String::new();
    for (i, c) in debug
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .enumerate()
    {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The Python exception classes, defined in `modelzip/_errors.py`.
static ERRORS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Raises the library error `e` as `ModelzipError` (or its `KeyError` subclass for a
/// missing tag or parameter), with `.kind` and the message the CLI prints. A signal that
/// arrived meanwhile comes first: Ctrl-C during a blocking call (a `wait=True` save's
/// lock wait, which the signal interrupts with EINTR) raises `KeyboardInterrupt`, not
/// the `io` error it caused.
fn raise(py: Python<'_>, e: Error) -> PyErr {
    // The library names no way to allow such values; Python's is a keyword argument.
    let hint = match e.kind() {
        ErrorKind::UnrepresentableValues { allow, .. } => {
            format!("; pass allow_{allow}=True to allow them")
        }
        _ => String::new(),
    };
    raise_hinted(py, e, &hint)
}

/// [`raise`] with `hint` (how to do it anyway, in Python's words) after the message.
fn raise_hinted(py: Python<'_>, e: Error, hint: &str) -> PyErr {
    if let Err(signal) = py.check_signals() {
        return signal;
    }
    let message = format!("{e}{hint}");
    let kind = kind_name(e.kind());
    match e.kind() {
        // An OSError subclass in Python (FileNotFoundError, PermissionError, ...): the
        // operating system's error number and the file the error names.
        ErrorKind::Io(io) => {
            let errno = io.raw_os_error().or_else(|| errno_of(io.kind()));
            let filename = e.location().file.as_ref().map(|f| f.display().to_string());
            make_error(py, &kind, &message, errno, filename)
        }
        _ => make_error(py, &kind, &message, None, None),
    }
}

/// The errno of an I/O error the standard library made without one (e.g. `File::create`
/// refusing a directory reports `IsADirectory` through the OS, but a path check may not).
fn errno_of(kind: std::io::ErrorKind) -> Option<i32> {
    use std::io::ErrorKind as K;
    Some(match kind {
        K::NotFound => libc_errno::ENOENT,
        K::PermissionDenied => libc_errno::EACCES,
        K::AlreadyExists => libc_errno::EEXIST,
        K::IsADirectory => libc_errno::EISDIR,
        K::NotADirectory => libc_errno::ENOTDIR,
        _ => return None,
    })
}

/// The POSIX numbers `errno_of` uses (the same on Linux and macOS).
mod libc_errno {
    pub const EACCES: i32 = 13;
    pub const EEXIST: i32 = 17;
    pub const EISDIR: i32 = 21;
    pub const ENOENT: i32 = 2;
    pub const ENOTDIR: i32 = 20;
}

fn raise_kind(py: Python<'_>, kind: &str, message: &str) -> PyErr {
    make_error(py, kind, message, None, None)
}

/// `modelzip._errors._make(kind, message, errno, filename)`: the exception of the
/// class for the kind (and, for `io`, the errno).
fn make_error(
    py: Python<'_>,
    kind: &str,
    message: &str,
    errno: Option<i32>,
    filename: Option<String>,
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let module = ERRORS.get_or_try_init(py, || {
            py.import("modelzip._errors").map(|m| m.into_any().unbind())
        })?;
        let make = module.bind(py).getattr("_make")?;
        let exc = make.call1((kind, message, errno, filename))?;
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for modelzip::Result<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| raise(py, e))
    }
}

fn invalid(py: Python<'_>, message: impl AsRef<str>) -> PyErr {
    raise_kind(py, "invalid_input", message.as_ref())
}

// ---------------------------------------------------------------------------------------
// Tensor bytes handed to Python
// ---------------------------------------------------------------------------------------

/// Where a [`TensorBuffer`]'s bytes live. `ptr`/`len` are computed once, when the buffer
/// is made, and never change.
enum Storage {
    /// Bytes inside the archive's memory map; the `Arc` keeps the map alive.
    Mapped { _map: Arc<CoreArchive> },
    /// Bytes inflated from a deflated entry, or read by a restore: owned, writable. The
    /// Vec is never touched after `ptr` is taken (its heap block does not move).
    Owned { _data: Vec<u8> },
}

/// One tensor's data bytes, exported read-only (mapped) or writable (owned) through the
/// buffer protocol; `numpy.frombuffer` turns it into an array without copying.
#[pyclass(module = "modelzip._modelzip", frozen)]
struct TensorBuffer {
    ptr: *mut u8,
    len: usize,
    storage: Storage,
}

// Safety: `ptr` points into memory owned by `storage` (a read-only memory map kept alive
// by the `Arc`, or a Vec's heap block that is never reallocated), which lives as long as
// this object. The mapped bytes are never written through (the export is read-only);
// owned bytes are written only by Python code through a writable export, which Python
// serialises like writes to any bytearray.
unsafe impl Send for TensorBuffer {}
unsafe impl Sync for TensorBuffer {}

impl TensorBuffer {
    fn of_map(archive: &Arc<CoreArchive>, data: &[u8]) -> TensorBuffer {
        TensorBuffer {
            ptr: data.as_ptr().cast_mut(),
            len: data.len(),
            storage: Storage::Mapped {
                _map: archive.clone(),
            },
        }
    }

    fn owned(mut data: Vec<u8>) -> TensorBuffer {
        TensorBuffer {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            storage: Storage::Owned { _data: data },
        }
    }

    fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped { .. })
    }
}

#[pymethods]
impl TensorBuffer {
    /// Exports the bytes (format `B`, one dimension).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        let this = slf.get();
        let (ptr, len, readonly) = (this.ptr, this.len, this.is_mapped());
        if readonly && (flags & pyo3::ffi::PyBUF_WRITABLE) == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "tensor data mapped from an archive is read-only",
            ));
        }
        // Safety: `view` is non-null and owned by the caller for the duration of the
        // export; the pointers stored in it stay valid while `obj` (this object) lives,
        // and `obj` holds a strong reference that the interpreter releases with the view.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr.cast();
            (*view).len = len as isize;
            (*view).readonly = c_int::from(readonly);
            (*view).itemsize = 1;
            (*view).format = if (flags & pyo3::ffi::PyBUF_FORMAT) == pyo3::ffi::PyBUF_FORMAT {
                c"B".as_ptr().cast_mut()
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if (flags & pyo3::ffi::PyBUF_ND) == pyo3::ffi::PyBUF_ND {
                &raw mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if (flags & pyo3::ffi::PyBUF_STRIDES) == pyo3::ffi::PyBUF_STRIDES {
                &raw mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    /// The number of bytes.
    fn __len__(&self) -> usize {
        self.len
    }

    /// True when the bytes are the archive's memory map (no copy was made).
    #[getter]
    fn mapped(&self) -> bool {
        self.is_mapped()
    }
}

/// `(buffer, dtype name, dims)`: what Python needs to build an array.
type Described = (Py<TensorBuffer>, &'static str, Vec<u64>);

fn describe(
    py: Python<'_>,
    archive: &Arc<CoreArchive>,
    data: TensorData<'_>,
) -> PyResult<Described> {
    match data {
        TensorData::Mapped(v) => Ok((
            Py::new(py, TensorBuffer::of_map(archive, v.data()))?,
            v.dtype().name(),
            v.dims().to_vec(),
        )),
        TensorData::Owned(t) => owned_described(py, t),
    }
}

/// What [`array_of`] calls: the package's `_array` (for what numpy's C API is not asked
/// to make here: an empty buffer, a dtype numpy has only through ml_dtypes), and the
/// numpy dtype of each modelzip dtype that numpy has itself, by modelzip's name.
struct ArrayMaker {
    fallback: Py<PyAny>,
    dtypes: Vec<(&'static str, Py<PyArrayDescr>)>,
}

static ARRAYS: PyOnceLock<ArrayMaker> = PyOnceLock::new();

fn array_maker(py: Python<'_>) -> PyResult<&ArrayMaker> {
    ARRAYS.get_or_try_init(py, || {
        let package = py.import("modelzip")?;
        let fallback = package.getattr("_array")?.unbind();
        let plain = package.getattr("_PLAIN")?;
        let mut dtypes = Vec::new();
        for d in DType::ALL {
            if let Ok(dt) = plain.get_item(d.name()) {
                dtypes.push((d.name(), dt.cast_into::<PyArrayDescr>()?.unbind()));
            }
        }
        Ok(ArrayMaker { fallback, dtypes })
    })
}

/// A numpy array over the tensor's bytes ([`array_of`] of [`describe`]).
fn to_array(
    py: Python<'_>,
    archive: &Arc<CoreArchive>,
    data: TensorData<'_>,
    what: impl FnOnce() -> String,
) -> PyResult<Py<PyAny>> {
    array_of(py, describe(py, archive, data)?, what)
}

/// A numpy array over a described tensor's buffer, made here through numpy's C API
/// (`PyArray_NewFromDescr` over the buffer's bytes, the buffer its base): what
/// `numpy.ndarray(shape, dtype, buffer)` makes, without that call's argument parsing and
/// buffer export (Py1 in docs/BENCHMARKS.md). What numpy's own dtypes cannot hold, and an
/// empty buffer, go to the package's `_array`, with `what` (the tensor, named in its errors).
fn array_of(
    py: Python<'_>,
    described: Described,
    what: impl FnOnce() -> String,
) -> PyResult<Py<PyAny>> {
    let maker = array_maker(py)?;
    let (buf, dtype, dims) = &described;
    // (The names are DType::name's: a handful of short strings.)
    let dt = maker
        .dtypes
        .iter()
        .find(|(n, _)| n == dtype)
        .map(|(_, dt)| dt);
    match dt {
        Some(dt) if buf.get().len > 0 => new_array(py, dt.bind(py), dims, buf),
        _ => Ok(maker.fallback.bind(py).call1((described, what()))?.unbind()),
    }
}

/// A C-contiguous array of `descr` and `dims` over `buf`'s bytes, read-only when they are
/// the map, with `buf` as its base (which keeps the bytes alive). The decoder has checked
/// that the dims' product times the element size is the buffer's length.
fn new_array(
    py: Python<'_>,
    descr: &Bound<'_, PyArrayDescr>,
    dims: &[u64],
    buf: &Py<TensorBuffer>,
) -> PyResult<Py<PyAny>> {
    let this = buf.get();
    let mut shape = dims
        .iter()
        .map(|&d| npy_intp::try_from(d))
        .collect::<Result<Vec<npy_intp>, _>>()
        .map_err(|_| invalid(py, format!("dims {dims:?} do not fit numpy's index type")))?;
    let nd = c_int::try_from(shape.len()).map_err(|_| {
        invalid(
            py,
            format!("{} dims are more than numpy takes", shape.len()),
        )
    })?;
    let flags = if this.is_mapped() {
        NPY_ARRAY_C_CONTIGUOUS
    } else {
        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE
    };
    // Safety: the API table is numpy's (imported by the numpy crate on first use); the
    // descriptor is a live dtype whose reference the call steals (hence the incref); the
    // shape holds `nd` extents and lives through the call; null strides ask numpy for C
    // order; the data pointer is `buf`'s bytes, which `buf` keeps alive and which are
    // `len` bytes long, exactly what `dims` and the dtype describe (the decoder's check);
    // numpy does not free data it did not allocate (no OWNDATA), and it sets ALIGNED
    // itself. `PyArray_SetBaseObject` steals the reference passed to it, on failure too.
    unsafe {
        let api = &PY_ARRAY_API;
        let descr_ptr = descr.as_ptr();
        pyo3::ffi::Py_INCREF(descr_ptr);
        let arr = api.PyArray_NewFromDescr(
            py,
            api.get_type_object(py, NpyTypes::PyArray_Type),
            descr_ptr.cast(),
            nd,
            shape.as_mut_ptr(),
            std::ptr::null_mut(),
            this.ptr.cast(),
            flags,
            std::ptr::null_mut(),
        );
        let arr = Bound::from_owned_ptr_or_err(py, arr)?;
        if api.PyArray_SetBaseObject(py, arr.as_ptr().cast(), buf.clone_ref(py).into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(arr.unbind())
    }
}

fn owned_described(py: Python<'_>, t: Tensor) -> PyResult<Described> {
    let (dtype, dims) = (t.dtype().name(), t.dims().to_vec());
    Ok((
        Py::new(py, TensorBuffer::owned(t.into_data()))?,
        dtype,
        dims,
    ))
}

fn lod_of(view: &TensorView<'_>) -> Vec<Vec<u64>> {
    view.lod().iter().map(|level| level.to_vec()).collect()
}

// ---------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------

/// How often a call run by [`interruptible`] looks for a signal.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Runs `f` on a thread of its own and waits for it with the GIL released, checking
/// for signals every [`SIGNAL_POLL`]: Ctrl-C raises `KeyboardInterrupt` at once, where a
/// call that blocks without being interrupted by signals (opening an archive that
/// another process is appending to waits up to a minute for that writer) would not
/// return until it is done. On a signal the thread is left to finish on its own and
/// its result is dropped, so `f` must only read or do what any reader may do (roll back
/// a dead writer's journal).
fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    f: impl FnOnce() -> modelzip::Result<T> + Send + 'static,
) -> PyResult<T> {
    let (tx, mut rx) = mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name("modelzip-read".into())
        .spawn(move || {
            // (The receiver is gone when the caller was interrupted: nothing to do.)
            let _ = tx.send(f());
        })
        .map_err(|e| raise(py, Error::from(e)))?;
    loop {
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(SIGNAL_POLL);
            (rx, got)
        });
        rx = back;
        match got {
            Ok(result) => return result.or_raise(py),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                // The thread ended without sending: it panicked; so does this call.
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
                return Err(invalid(py, "the reading thread ended without a result"));
            }
        }
    }
}

/// Opens a local archive (memory-mapped), or one at a URL (`s3://`, `gs://`, `az://`,
/// `http(s)://`, `file://`) by byte ranges with settings from the environment.
fn open_any(path: &Path) -> modelzip::Result<CoreArchive> {
    match path.to_str().filter(|s| modelzip::remote::is_url(s)) {
        Some(url) => CoreArchive::open_url(url),
        None => CoreArchive::open(path),
    }
}

/// Opens a local archive on the calling thread, the GIL released, when that needs no
/// wait for a writer (`writer_wait` zero: an archive a writer is appending to is `Locked`
/// at once); else, and for a URL, opens it as [`open_any`] does on a thread Ctrl-C can
/// interrupt ([`interruptible`]). A thread made and ended per open was half of the
/// open's time (0.47 -> 0.22 ms for 1,029 entries, caches cold; docs/BENCHMARKS.md, Py1).
fn open_here_or_wait(py: Python<'_>, path: PathBuf) -> PyResult<CoreArchive> {
    let local = path.to_str().is_none_or(|s| !modelzip::remote::is_url(s));
    if local {
        let no_wait = OpenOptions {
            writer_wait: Duration::ZERO,
            ..OpenOptions::default()
        };
        match py.detach(|| no_wait.open(&path)) {
            Err(e) if matches!(e.kind(), ErrorKind::Locked) => {}
            other => return other.or_raise(py),
        }
    }
    interruptible(py, move || open_any(&path))
}

/// An open archive (memory-mapped). `close()` drops this object's hold on the map;
/// arrays handed out keep it alive on their own.
#[pyclass(module = "modelzip._modelzip", frozen)]
struct NativeArchive {
    inner: Mutex<Option<Arc<CoreArchive>>>,
    path: String,
}

impl NativeArchive {
    fn get(&self, py: Python<'_>) -> PyResult<Arc<CoreArchive>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| invalid(py, format!("archive {} is closed", self.path)))
    }
}

#[pymethods]
impl NativeArchive {
    /// Opens a local path, or a URL (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`)
    /// by byte ranges with credentials and endpoints from the environment. Interruptible:
    /// the open may wait for another process's append (see [`interruptible`]).
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<NativeArchive> {
        let shown = path.display().to_string();
        let archive = open_here_or_wait(py, path)?;
        Ok(NativeArchive {
            inner: Mutex::new(Some(Arc::new(archive))),
            path: shown,
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn tags(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.get(py)?.tags().to_vec())
    }

    #[getter]
    fn default_tag(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.get(py)?.default_tag().map(str::to_string))
    }

    /// The newest tag's name, or the library's error (`invalid_input`, "the archive has
    /// no tags") when there is none.
    /// The GIL is released meanwhile (a remote archive fetches the tag's tables here).
    fn latest_name(&self, py: Python<'_>) -> PyResult<String> {
        let archive = self.get(py)?;
        py.detach(|| archive.latest().map(|tag| tag.name().to_string()))
            .or_raise(py)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none()
    }

    fn close(&self) {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    /// Parses tag `name` (any ASCII case): its tables, once. The GIL is released
    /// meanwhile (a remote archive fetches the tables here).
    fn tag(&self, py: Python<'_>, name: &str) -> PyResult<NativeTag> {
        let archive = self.get(py)?;
        let (params, updater, canonical) = py
            .detach(|| -> modelzip::Result<_> {
                let tag = archive.tag(name)?;
                let params: Arc<[ParamEntry]> = tag.params().into();
                let updater: Vec<UpdaterEntry> = tag.updater().to_vec();
                Ok((params, updater, tag.name().to_string()))
            })
            .or_raise(py)?;
        let by_name = NameIndex::new(params.iter().map(|p| p.name.as_str()));
        let updater_by_name = NameIndex::new(updater.iter().map(|u| u.name.as_str()));
        Ok(NativeTag {
            archive,
            name: canonical,
            params,
            by_name,
            updater,
            updater_by_name,
            ahead: Arc::default(),
        })
    }

    /// `verify()` findings as `[(entry or None, message)]`.
    fn verify(&self, py: Python<'_>) -> PyResult<Vec<(Option<String>, String)>> {
        let archive = self.get(py)?;
        let report = py.detach(|| archive.verify());
        Ok(report
            .problems
            .into_iter()
            .map(|p| (p.entry, p.message))
            .collect())
    }
}

/// One parsed tag; holds the archive's map alive.
#[pyclass(module = "modelzip._modelzip", frozen)]
struct NativeTag {
    archive: Arc<CoreArchive>,
    name: String,
    params: Arc<[ParamEntry]>,
    by_name: NameIndex,
    updater: Vec<UpdaterEntry>,
    updater_by_name: NameIndex,
    ahead: Arc<ReadAhead>,
}

/// Names -> positions in the list they were made from, holding positions only (the
/// names stay in the list): made once per tag, it costs a hash a name, not a copy of
/// each name (`latest()` of 1,024 parameters, caches cold: 0.44 -> 0.33 ms,
/// docs/BENCHMARKS.md, Py1); seeded per process, as the library's indexes of names read
/// from a file. The first of equal names wins (the library refuses them).
struct NameIndex {
    table: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl NameIndex {
    fn new<'n>(names: impl ExactSizeIterator<Item = &'n str>) -> NameIndex {
        let hasher = foldhash::fast::RandomState::default();
        let mut table = hashbrown::HashTable::with_capacity(names.len());
        let mut all: Vec<&str> = Vec::with_capacity(names.len());
        for (i, name) in names.enumerate() {
            let h = hasher.hash_one(name);
            if table.find(h, |&j| all[j as usize] == name).is_none() {
                table.insert_unique(h, i as u32, |&j| hasher.hash_one(all[j as usize]));
            }
            all.push(name);
        }
        NameIndex { table, hasher }
    }

    /// The position of `name`, given the name at each position.
    fn get<'s>(&'s self, name: &str, name_at: impl Fn(usize) -> &'s str) -> Option<usize> {
        let h = self.hasher.hash_one(name);
        self.table
            .find(h, |&j| name_at(j as usize) == name)
            .map(|&j| j as usize)
    }
}

/// `tag[name]` of a tag's tensors one after another (a loop over the tag, a state dict
/// filled name by name) reads each tensor's record header: on a local archive one
/// `pread` a tensor, ~1 µs when the CPU's caches are cold, half of the array's cost
/// (docs/BENCHMARKS.md, Py1). After [`READ_AHEAD_AFTER`] arrays of a tag of at least
/// [`READ_AHEAD_MIN`] parameters that were views of the map (not inflated copies), a thread of its own reads the headers of the tag's
/// tensors from the last one back, into the archive's header cache
/// ([`CoreArchive::tensor_heads`]; what a view then takes without a read), until it meets
/// the arrays asked for, or the tag is dropped. On two cores the two meet in the middle.
/// What it reads is what the library reads for an array (the same checks; an error
/// stops it, and the array that meets the entry reports it).
#[derive(Default)]
struct ReadAhead {
    /// Arrays made of this tag so far that were views of the map.
    arrays: AtomicUsize,
    /// The highest parameter position an array was made of.
    front: AtomicUsize,
    /// The tag was dropped: the thread stops.
    stop: AtomicBool,
}

/// Arrays of a tag before its headers are read ahead (a few arrays of a large tag read
/// no more than they need).
const READ_AHEAD_AFTER: usize = 16;
/// Fewer parameters than this are not read ahead (the thread would cost more).
const READ_AHEAD_MIN: usize = 128;
/// Headers read ahead per call of the thread, between checks of where the arrays are.
const READ_AHEAD_CHUNK: usize = 16;

impl Drop for NativeTag {
    fn drop(&mut self) {
        self.ahead.stop.store(true, Ordering::Relaxed);
    }
}

impl NativeTag {
    /// Notes an array of parameter `i`; starts the read-ahead at the
    /// [`READ_AHEAD_AFTER`]th ([`ReadAhead`]).
    fn note_array(&self, i: usize) {
        let ahead = &self.ahead;
        ahead.front.fetch_max(i, Ordering::Relaxed);
        let n = ahead.arrays.fetch_add(1, Ordering::Relaxed) + 1;
        if n != READ_AHEAD_AFTER || self.params.len() < READ_AHEAD_MIN || self.archive.is_remote() {
            return;
        }
        let (archive, params, ahead) = (
            Arc::clone(&self.archive),
            Arc::clone(&self.params),
            Arc::clone(&self.ahead),
        );
        // (No thread, no read-ahead: the arrays read their headers themselves.)
        let _ = std::thread::Builder::new()
            .name("modelzip-ahead".into())
            .spawn(move || {
                let mut end = params.len();
                while end > 0 && !ahead.stop.load(Ordering::Relaxed) {
                    let start = end.saturating_sub(READ_AHEAD_CHUNK);
                    if start <= ahead.front.load(Ordering::Relaxed) {
                        break;
                    }
                    let locs: Vec<&TensorLocation> = params[start..end]
                        .iter()
                        .rev()
                        .map(|p| &p.location)
                        .collect();
                    if archive.tensor_heads(&locs).is_err() {
                        break;
                    }
                    end = start;
                }
            });
    }

    fn location(&self, py: Python<'_>, name: &str) -> PyResult<&TensorLocation> {
        Ok(&self.params[self.index(py, name)?].location)
    }

    /// The position of parameter `name` in params.txt.
    fn index(&self, py: Python<'_>, name: &str) -> PyResult<usize> {
        match self.by_name.get(name, |i| &self.params[i].name) {
            Some(i) => Ok(i),
            None => Err(raise(
                py,
                self.in_tag(ErrorKind::ParamNotFound(name.to_string(), self.name.clone()).into()),
            )),
        }
    }

    /// Reads the tensor at `loc` with the GIL released: a deflated entry is inflated, a
    /// remote one fetched, and other Python threads run meanwhile.
    fn read(&self, py: Python<'_>, loc: &TensorLocation) -> PyResult<Described> {
        let data = py.detach(|| self.archive.tensor(loc)).or_raise(py)?;
        describe(py, &self.archive, data)
    }

    /// Reads the tensors at `locs` (as [`read`](Self::read) does, the GIL released once).
    /// Each distinct tensor is read once, however many names refer to it (a deflated
    /// entry is inflated once, docs/RELIABILITY.md "Cost follows files"): a further name
    /// of a mapped tensor gets another view of the same bytes, of a deflated one its own
    /// copy (owned arrays are writable, so names must not share one).
    fn read_all<'s>(
        &'s self,
        py: Python<'_>,
        locs: impl Iterator<Item = &'s TensorLocation> + Send,
    ) -> PyResult<Vec<Described>> {
        let (mut distinct, which, mut uses) = py
            .detach(|| -> modelzip::Result<_> {
                let mut first: HashMap<(&str, u64), usize> = HashMap::new();
                let mut distinct: Vec<Option<TensorData<'_>>> = Vec::new();
                let mut which = Vec::new();
                let mut uses: Vec<usize> = Vec::new();
                for loc in locs {
                    let k = match first.entry((loc.entry(), loc.index)) {
                        std::collections::hash_map::Entry::Occupied(o) => *o.get(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            distinct.push(Some(self.archive.tensor(loc)?));
                            uses.push(0);
                            *v.insert(distinct.len() - 1)
                        }
                    };
                    uses[k] += 1;
                    which.push(k);
                }
                Ok((distinct, which, uses))
            })
            .or_raise(py)?;
        which
            .into_iter()
            .map(|k| {
                uses[k] -= 1;
                // The last name takes the tensor; earlier ones a clone (a view for a
                // mapped tensor, a copy of the bytes for an owned one).
                let data = if uses[k] == 0 {
                    distinct[k].take()
                } else {
                    distinct[k].clone()
                };
                let data = data.ok_or_else(|| invalid(py, "internal: a tensor was read twice"))?;
                describe(py, &self.archive, data)
            })
            .collect()
    }

    fn in_tag(&self, e: Error) -> Error {
        match self.archive.path() {
            Some(p) => e.in_file(p),
            None => e,
        }
    }
}

#[pymethods]
impl NativeTag {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Writes the tag under `out` as a Paddle persistables directory
    /// ([`modelzip::extract`]: its checks, limits and cleanup), the GIL released.
    #[pyo3(signature = (out, force=false, link=false, max_output=None, max_files=modelzip::extract::DEFAULT_MAX_FILES))]
    fn extract<'py>(
        &self,
        py: Python<'py>,
        out: PathBuf,
        force: bool,
        link: bool,
        max_output: Option<u64>,
        max_files: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let opts = modelzip::extract::ExtractOptions {
            force,
            link,
            max_output,
            max_files,
        };
        let r = py
            .detach(|| {
                let tag = self.archive.tag(&self.name)?;
                modelzip::extract::extract(&tag, &out, &opts)
            })
            .map_err(|e| {
                // The library names no options; Python's are keyword arguments.
                let hint = match e.kind() {
                    ErrorKind::LimitExceeded { what, .. }
                        if *what == modelzip::extract::FILES_LIMIT =>
                    {
                        "; pass a larger max_files= to allow it"
                    }
                    ErrorKind::LimitExceeded { what, .. }
                        if *what == modelzip::extract::BYTES_LIMIT =>
                    {
                        "; pass a larger max_output= to allow it"
                    }
                    ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists => {
                        "; pass force=True to overwrite it"
                    }
                    _ => "",
                };
                raise_hinted(py, e, hint)
            })?;
        let d = PyDict::new(py);
        d.set_item("tag", &r.tag)?;
        d.set_item("out", r.out.display().to_string())?;
        d.set_item("graph_file", r.graph_file)?;
        d.set_item("paths", r.paths.clone())?;
        d.set_item("files", r.files)?;
        d.set_item("links", r.links)?;
        d.set_item("bytes", r.bytes)?;
        Ok(d)
    }

    fn keys(&self) -> Vec<String> {
        self.params.iter().map(|p| p.name.clone()).collect()
    }

    fn __len__(&self) -> usize {
        self.params.len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.by_name.get(name, |i| &self.params[i].name).is_some()
    }

    /// `(buffer, dtype, dims)` of parameter `name`.
    fn get(&self, py: Python<'_>, name: &str) -> PyResult<Described> {
        let loc = self.location(py, name)?;
        self.read(py, loc)
    }

    /// Parameter `name` as a numpy array ([`to_array`]).
    fn array(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let i = self.index(py, name)?;
        let loc = &self.params[i].location;
        let data = py.detach(|| self.archive.tensor(loc)).or_raise(py)?;
        // (Owned data, inflated or fetched, reads no header ahead of time.)
        if data.is_mapped() {
            self.note_array(i);
        }
        to_array(py, &self.archive, data, || format!("parameter {name:?}"))
    }

    /// `[(name, array)]` of every parameter, in params.txt order ([`array_of`]).
    fn get_all(&self, py: Python<'_>) -> PyResult<Vec<(String, Py<PyAny>)>> {
        let data = self.read_all(py, self.params.iter().map(|p| &p.location))?;
        self.params
            .iter()
            .zip(data)
            .map(|(p, d)| {
                let what = || format!("parameter {:?}", p.name);
                Ok((p.name.clone(), array_of(py, d, what)?))
            })
            .collect()
    }

    /// `(dtype, dims)` of parameter `name`, from its record header alone (a remote
    /// archive fetches the header, not the data).
    fn head(&self, py: Python<'_>, name: &str) -> PyResult<(&'static str, Vec<u64>)> {
        let loc = self.location(py, name)?;
        let head = py
            .detach(|| self.archive.tensor_heads(&[loc]))
            .or_raise(py)?;
        let h = head
            .into_iter()
            .next()
            .ok_or_else(|| invalid(py, "internal: no header was read"))?;
        Ok((h.dtype.name(), h.dims))
    }

    /// `(buffer, dtype, dims)` of the box `ranges` (`[(start, end)]` per leading
    /// dimension) of parameter `name` ([`modelzip::Tag::param_slice`]): rows of a local
    /// stored tensor are a view of the map, the GIL released while reading.
    fn slice(&self, py: Python<'_>, name: &str, ranges: Vec<(u64, u64)>) -> PyResult<Described> {
        let ranges: Vec<std::ops::Range<u64>> = ranges.into_iter().map(|(a, b)| a..b).collect();
        let data = py
            .detach(|| self.archive.tag(&self.name)?.param_slice(name, &ranges))
            .or_raise(py)?;
        describe(py, &self.archive, data)
    }

    fn lod(&self, py: Python<'_>, name: &str) -> PyResult<Vec<Vec<u64>>> {
        let loc = self.location(py, name)?;
        py.detach(|| Ok(lod_of(&self.archive.tensor(loc)?.view())))
            .or_raise(py)
    }

    /// The param's zip entry and whether it is shared from another tag.
    fn location_of(&self, py: Python<'_>, name: &str) -> PyResult<(String, String, bool)> {
        let loc = self.location(py, name)?;
        Ok((loc.entry().to_string(), loc.tag().to_string(), loc.shared))
    }

    fn updater_keys(&self) -> Vec<String> {
        self.updater.iter().map(|u| u.name.clone()).collect()
    }

    fn updater(&self, py: Python<'_>, name: &str) -> PyResult<Vec<Py<PyAny>>> {
        let Some(i) = self.updater_by_name.get(name, |i| &self.updater[i].name) else {
            let e = ErrorKind::ParamNotFound(name.to_string(), self.name.clone());
            return Err(raise(
                py,
                self.in_tag(Error::from(e).in_entry(format!("{}/updater.txt", self.name))),
            ));
        };
        self.read_all(py, self.updater[i].arrays.iter())?
            .into_iter()
            .enumerate()
            .map(|(k, d)| array_of(py, d, || format!("updater state {k} of {name:?}")))
            .collect()
    }

    /// metadata.json's bytes, or None.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let m = py
            .detach(|| -> modelzip::Result<_> {
                let tag = self.archive.tag(&self.name)?;
                tag.metadata().map_err(|e| self.in_tag(e))
            })
            .or_raise(py)?;
        Ok(m.map(|b| PyBytes::new(py, &b)))
    }

    /// `(encoding, bytes)` of the graph, or None.
    fn graph<'py>(&self, py: Python<'py>) -> PyResult<Option<(&'static str, Bound<'py, PyBytes>)>> {
        let g = py
            .detach(|| self.archive.tag(&self.name)?.graph())
            .or_raise(py)?;
        Ok(g.map(|(enc, b)| (encoding_name(enc), PyBytes::new(py, &b))))
    }
}

fn encoding_name(enc: GraphFormat) -> &'static str {
    match enc {
        GraphFormat::FlatBuffers => "flatbuffers",
        GraphFormat::ProgramDesc => "programdesc",
    }
}

fn encoding_from(py: Python<'_>, name: &str) -> PyResult<GraphFormat> {
    match name.to_ascii_lowercase().as_str() {
        "flatbuffers" | "fb" | "graph.fb" => Ok(GraphFormat::FlatBuffers),
        "programdesc" | "pdmodel" | "graph.pdmodel" => Ok(GraphFormat::ProgramDesc),
        other => Err(invalid(
            py,
            format!("unknown graph encoding {other:?}; use \"flatbuffers\" or \"programdesc\""),
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------

/// The write options of every Python write: waiting for the lock or not.
fn write_options(wait: bool) -> WriteOptions {
    WriteOptions {
        wait_for_lock: wait,
        ..WriteOptions::default()
    }
}

/// An array given by Python: its bytes (held through the buffer protocol), dtype, dims.
struct Input {
    buffer: PyBuffer<u8>,
    dtype: DType,
    dims: Vec<u64>,
}

impl Input {
    /// Takes `(uint8 C-contiguous array, dtype name, dims)` as prepared by Python.
    fn from_py(py: Python<'_>, what: &str, item: &Bound<'_, PyAny>) -> PyResult<Input> {
        let (arr, dtype, dims): (Bound<'_, PyAny>, String, Vec<u64>) = item.extract()?;
        let buffer = PyBuffer::<u8>::get(&arr)?;
        if !buffer.is_c_contiguous() {
            return Err(invalid(
                py,
                format!("{what}: the array is not C-contiguous"),
            ));
        }
        let dtype = dtype.parse::<DType>().or_raise(py)?;
        Ok(Input {
            buffer,
            dtype,
            dims,
        })
    }

    fn view(&self) -> modelzip::Result<TensorView<'_>> {
        let len = self.buffer.len_bytes();
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // Safety: the buffer is acquired (held by `self.buffer`, which keeps the
            // exporting object alive and its memory in place) and C-contiguous, so its
            // `len` bytes from `buf_ptr` are one readable region for as long as `self`
            // lives. The caller must not write to the array from another thread while a
            // save that reads it runs with the GIL released (documented on `save`), the
            // contract of every extension that reads a buffer without the GIL.
            unsafe { std::slice::from_raw_parts(self.buffer.buf_ptr() as *const u8, len) }
        };
        TensorView::new(self.dtype, self.dims.clone(), Default::default(), data)
    }
}

type Inputs = (Vec<(String, Input)>, Vec<(String, Vec<Input>)>);

fn inputs(
    py: Python<'_>,
    params: &Bound<'_, PyList>,
    updater: &Bound<'_, PyList>,
) -> PyResult<Inputs> {
    let mut ps = Vec::with_capacity(params.len());
    for item in params.iter() {
        let (name, arr): (String, Bound<'_, PyAny>) = item.extract()?;
        let input = Input::from_py(py, &format!("parameter {name:?}"), &arr)?;
        ps.push((name, input));
    }
    let mut us = Vec::with_capacity(updater.len());
    for item in updater.iter() {
        let (name, arrays): (String, Vec<Bound<'_, PyAny>>) = item.extract()?;
        let what = format!("updater state of {name:?}");
        let arrays = arrays
            .iter()
            .map(|a| Input::from_py(py, &what, a))
            .collect::<PyResult<Vec<_>>>()?;
        us.push((name, arrays));
    }
    Ok((ps, us))
}

fn write_inputs(
    w: &mut TagWriter<'_>,
    (params, updater): &Inputs,
    metadata: Option<&[u8]>,
    graph: Option<(GraphFormat, &[u8])>,
) -> modelzip::Result<()> {
    if let Some((enc, bytes)) = graph {
        w.graph(enc, bytes)?;
    }
    for (name, input) in params {
        w.param(name, &input.view()?)?;
    }
    for (name, arrays) in updater {
        let views = arrays
            .iter()
            .map(Input::view)
            .collect::<modelzip::Result<Vec<_>>>()?;
        w.updater(name, &views)?;
    }
    if let Some(m) = metadata {
        w.metadata(m)?;
    }
    Ok(())
}

/// Writes a tag: creates the archive atomically, or appends in place (journaled).
fn save_tag(
    path: &Path,
    tag: &str,
    inputs: &Inputs,
    metadata: Option<&[u8]>,
    graph: Option<(GraphFormat, &[u8])>,
    opts: &WriteOptions,
) -> modelzip::Result<Option<modelzip::remote::RemoteWrite>> {
    let located = |e: Error| e.in_file(path);
    if let Some(url) = path.to_str().filter(|s| modelzip::remote::is_url(s)) {
        // An s3:// archive: appended to where it lies (docs/REMOTE.md, "Remote appends").
        let remote = modelzip::remote::RemoteOptions::default();
        let mut app = modelzip::remote::RemoteAppender::open(url, &remote, opts)?;
        let mut w = app.begin_tag(tag).map_err(located)?;
        write_inputs(&mut w, inputs, metadata, graph).map_err(located)?;
        w.finish().map_err(located)?;
        return app.finish().map(Some);
    }
    // A new archive: checked again under the writer's lock, since another writer may have
    // created it meanwhile (finishing would replace it): then this appends to it.
    let mut new = None;
    if !path.exists() {
        let writer = ArchiveWriter::create_with(path, opts).map_err(located)?;
        if !path.exists() {
            new = Some(writer);
        }
    }
    if let Some(mut writer) = new {
        let mut w = writer.begin_tag(tag).map_err(located)?;
        write_inputs(&mut w, inputs, metadata, graph).map_err(located)?;
        w.finish().map_err(located)?;
        writer.finish().map_err(located).map(|()| None)
    } else {
        let mut app = Appender::open_with(path, AppendMode::InPlace, opts).map_err(located)?;
        let mut w = app.begin_tag(tag).map_err(located)?;
        write_inputs(&mut w, inputs, metadata, graph).map_err(located)?;
        w.finish().map_err(located)?;
        app.finish().map_err(located).map(|()| None)
    }
}

/// `{"tag", "params", "shared", "own_bytes"}` of a tag just committed, read back from
/// the archive. The save is done whatever this read meets, so it never raises for it:
/// it does not wait for another writer (one appending meanwhile would make it wait a
/// minute, then fail `locked`), and when the tag cannot be read (that writer holds the
/// archive; a later save's retention already removed the tag, as `keep_last=1` does to
/// an asynchronous save's tag before its handle is waited on; a remote read failed) the
/// report is `{"tag"}` alone, as docs/PYTHON.md says.
fn tag_report<'py>(py: Python<'py>, path: &Path, tag: &str) -> PyResult<Bound<'py, PyDict>> {
    let read = py.detach(|| -> modelzip::Result<_> {
        let a = match path.to_str().filter(|s| modelzip::remote::is_url(s)) {
            Some(url) => CoreArchive::open_url(url)?,
            None => OpenOptions {
                writer_wait: Duration::ZERO,
                ..OpenOptions::default()
            }
            .open(path)?,
        };
        let t = a.tag(tag)?;
        let shared = t.params().iter().filter(|p| p.location.shared).count();
        let own = a.stored_bytes_under(t.name());
        Ok((t.name().to_string(), t.params().len(), shared, own))
    });
    let d = PyDict::new(py);
    match read {
        Ok((name, params, shared, own)) => {
            d.set_item("tag", name)?;
            d.set_item("params", params)?;
            d.set_item("shared", shared)?;
            d.set_item("own_bytes", own)?;
        }
        Err(_) => d.set_item("tag", tag)?,
    }
    Ok(d)
}

/// Saves one tag. `params`: `[(name, (uint8 array, dtype, dims))]`; `updater`:
/// `[(name, [(uint8 array, dtype, dims)])]`. The GIL is released while hashing and writing.
#[pyfunction]
#[pyo3(signature = (path, tag, params, updater, metadata=None, graph=None, wait=false))]
#[allow(clippy::too_many_arguments)]
fn save<'py>(
    py: Python<'py>,
    path: PathBuf,
    tag: &str,
    params: &Bound<'py, PyList>,
    updater: &Bound<'py, PyList>,
    metadata: Option<Vec<u8>>,
    graph: Option<(String, Vec<u8>)>,
    wait: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let inputs = inputs(py, params, updater)?;
    let graph = match &graph {
        Some((enc, bytes)) => Some((encoding_from(py, enc)?, bytes.as_slice())),
        None => None,
    };
    let opts = write_options(wait);
    let remote = py
        .detach(|| save_tag(&path, tag, &inputs, metadata.as_deref(), graph, &opts))
        .or_raise(py)?;
    let d = tag_report(py, &path, tag)?;
    if let Some(r) = &remote {
        d.set_item("created", r.created)?;
    }
    remote_fields(&d, remote.as_ref())?;
    Ok(d)
}

/// The versions and costs of a remote write, added to a report (nothing for a local
/// write): "version", "previous_version", "bytes_uploaded", "bytes_copied",
/// "bytes_reread", "requests".
fn remote_fields(d: &Bound<'_, PyDict>, r: Option<&modelzip::remote::RemoteWrite>) -> PyResult<()> {
    if let Some(r) = r {
        d.set_item("version", r.version.clone())?;
        d.set_item("previous_version", r.previous_version.clone())?;
        d.set_item("bytes_uploaded", r.bytes_uploaded)?;
        d.set_item("bytes_copied", r.bytes_copied)?;
        d.set_item("bytes_reread", r.bytes_reread)?;
        d.set_item("requests", r.requests)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------------------

fn owned_tensor(input: &Input) -> modelzip::Result<Tensor> {
    let v = input.view()?;
    Tensor::from_bytes(v.dtype(), v.dims().to_vec(), v.data().to_vec())
}

/// Copies the arrays into owned tensors (the snapshot a checkpoint keeps).
fn checkpoint_of(
    step: u64,
    inputs: &Inputs,
    metrics: BTreeMap<String, f64>,
) -> modelzip::Result<Checkpoint> {
    let (params, updater) = inputs;
    let mut c = Checkpoint::new(step);
    for (name, input) in params {
        c.params.push((name.clone(), owned_tensor(input)?));
    }
    for (name, arrays) in updater {
        let ts = arrays
            .iter()
            .map(owned_tensor)
            .collect::<modelzip::Result<Vec<_>>>()?;
        c.updater.push((name.clone(), ts));
    }
    c.metrics = metrics;
    Ok(c)
}

fn save_report<'py>(py: Python<'py>, path: &Path, r: &SaveReport) -> PyResult<Bound<'py, PyDict>> {
    let d = tag_report(py, path, &r.tag)?;
    d.set_item("removed", r.removed.clone())?;
    d.set_item("compacted", r.compacted)?;
    d.set_item("deferred", r.deferred)?;
    if let (Some(up), Some(copied)) = (r.bytes_uploaded, r.bytes_copied) {
        d.set_item("bytes_uploaded", up)?;
        d.set_item("bytes_copied", copied)?;
    }
    Ok(d)
}

/// The training-loop checkpointer (see `modelzip.Checkpointer`).
#[pyclass(module = "modelzip._modelzip", frozen)]
struct NativeCheckpointer {
    // Shared with the threads `interruptible` runs its reads on. Dropped by hand, with
    // the GIL released (see the Drop impl).
    inner: ManuallyDrop<Arc<Mutex<CoreCheckpointer>>>,
    path: PathBuf,
}

impl Drop for NativeCheckpointer {
    /// Dropping the last hold on the checkpointer joins its running asynchronous save
    /// (the library never loses a save in flight): that wait is made with the GIL
    /// released, so other Python threads run meanwhile. (Where Python cannot be attached
    /// to, at interpreter shutdown, it is dropped as it is.)
    fn drop(&mut self) {
        // Safety: `inner` is taken once, here, and never used again: this is the
        // object's drop, and no other code runs on it after.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        Python::try_attach(|py| py.detach(move || drop(inner)));
    }
}

impl NativeCheckpointer {
    fn lock(&self) -> std::sync::MutexGuard<'_, CoreCheckpointer> {
        lock_checkpointer(&self.inner)
    }

    /// Runs a read of the archive (which waits while this checkpointer's asynchronous
    /// save, or another process, writes) on its own thread, so Ctrl-C ends the wait.
    fn read<T: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&CoreCheckpointer) -> modelzip::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        let inner = Arc::clone(&*self.inner);
        interruptible(py, move || f(&lock_checkpointer(&inner)))
    }
}

fn lock_checkpointer(m: &Mutex<CoreCheckpointer>) -> std::sync::MutexGuard<'_, CoreCheckpointer> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A handle on an asynchronous save.
#[pyclass(module = "modelzip._modelzip", frozen)]
struct NativeSaveHandle {
    handle: CoreSaveHandle,
    path: PathBuf,
}

#[pymethods]
impl NativeSaveHandle {
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = py.detach(|| self.handle.wait()).or_raise(py)?;
        save_report(py, &self.path, &r)
    }

    fn done(&self) -> bool {
        self.handle.is_done()
    }
}

type Restored = (
    u64,
    String,
    Vec<(String, Described)>,
    Vec<(String, Vec<Described>)>,
    BTreeMap<String, f64>,
);

fn restored(py: Python<'_>, tag: String, c: Checkpoint) -> PyResult<Restored> {
    let params = c
        .params
        .into_iter()
        .map(|(n, t)| Ok((n, owned_described(py, t)?)))
        .collect::<PyResult<Vec<_>>>()?;
    let updater = c
        .updater
        .into_iter()
        .map(|(n, ts)| {
            let ts = ts
                .into_iter()
                .map(|t| owned_described(py, t))
                .collect::<PyResult<Vec<_>>>()?;
            Ok((n, ts))
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok((c.step, tag, params, updater, c.metrics))
}

#[pymethods]
impl NativeCheckpointer {
    #[new]
    #[pyo3(signature = (path, keep_last, keep_every, keep_best, pattern, compact_dead_fraction, wait))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        keep_last: Option<usize>,
        keep_every: Option<u64>,
        keep_best: Option<(String, String, usize)>,
        pattern: String,
        compact_dead_fraction: f64,
        wait: bool,
    ) -> PyResult<NativeCheckpointer> {
        let keep_best = match keep_best {
            None => None,
            Some((metric, goal, count)) => {
                let goal = match goal.to_ascii_lowercase().as_str() {
                    "min" => Goal::Min,
                    "max" => Goal::Max,
                    other => {
                        return Err(invalid(
                            py,
                            format!("keep_best goal must be \"min\" or \"max\", not {other:?}"),
                        ));
                    }
                };
                Some(KeepBest {
                    metric,
                    count,
                    goal,
                })
            }
        };
        let opts = CheckpointOptions {
            pattern,
            retention: Retention {
                keep_last,
                keep_every,
                keep_best,
            },
            compact_dead_fraction,
            write: write_options(wait),
        };
        let ck = py
            .detach(|| CoreCheckpointer::open(&path, opts))
            .or_raise(py)?;
        Ok(NativeCheckpointer {
            inner: ManuallyDrop::new(Arc::new(Mutex::new(ck))),
            path,
        })
    }

    fn save<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        params: &Bound<'py, PyList>,
        updater: &Bound<'py, PyList>,
        metrics: BTreeMap<String, f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inputs = inputs(py, params, updater)?;
        let r = py
            .detach(|| {
                let c = checkpoint_of(step, &inputs, metrics)?;
                self.lock().save(&c)
            })
            .or_raise(py)?;
        save_report(py, &self.path, &r)
    }

    /// This rank's part of a checkpoint written by several processes (docs/SHARDED.md):
    /// `shards` as `sharded_save` takes them.
    #[pyo3(signature = (step, shards, metrics, rank, world_size, timeout=600.0, group=None))]
    #[allow(clippy::too_many_arguments)]
    fn save_sharded<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        shards: &Bound<'py, PyList>,
        metrics: BTreeMap<String, f64>,
        rank: u32,
        world_size: u32,
        timeout: f64,
        group: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let items = shard_inputs(py, shards)?;
        if !(timeout.is_finite() && timeout >= 0.0) {
            return Err(invalid(
                py,
                format!("timeout must be a number of seconds, not {timeout}"),
            ));
        }
        let mut sharding = modelzip::sharded::ShardedOptions::new(rank, world_size);
        // Past what a Duration holds: as long as it holds ("forever").
        sharding.timeout = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::MAX);
        sharding.group = group;
        let r = py
            .detach(|| {
                let specs = shard_specs(&items);
                self.lock()
                    .save_sharded(step, metrics, &specs, &sharding, |w| {
                        write_shards(w, &items)
                    })
            })
            .or_raise(py)?;
        let d = PyDict::new(py);
        d.set_item("tag", &r.tag)?;
        d.set_item("removed", r.removed.clone())?;
        d.set_item("compacted", r.compacted)?;
        d.set_item("deferred", r.deferred)?;
        d.set_item("rank", rank)?;
        if let (Some(up), Some(copied)) = (r.bytes_uploaded, r.bytes_copied) {
            d.set_item("bytes_uploaded", up)?;
            d.set_item("bytes_copied", copied)?;
        }
        Ok(d)
    }

    fn save_async(
        &self,
        py: Python<'_>,
        step: u64,
        params: &Bound<'_, PyList>,
        updater: &Bound<'_, PyList>,
        metrics: BTreeMap<String, f64>,
    ) -> PyResult<NativeSaveHandle> {
        let inputs = inputs(py, params, updater)?;
        let handle = py
            .detach(|| {
                let c = checkpoint_of(step, &inputs, metrics)?;
                self.lock().save_async(c)
            })
            .or_raise(py)?;
        Ok(NativeSaveHandle {
            handle,
            path: self.path.clone(),
        })
    }

    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let r = py.detach(|| self.lock().wait()).or_raise(py)?;
        r.map(|r| save_report(py, &self.path, &r)).transpose()
    }

    fn checkpoints(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.read(py, |c| c.checkpoints())
    }

    fn tags(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.read(py, |c| c.tags())
    }

    fn restore(&self, py: Python<'_>, tag: &str) -> PyResult<Restored> {
        let tag = tag.to_string();
        let (canonical, c) = self.read(py, move |ck| {
            let c = ck.restore(&tag)?;
            // The tag as tags.txt spells it (through the checkpointer: a file or a URL).
            let canonical = ck
                .tags()?
                .into_iter()
                .find(|t| t.eq_ignore_ascii_case(&tag))
                .unwrap_or(tag);
            Ok((canonical, c))
        })?;
        restored(py, canonical, c)
    }

    /// The GIL is released while the checkpointer's lock is taken (a save holds it).
    #[getter]
    fn removed_on_open(&self, py: Python<'_>) -> Vec<String> {
        py.detach(|| self.lock().open_report().removed.clone())
    }
}

/// The tag a step's checkpoint gets under `pattern`.
#[pyfunction]
fn tag_for(py: Python<'_>, pattern: &str, step: u64) -> PyResult<String> {
    checkpoint::tag_for(pattern, step).or_raise(py)
}

// ---------------------------------------------------------------------------------------
// Paddle
// ---------------------------------------------------------------------------------------

fn import_report<'py>(py: Python<'py>, r: &ImportReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tag", &r.tag)?;
    d.set_item("created", r.created)?;
    d.set_item("graph_bytes", r.graph_bytes)?;
    let params = PyList::empty(py);
    for p in &r.params {
        let item = PyDict::new(py);
        item.set_item("name", &p.name)?;
        item.set_item("dtype", p.dtype.name())?;
        item.set_item("dims", p.dims.clone())?;
        item.set_item("shared_from", p.shared_from.clone())?;
        params.append(item)?;
    }
    d.set_item("params", params)?;
    d.set_item(
        "shared",
        r.params.iter().filter(|p| p.shared_from.is_some()).count(),
    )?;
    remote_fields(&d, r.remote.as_ref())?;
    Ok(d)
}

/// Imports a Paddle inference model (`.pdmodel` or PIR `.json`, optional `.pdiparams`) or, with `dir`,
/// a persistables directory (or a directory holding one `PREFIX.pdmodel` / `PREFIX.json` with its
/// `PREFIX.pdiparams`, as `paddle.jit.save` writes it: that inference model).
#[pyfunction]
#[pyo3(signature = (archive, tag, model=None, params=None, dir=None, wait=false))]
fn import_paddle<'py>(
    py: Python<'py>,
    archive: PathBuf,
    tag: &str,
    model: Option<PathBuf>,
    params: Option<PathBuf>,
    dir: Option<PathBuf>,
    wait: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = ImportOptions {
        mode: AppendMode::InPlace,
        write: write_options(wait),
        metadata: None,
    };
    let r = py
        .detach(|| match (&dir, &model, &params) {
            (Some(d), m, None) => {
                paddle::import_persistables_dir(&archive, tag, d, m.as_deref(), &opts)
            }
            (None, Some(m), Some(p)) => {
                paddle::import_inference_model_files(&archive, tag, m, p, &opts)
            }
            (None, Some(m), None) => paddle::import_program(&archive, tag, m, &opts),
            (Some(_), _, Some(_)) => Err(ErrorKind::InvalidInput(
                "dir= and params= cannot be combined: dir= imports the parameters the \
                 directory holds; give model= and params=, or dir= (with model= for its program)"
                    .into(),
            )
            .into()),
            (None, None, Some(_)) => Err(ErrorKind::InvalidInput(
                "params= needs model=, the .pdmodel or PIR .json whose parameters it holds".into(),
            )
            .into()),
            (None, None, None) => Err(ErrorKind::InvalidInput(
                "give a .pdmodel or PIR .json (and its .pdiparams), or dir= a persistables directory".into(),
            )
            .into()),
        })
        .map_err(|e| e.in_file(&archive))
        .or_raise(py)?;
    import_report(py, &r)
}

/// Writes `PREFIX.pdmodel` (`PREFIX.json` for a PIR program) + `PREFIX.pdiparams` of a tag
/// (None: the newest).
#[pyfunction]
#[pyo3(signature = (archive, tag, prefix, overwrite=false))]
fn export_paddle<'py>(
    py: Python<'py>,
    archive: PathBuf,
    tag: Option<String>,
    prefix: PathBuf,
    overwrite: bool,
) -> PyResult<Bound<'py, PyDict>> {
    // Opening may wait for a writer: interruptible, as `open` is. The export itself
    // writes files, so it runs here, not on a thread Ctrl-C would leave running.
    let a = interruptible(py, move || open_any(&archive))?;
    let r = py
        .detach(|| -> modelzip::Result<_> {
            let t = match &tag {
                Some(name) => a.tag(name)?,
                None => a.latest()?,
            };
            let opts = ExportOptions {
                overwrite,
                ..ExportOptions::default()
            };
            modelzip::interop::format("paddle")?.export(&t, &prefix, &opts)
        })
        .or_raise(py)?;
    // The program first, then the parameters when the program loads any.
    let (model_path, model_bytes) = r.files.first().cloned().unwrap_or_default();
    let params_file = r.files.get(1);
    let d = PyDict::new(py);
    d.set_item("tag", &r.tag)?;
    d.set_item("model_path", model_path.display().to_string())?;
    d.set_item(
        "params_path",
        params_file.map(|(p, _)| p.display().to_string()),
    )?;
    d.set_item("model_bytes", model_bytes)?;
    d.set_item("params_bytes", params_file.map_or(0, |(_, n)| *n))?;
    d.set_item("graph_converted", r.graph_converted)?;
    d.set_item("params", r.params.clone())?;
    d.set_item("unused", r.unused.clone())?;
    Ok(d)
}

/// Imports model files of any registered format (paddle, tf, safetensors, onnx; detected
/// from the files unless `format` is given) as a tag: `modelzip import`.
#[pyfunction]
#[pyo3(signature = (archive, tag, inputs, format=None, wait=false))]
fn import_model<'py>(
    py: Python<'py>,
    archive: PathBuf,
    tag: &str,
    inputs: Vec<PathBuf>,
    format: Option<String>,
    wait: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = modelzip::interop::ImportOptions {
        mode: AppendMode::InPlace,
        write: write_options(wait),
        metadata: None,
    };
    let (name, r) = py
        .detach(|| -> modelzip::Result<_> {
            let f = match &format {
                Some(name) => modelzip::interop::format(name)?,
                None => modelzip::interop::detect(&inputs)?,
            };
            Ok((f.name(), f.import(&archive, tag, &inputs, &opts)?))
        })
        .map_err(|e| e.in_file(&archive))
        .or_raise(py)?;
    let d = import_report(py, &r)?;
    d.set_item("format", name)?;
    d.set_item("graph", r.graph_entry)?;
    Ok(d)
}

/// Writes a tag as model files of a format (default: the one it was imported from):
/// `modelzip export`.
#[pyfunction]
#[pyo3(signature = (archive, tag, out, format=None, overwrite=false, external_data=false, max_shard_bytes=None))]
#[allow(clippy::too_many_arguments)] // The keyword arguments of modelzip.export_model.
fn export_model<'py>(
    py: Python<'py>,
    archive: PathBuf,
    tag: Option<String>,
    out: PathBuf,
    format: Option<String>,
    overwrite: bool,
    external_data: bool,
    max_shard_bytes: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    // As in export_paddle: the open (which may wait for a writer) is interruptible.
    let a = interruptible(py, move || open_any(&archive))?;
    let r = py
        .detach(|| -> modelzip::Result<_> {
            let t = match &tag {
                Some(name) => a.tag(name)?,
                None => a.latest()?,
            };
            let f = match &format {
                Some(name) => modelzip::interop::format(name)?,
                None => modelzip::interop::origin_of(&t)?.ok_or_else(|| {
                    Error::from(ErrorKind::InvalidInput(format!(
                        "tag {:?} did not come from a known format; give format=",
                        t.name()
                    )))
                })?,
            };
            let opts = modelzip::interop::ExportOptions {
                overwrite,
                external_data,
                max_shard_bytes,
                ..modelzip::interop::ExportOptions::default()
            };
            f.export(&t, &out, &opts)
        })
        .or_raise(py)?;
    let d = PyDict::new(py);
    d.set_item("tag", &r.tag)?;
    d.set_item("format", r.format)?;
    let files: Vec<(String, u64)> = r
        .files
        .iter()
        .map(|(p, n)| (p.display().to_string(), *n))
        .collect();
    d.set_item("files", files)?;
    d.set_item("params", r.params.clone())?;
    d.set_item("unused", r.unused.clone())?;
    d.set_item("notes", r.notes.clone())?;
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// Variants
// ---------------------------------------------------------------------------------------

fn variant_report<'py>(
    py: Python<'py>,
    r: &modelzip::variants::VariantReport,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tag", &r.tag)?;
    d.set_item("source_tag", &r.source_tag)?;
    let params = PyList::empty(py);
    for p in &r.params {
        let item = PyDict::new(py);
        item.set_item("name", &p.name)?;
        item.set_item("dtype", p.dtype.name())?;
        item.set_item("dims", p.dims.clone())?;
        // As the CLI's --json names it: "quantized" (with "axis", "scale"), "scale"
        // (with "of"), "cast" (with "from"), "unchanged". It was the Rust Debug text
        // (`Cast { from: Fp32 }`).
        use modelzip::variants::ParamChange;
        let mut reason = None;
        let change = match &p.change {
            ParamChange::Quantized {
                axis,
                scale,
                per_tensor_reason,
            } => {
                item.set_item("axis", *axis)?;
                item.set_item("scale", scale)?;
                // Why a weight was quantized per tensor though per channel was asked for.
                reason = per_tensor_reason.as_deref();
                "quantized"
            }
            ParamChange::Scale { of } => {
                item.set_item("of", of)?;
                "scale"
            }
            ParamChange::Cast { from } => {
                item.set_item("from", from.name())?;
                "cast"
            }
            ParamChange::Unchanged => "unchanged",
        };
        item.set_item("change", change)?;
        item.set_item("per_tensor_reason", reason)?;
        item.set_item("shared", p.shared)?;
        item.set_item("stored_bytes", p.stored_bytes)?;
        item.set_item("non_finite", p.non_finite)?;
        item.set_item("overflowed", p.overflowed)?;
        item.set_item("underflowed", p.underflowed)?;
        params.append(item)?;
    }
    d.set_item("params", params)?;
    remote_fields(&d, r.remote.as_ref())?;
    Ok(d)
}

/// Derives an INT8 tag from a float tag (`modelzip quantize`).
#[pyfunction]
#[pyo3(signature = (archive, source, tag, per_channel=true, wait=false, allow_non_finite=false))]
fn quantize<'py>(
    py: Python<'py>,
    archive: PathBuf,
    source: &str,
    tag: &str,
    per_channel: bool,
    wait: bool,
    allow_non_finite: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let write = write_options(wait);
    let opts = modelzip::variants::QuantizeOptions { per_channel };
    let allow = modelzip::variants::AllowValues {
        non_finite: allow_non_finite,
        overflow: false,
    };
    let r = py
        .detach(|| modelzip::variants::quantize(&archive, source, tag, &opts, &allow, &write))
        .map_err(|e| e.in_file(&archive))
        .or_raise(py)?;
    variant_report(py, &r)
}

/// Derives an FP16 or BF16 tag from a float tag (`modelzip cast`).
#[pyfunction]
#[pyo3(signature = (archive, source, tag, dtype, wait=false, allow_non_finite=false, allow_overflow=false))]
#[allow(clippy::too_many_arguments)]
fn cast<'py>(
    py: Python<'py>,
    archive: PathBuf,
    source: &str,
    tag: &str,
    dtype: &str,
    wait: bool,
    allow_non_finite: bool,
    allow_overflow: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let dtype = dtype.parse::<DType>().or_raise(py)?;
    let write = write_options(wait);
    let allow = modelzip::variants::AllowValues {
        non_finite: allow_non_finite,
        overflow: allow_overflow,
    };
    let r = py
        .detach(|| modelzip::variants::cast(&archive, source, tag, dtype, &allow, &write))
        .map_err(|e| e.in_file(&archive))
        .or_raise(py)?;
    variant_report(py, &r)
}

/// Rewrites an archive without its dead bytes (`modelzip compact`): locally a new file
/// renamed over the old one; for an `s3://` URL, the store copies the live runs (a
/// conditional commit on the version read). Returns the sizes (and, for a URL, the
/// upload's costs and new version).
#[pyfunction]
#[pyo3(signature = (archive, wait=false))]
fn compact<'py>(py: Python<'py>, archive: PathBuf, wait: bool) -> PyResult<Bound<'py, PyDict>> {
    let write = write_options(wait);
    let url = archive.to_str().filter(|s| is_url(s)).map(str::to_string);
    let d = PyDict::new(py);
    match url {
        Some(url) => {
            let r = py
                .detach(|| {
                    modelzip::remote::compact(
                        &url,
                        &modelzip::remote::RemoteOptions::default(),
                        &write,
                    )
                })
                .map_err(|e| e.in_file(&url))
                .or_raise(py)?;
            d.set_item("before", r.before)?;
            d.set_item("after", r.after)?;
            let w = r.remote.as_ref();
            d.set_item("padding", w.map_or(0, |w| w.padding))?;
            d.set_item("headers_read", w.map_or(0, |w| w.headers_read))?;
            d.set_item("version", w.and_then(|w| w.version.clone()))?;
            d.set_item("bytes_uploaded", w.map_or(0, |w| w.bytes_uploaded))?;
            d.set_item("bytes_copied", w.map_or(0, |w| w.bytes_copied))?;
            d.set_item("bytes_reread", w.map_or(0, |w| w.bytes_reread))?;
            d.set_item("requests", w.map_or(0, |w| w.requests))?;
        }
        None => {
            let r = py
                .detach(|| modelzip::compact(&archive, &write))
                .map_err(|e| e.in_file(&archive))
                .or_raise(py)?;
            d.set_item("before", r.before)?;
            d.set_item("after", r.after)?;
        }
    }
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// Object storage
// ---------------------------------------------------------------------------------------

/// Uploads a local archive to a URL: create-only by default, `if_match` replaces only that
/// version (ETag; files of up to 64 MiB, a larger one is refused), `force` replaces
/// whatever is there. The bytes checked (the file opens as
/// an archive) are the bytes sent: a file replaced or changed meanwhile is refused. Returns
/// the new ETag, if any.
#[pyfunction]
#[pyo3(signature = (local, url, if_match=None, force=false))]
fn upload(
    py: Python<'_>,
    local: PathBuf,
    url: &str,
    if_match: Option<String>,
    force: bool,
) -> PyResult<Option<String>> {
    let mode = match (if_match, force) {
        (Some(_), true) => return Err(invalid(py, "give if_match or force, not both")),
        (Some(etag), false) => modelzip::remote::UploadMode::ReplaceVersion(etag),
        (None, true) => modelzip::remote::UploadMode::Replace,
        (None, false) => modelzip::remote::UploadMode::Create,
    };
    // The library names no way to replace; Python's is a keyword argument.
    let hint = match &mode {
        modelzip::remote::UploadMode::Create => "; pass force=True to replace it",
        modelzip::remote::UploadMode::ReplaceVersion(_) => {
            "; pass force=True instead of if_match to replace whatever is there"
        }
        modelzip::remote::UploadMode::Replace => "",
    };
    let opts = modelzip::remote::RemoteOptions::default();
    py.detach(|| modelzip::remote::upload(&local, url, mode, &opts, &|_, _| {}))
        .map_err(|e| match e.kind() {
            ErrorKind::RemoteConflict(_) => raise_hinted(py, e, hint),
            _ => raise(py, e),
        })
}

/// Downloads an archive from a URL to a local path atomically (temp file, verified,
/// renamed); an existing local file is replaced only with `force`. Returns the object's
/// ETag, if any.
#[pyfunction]
fn download(py: Python<'_>, url: &str, local: PathBuf, force: bool) -> PyResult<Option<String>> {
    let opts = modelzip::remote::RemoteOptions::default();
    py.detach(|| modelzip::remote::download(url, &local, force, &opts, &|_, _| {}))
        .or_raise(py)
}

/// Whether `s` is a URL modelzip reads by byte ranges.
#[pyfunction]
fn is_url(s: &str) -> bool {
    modelzip::remote::is_url(s)
}

// ---------------------------------------------------------------------------------------
// Module
// ---------------------------------------------------------------------------------------

/// The dtype names the library knows, with their sizes: `[(name, bytes)]`.
#[pyfunction]
fn dtypes(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    let items: Vec<(&'static str, usize)> =
        DType::ALL.iter().map(|d| (d.name(), d.size())).collect();
    PyTuple::new(py, items)
}

// ---------------------------------------------------------------------------------------
// Sharded saves
// ---------------------------------------------------------------------------------------

/// One tensor of a sharded save as Python prepared it: `(name, slot or None, (uint8
/// array, dtype, dims), where, global_dims, holds)`, `where` the first row (an int) or
/// the offset on every dimension (a list: a box); `holds` false: this rank has none of
/// its rows (the array only names the dtype).
type ShardInput = (String, Option<u32>, Input, ShardAt, Vec<u64>, bool);

/// Where a shard goes: its first row, or its offset on every dimension.
enum ShardAt {
    Row(u64),
    Offsets(Vec<u64>),
}

fn shard_inputs(py: Python<'_>, shards: &Bound<'_, PyList>) -> PyResult<Vec<ShardInput>> {
    let mut items: Vec<ShardInput> = Vec::with_capacity(shards.len());
    for item in shards.iter() {
        let (name, slot, arr, at, global, holds): (
            String,
            Option<u32>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Vec<u64>,
            bool,
        ) = item.extract()?;
        let start = match at.extract::<u64>() {
            Ok(row) => ShardAt::Row(row),
            Err(_) => ShardAt::Offsets(at.extract::<Vec<u64>>()?),
        };
        let what = match slot {
            None => format!("shard of {name:?}"),
            Some(k) => format!("shard of updater array {k} of {name:?}"),
        };
        let input = Input::from_py(py, &what, &arr)?;
        items.push((name, slot, input, start, global, holds));
    }
    Ok(items)
}

fn shard_specs(items: &[ShardInput]) -> Vec<modelzip::sharded::TensorSpec> {
    items
        .iter()
        .map(
            |(name, slot, input, _, global, _)| modelzip::sharded::TensorSpec {
                name: name.clone(),
                updater_slot: *slot,
                dtype: input.dtype,
                dims: global.clone(),
            },
        )
        .collect()
}

fn write_shards(
    w: &mut modelzip::sharded::ShardedWriter,
    items: &[ShardInput],
) -> modelzip::Result<()> {
    for (name, slot, input, start, _, holds) in items {
        if !holds {
            continue;
        }
        let v = input.view()?;
        match (slot, start) {
            (None, ShardAt::Row(r)) => w.write_param(name, *r, &v)?,
            (Some(k), ShardAt::Row(r)) => w.write_updater(name, *k, *r, &v)?,
            (None, ShardAt::Offsets(o)) => w.write_param_at(name, o, &v)?,
            (Some(k), ShardAt::Offsets(o)) => w.write_updater_at(name, *k, o, &v)?,
        }
    }
    Ok(())
}

/// One rank's part of a sharded save (docs/SHARDED.md). `shards`: a list of
/// `(name, slot or None, (uint8 array, dtype, dims), first row or offsets, global_dims,
/// holds)`.
/// The GIL is released while the rows are written and while waiting for the other ranks.
#[pyfunction]
#[pyo3(signature = (path, tag, rank, world_size, shards, metadata=None, graph=None, timeout=600.0, wait=false, fsync=true, group=None))]
#[allow(clippy::too_many_arguments)]
fn sharded_save<'py>(
    py: Python<'py>,
    path: PathBuf,
    tag: &str,
    rank: u32,
    world_size: u32,
    shards: &Bound<'py, PyList>,
    metadata: Option<Vec<u8>>,
    graph: Option<(String, Vec<u8>)>,
    timeout: f64,
    wait: bool,
    fsync: bool,
    group: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    use modelzip::sharded::{ShardedOptions, ShardedWriter};
    let items = shard_inputs(py, shards)?;
    let graph = match &graph {
        Some((enc, bytes)) => Some((encoding_from(py, enc)?, bytes.clone())),
        None => None,
    };
    if !(timeout.is_finite() && timeout >= 0.0) {
        return Err(invalid(
            py,
            format!("timeout must be a number of seconds, not {timeout}"),
        ));
    }
    let mut opts = ShardedOptions::new(rank, world_size);
    // Past what a Duration holds: as long as it holds ("forever").
    opts.timeout = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::MAX);
    opts.write = WriteOptions {
        wait_for_lock: wait,
        fsync,
        ..WriteOptions::default()
    };
    opts.group = group;
    let report = py
        .detach(|| -> modelzip::Result<_> {
            let specs = shard_specs(&items);
            let mut w = ShardedWriter::open(&path, tag, &specs, &opts)?;
            if let Some((enc, bytes)) = &graph {
                w.graph(*enc, bytes)?;
            }
            if let Some(m) = &metadata {
                w.metadata(m)?;
            }
            write_shards(&mut w, &items)?;
            w.finish()
        })
        .or_raise(py)?;
    let d = PyDict::new(py);
    d.set_item("tag", &report.tag)?;
    d.set_item("rank", report.rank)?;
    d.set_item("world_size", report.world_size)?;
    d.set_item("shards", report.shards)?;
    d.set_item("bytes_written", report.bytes_written)?;
    d.set_item("deduplicated", report.deduplicated)?;
    d.set_item("plan", &report.plan)?;
    remote_fields(&d, report.remote.as_ref())?;
    Ok(d)
}

#[pymodule]
fn _modelzip(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TensorBuffer>()?;
    m.add_class::<NativeArchive>()?;
    m.add_class::<NativeTag>()?;
    m.add_class::<NativeCheckpointer>()?;
    m.add_class::<NativeSaveHandle>()?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(sharded_save, m)?)?;
    m.add_function(wrap_pyfunction!(tag_for, m)?)?;
    m.add_function(wrap_pyfunction!(import_paddle, m)?)?;
    m.add_function(wrap_pyfunction!(export_paddle, m)?)?;
    m.add_function(wrap_pyfunction!(import_model, m)?)?;
    m.add_function(wrap_pyfunction!(export_model, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(compact, m)?)?;
    m.add_function(wrap_pyfunction!(cast, m)?)?;
    m.add_function(wrap_pyfunction!(upload, m)?)?;
    m.add_function(wrap_pyfunction!(download, m)?)?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
