"""modelzip: one zip file, many versions ("tags") of a model.

Reads hand out numpy arrays that are read-only views of the archive's memory map (no
copy); writes are atomic (a new archive) or journaled (a tag appended in place), and a
tensor identical to one already in the archive is stored once and referenced. The
work is done by the Rust library ``modelzip`` (the same code as the ``modelzip``
command-line tool), with the GIL released while hashing and writing.

>>> import numpy as np, modelzip
>>> report = modelzip.save("model.zip", "fp32", {"fc.w": np.ones((2, 2), np.float32)})
>>> with modelzip.open("model.zip") as ar:
...     w = ar.latest()["fc.w"]          # read-only view of the mapped archive

See docs/PYTHON.md for the guide.
"""

from __future__ import annotations

import collections.abc
import json
import math
import numbers
import operator
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _modelzip
from ._errors import (
    ModelzipError,
    ModelzipFileExistsError,
    ModelzipFileNotFoundError,
    ModelzipIsADirectoryError,
    ModelzipKeyError,
    ModelzipNotADirectoryError,
    ModelzipOSError,
    ModelzipPermissionError,
    ModelzipValueError,
    _make,
)

__all__ = [
    "Archive",
    "Checkpoint",
    "Checkpointer",
    "ModelzipError",
    "ModelzipFileExistsError",
    "ModelzipFileNotFoundError",
    "ModelzipIsADirectoryError",
    "ModelzipKeyError",
    "ModelzipNotADirectoryError",
    "ModelzipOSError",
    "ModelzipPermissionError",
    "ModelzipValueError",
    "SaveHandle",
    "Tag",
    "TensorSlice",
    "export_model",
    "export_paddle",
    "import_model",
    "import_paddle",
    "cast",
    "compact",
    "download",
    "open",
    "quantize",
    "save",
    "tag_for",
    "upload",
]

__version__: str = _modelzip.__version__

PathLike = Union[str, "os.PathLike[str]"]

# ---------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------

_PLAIN: Dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    # Paddle's size_t: 8 bytes, unsigned, as Paddle writes it on 64-bit hosts.
    "SIZE_T": np.dtype("<u8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "COMPLEX64": np.dtype("<c8"),
    "COMPLEX128": np.dtype("<c16"),
}

# dtypes numpy has only through ml_dtypes: modelzip name -> ml_dtypes attribute.
_ML_DTYPES = {"BF16": "bfloat16", "FP8_E4M3FN": "float8_e4m3fn", "FP8_E5M2": "float8_e5m2"}

_TO_NAME: Dict[np.dtype, str] = {dt: name for name, dt in _PLAIN.items() if name != "SIZE_T"}


def _ml_dtypes():
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ml_dtypes


def _numpy_dtype(name: str) -> np.dtype:
    dt = _PLAIN.get(name)
    if dt is not None:
        return dt
    attr = _ML_DTYPES.get(name)
    if attr is None:
        raise _make("invalid_input", f"dtype {name} has no numpy equivalent")
    ml = _ml_dtypes()
    if ml is None:
        raise _make(
            "invalid_input",
            f"dtype {name} is numpy's ml_dtypes.{attr}: install it with `pip install ml_dtypes`",
        )
    return np.dtype(getattr(ml, attr))


def _dtype_name(dt: np.dtype, what: str) -> str:
    name = _TO_NAME.get(dt.newbyteorder("<") if dt.byteorder == ">" else dt)
    if name is not None:
        return name
    ml = _ml_dtypes()
    if ml is not None:
        for mz, attr in _ML_DTYPES.items():
            if dt == np.dtype(getattr(ml, attr)):
                return mz
    raise _make(
        "invalid_input",
        f"{what}: numpy dtype {dt} cannot be stored (bool, int8-64, uint8-64, float16/32/64, "
        "complex64/128, and ml_dtypes bfloat16 / float8_e4m3fn / float8_e5m2 can)",
    )


def _array(desc: Tuple[Any, str, List[int]], what: str = "a tensor") -> np.ndarray:
    """A numpy array over a native buffer: no copy; read-only when the buffer is mapped.
    (``tag[name]`` makes the same array natively, through numpy's C API; what it leaves
    to Python, an empty tensor or an ml_dtypes dtype, comes here.) ``what`` names the
    tensor in an error."""
    buf, dtype, dims = desc
    dt = _numpy_dtype(dtype)
    shape = tuple(dims)  # Python ints from the native side
    if len(buf) == 0:  # (numpy refuses an empty buffer)
        try:
            arr = np.empty(shape, dt)
        except (ValueError, OverflowError) as e:
            # An empty tensor whose other dims are huge ([0, 2**62]): the archive holds it
            # (no bytes), numpy cannot describe it.
            raise _make(
                "size_overflow",
                f"{what} ({dtype}, dims {list(dims)}) has no elements but dims numpy "
                f"cannot make an array of: {e}",
            ) from None
        arr.flags.writeable = not buf.mapped  # as writable as a non-empty one would be
        return arr
    # One constructor call over the buffer (read-only when the buffer is): ~2 µs, against
    # ~5 µs for np.frombuffer + reshape and ~2 µs more for `int()` of every dim
    # (docs/BENCHMARKS.md, Py1).
    return np.ndarray(shape, dt, buf)


def _prepare(what: str, value: Any) -> Tuple[np.ndarray, str, List[int]]:
    """``(uint8 bytes, dtype name, dims)`` of an array-like, copying only when it is not
    already little-endian and C-contiguous."""
    arr = np.asarray(value)
    name = _dtype_name(arr.dtype, what)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would make 0-D arrays 1-D)
    dims = [int(d) for d in arr.shape]
    return arr.reshape(-1).view(np.uint8), name, dims


def _params_list(params: Mapping[str, Any]) -> list:
    if not isinstance(params, Mapping):
        raise _make("invalid_input", "params must be a mapping of name -> array")
    return [(str(k), _prepare(f"parameter {k!r}", v)) for k, v in params.items()]


def _updater_list(updater: Optional[Mapping[str, Sequence[Any]]]) -> list:
    if updater is None:
        return []
    if not isinstance(updater, Mapping):
        raise _make(
            "invalid_input", "updater must be a mapping of name -> sequence of arrays"
        )
    out = []
    for k, arrays in updater.items():
        if isinstance(arrays, np.ndarray) or not isinstance(arrays, Sequence):
            raise _make(
                "invalid_input",
                f"updater state of {k!r} must be a sequence of arrays (e.g. [m, v])",
            )
        out.append((str(k), [_prepare(f"updater state of {k!r}", a) for a in arrays]))
    return out


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays in metadata: their Python values (``float(np.float32)``)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _metadata_json(metadata: Optional[Mapping[str, Any]]) -> Optional[bytes]:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise _make(
            "invalid_input",
            f"metadata must be a mapping (a JSON object), not {type(metadata).__name__}",
        )
    try:
        return json.dumps(dict(metadata), allow_nan=False, default=_json_default).encode()
    except ValueError as e:  # NaN, inf, a circular reference
        raise _make(
            "invalid_input", f"metadata cannot be stored as JSON: {e} (JSON has no NaN or infinity)"
        ) from e
    except TypeError as e:
        raise _make("invalid_input", f"metadata cannot be stored as JSON: {e}") from e


def _graph_arg(graph: Union[None, bytes, Tuple[str, bytes]]) -> Optional[Tuple[str, bytes]]:
    if graph is None:
        return None
    if isinstance(graph, tuple):
        enc, data = graph
        return (str(enc), bytes(data))
    data = bytes(graph)
    # graph.fb files carry the FlatBuffers file identifier "MZGF" at byte 4.
    enc = "flatbuffers" if data[4:8] == b"MZGF" else "programdesc"
    return (enc, data)


def _fspath(path: PathLike) -> str:
    return os.fspath(path)


_APPEND_HINT = (
    "object stores cannot be written in place; write a local archive and upload it with "
    "modelzip.upload (or `modelzip cp`)"
)


def _local(path: PathLike, what: str, hint: str = _APPEND_HINT) -> str:
    """A local path for a write: URLs are refused (object stores cannot append; files
    written to one would land in a local directory named like it, e.g. ``s3:/``)."""
    p = os.fspath(path)
    if _modelzip.is_url(p):
        raise _make("invalid_input", f"cannot {what} {p}: {hint}")
    return p


def _is_s3(path: str) -> bool:
    """True for a URL of a store appended to remotely: S3 (``s3://``, ``s3a://``) and
    Azure Blob Storage (``az://``, ``azure://``, ``abfs[s]://``, ``adl://``); the library
    says what else it refuses."""
    return "://" in path and path.split("://", 1)[0].lower() in (
        "s3", "s3a", "az", "azure", "abfs", "abfss", "adl"
    )


def _writable(path: PathLike, what: str) -> str:
    """An ``s3://`` or ``az://`` URL as it is (the library appends to it remotely), else a local path
    for a write (other URLs refused, as by :func:`_local`)."""
    p = os.fspath(path)
    return p if _is_s3(p) else _local(path, what)


_EXPORT_HINT = "exports write local files; export here and upload the files with your store's tools"


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


class Tag:
    """One tag of an open archive: its parameters (a read-only mapping of name -> array),
    updater state, metadata and graph. Parameter order is params.txt's."""

    __slots__ = ("_native", "_metadata")

    def __init__(self, native: Any) -> None:
        self._native = native
        self._metadata: Optional[Dict[str, Any]] = None

    @property
    def name(self) -> str:
        """The tag's name, spelled as in tags.txt."""
        return self._native.name

    def keys(self) -> List[str]:
        """Parameter names, in params.txt order."""
        return self._native.keys()

    def __len__(self) -> int:
        return len(self._native)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._native

    def __iter__(self) -> Iterator[str]:
        return iter(self._native.keys())

    def __getitem__(self, name: str) -> np.ndarray:
        return self._native.array(name)

    def get_tensor(self, name: str) -> np.ndarray:
        """Parameter ``name`` as a numpy array: a read-only view of the archive's memory
        map when the entry is stored (no copy), an owned array when it is deflated. The
        array stays valid after the archive is closed. A missing name raises
        :class:`ModelzipKeyError`."""
        return self._native.array(name)

    def get_slice(self, name: str) -> "TensorSlice":
        """Parameter ``name`` for reading part of it, as safetensors' ``get_slice``:
        ``tag.get_slice("w")[a:b]`` reads rows ``a:b`` only (``[a:b, c:d]`` a box, ints and
        ``...`` as in numpy), and ``get_shape()`` / ``get_dtype()`` read the header alone.
        A missing name raises :class:`ModelzipKeyError` here."""
        return TensorSlice(self._native, name)

    def extract(
        self,
        out: PathLike,
        *,
        force: bool = False,
        link: bool = False,
        max_output: Optional[int] = None,
        max_files: int = 100_000,
    ) -> Dict[str, Any]:
        """Writes the tag under ``out`` (created if missing) as a Paddle persistables
        directory, as ``modelzip extract`` does (the same library code): one LoDTensor
        file per parameter, named by its name (a ``/`` makes a subdirectory), plus
        ``__model__`` or ``graph.fb`` for the graph. Never writes outside ``out``,
        never follows or creates symlinks, refuses unsafe or colliding names, counts the
        files and bytes first and refuses more than ``max_files`` / ``max_output``
        (``None``: 16 GiB or 100 times the archive's size), never overwrites a file
        unless ``force=True`` (never the archive itself), removes what it wrote when it
        fails, and fsyncs what it wrote when it succeeds. ``link=True`` makes further
        names of one tensor file hard links to the first. Returns ``{"tag", "out",
        "graph_file", "paths", "files", "links", "bytes"}``. The GIL is released
        meanwhile."""
        return self._native.extract(
            _fspath(out),
            force=bool(force),
            link=bool(link),
            max_output=None if max_output is None else _whole("max_output", max_output),
            max_files=_whole("max_files", max_files),
        )

    def get(self, name: str, default: Any = None) -> Any:
        """Parameter ``name`` as :meth:`get_tensor` gives it, or ``default`` when the tag
        has no such parameter (like ``dict.get``)."""
        if name not in self:
            return default
        return self[name]

    def items(self) -> "collections.abc.ItemsView[str, np.ndarray]":
        """``(name, array)`` pairs in params.txt order: a view, as a mapping's is (it has
        a length and can be iterated again; each iteration reads the arrays anew)."""
        return _TagItems(self)

    def values(self) -> "collections.abc.ValuesView[np.ndarray]":
        """The arrays, in params.txt order: a view, as a mapping's is (it has a length
        and can be iterated again; each iteration reads the arrays anew)."""
        return _TagValues(self)

    def lod(self, name: str) -> List[List[int]]:
        """Parameter ``name``'s level-of-detail table (``[]`` when it has none)."""
        return self._native.lod(name)

    def updater_keys(self) -> List[str]:
        """Names with updater (optimizer) state, in updater.txt order."""
        return self._native.updater_keys()

    def updater(self, name: str) -> List[np.ndarray]:
        """The updater state arrays of ``name`` (e.g. Adam's m and v), in stored order."""
        return self._native.updater(name)

    @property
    def metadata(self) -> Dict[str, Any]:
        """metadata.json as a dict (``{}`` when the tag has none). One that is not a JSON
        object raises ``ModelzipError(kind="syntax")`` naming the entry."""
        if self._metadata is None:
            raw = self._native.metadata()
            if raw is None:
                meta: Any = {}
            else:
                entry = f"{self.name}/metadata.json"
                try:
                    meta = json.loads(raw)
                except ValueError as e:
                    raise _make("syntax", f"{entry} is not valid JSON: {e}") from None
                if not isinstance(meta, dict):
                    raise _make(
                        "syntax",
                        f"{entry} is a JSON {type(meta).__name__}, not an object "
                        "(docs/FORMAT.md: metadata.json is a JSON object)",
                    )
            self._metadata = meta
        return self._metadata

    @property
    def graph_encoding(self) -> Optional[str]:
        """``"flatbuffers"`` (graph.fb), ``"programdesc"`` (graph.pdmodel) or None."""
        g = self._native.graph()
        return None if g is None else g[0]

    def graph_bytes(self) -> Optional[bytes]:
        """The stored graph entry's bytes, or None when the tag has no graph."""
        g = self._native.graph()
        return None if g is None else g[1]

    def to_dict(self) -> Dict[str, np.ndarray]:
        """Every parameter as ``{name: array}`` (views when stored, no copies)."""
        return dict(self._native.get_all())

    def __repr__(self) -> str:
        return f"<modelzip.Tag {self.name!r}: {len(self)} params>"


class TensorSlice:
    """One parameter of a tag, read in parts (made by :meth:`Tag.get_slice`).

    ``[key]`` takes what numpy's basic indexing takes: ints (negative from the end),
    slices of step 1 (clamped to the dimension, as numpy clamps them), ``...``, one entry
    per leading dimension (the rest whole). It reads only the part it returns: rows of a
    stored tensor of a local archive are a read-only view of the memory map (no copy, the
    pages of other rows untouched), a box of several runs is gathered into an owned
    array, and a remote archive fetches only the part's bytes (rows: one range request).
    An int past its dimension, more indices than dimensions, a step other than 1 or an
    index of another type raise :class:`ModelzipValueError` (``invalid_input``).
    """

    __slots__ = ("_native", "_name", "_dtype", "_shape")

    def __init__(self, native: Any, name: str) -> None:
        self._native = native
        self._name = name
        self._dtype, dims = native.head(name)
        self._shape: List[int] = list(dims)

    def get_shape(self) -> List[int]:
        """The parameter's dims."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The parameter's dtype name (``"FP32"``, ``"BF16"`` ...; docs/FORMAT.md)."""
        return self._dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        """The parameter's dims, as numpy's ``shape``."""
        return tuple(self._shape)

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype the parts are read as."""
        return _numpy_dtype(self._dtype)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        ranges, drop = self._ranges(key)
        arr = _array(self._native.slice(self._name, ranges), f"slice of param {self._name!r}")
        if drop:
            arr = arr.reshape(tuple(n for d, n in enumerate(arr.shape) if d not in drop))
        return arr

    def _ranges(self, key: Any) -> Tuple[List[Tuple[int, int]], set]:
        """``([(start, end)] per leading dimension, dims indexed by an int)`` of ``key``."""
        shape = self._shape
        keys = key if isinstance(key, tuple) else (key,)
        bad = lambda why: _make(  # noqa: E731
            "invalid_input", f"slice of param {self._name!r} (dims {shape}): {why}"
        )
        if sum(1 for k in keys if k is Ellipsis) > 1:
            raise bad("at most one ... is allowed")
        named = sum(1 for k in keys if k is not Ellipsis)
        if named > len(shape):
            raise bad(f"{named} indices for a tensor of {len(shape)} dimensions")
        expanded: List[Any] = []
        for k in keys:
            if k is Ellipsis:
                expanded.extend([slice(None)] * (len(shape) - named))
            else:
                expanded.append(k)
        ranges: List[Tuple[int, int]] = []
        drop = set()
        for d, k in enumerate(expanded):
            n = shape[d]
            if isinstance(k, slice):
                try:
                    start, stop, step = k.indices(n)
                except TypeError:  # a bound that is not an int (1.5, "1")
                    raise bad(
                        f"slice {k!r} of dimension {d}: its start, stop and step must be ints or None"
                    ) from None
                if step != 1:
                    raise bad(f"step {step} of dimension {d}: only step 1 is read (slice, then step in numpy)")
                ranges.append((start, max(start, stop)))
            elif k is None or isinstance(k, (bool, np.bool_)):
                raise bad(f"index {k!r} of dimension {d}: ints, slices and ... are supported")
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    raise bad(
                        f"index {k!r} of dimension {d}: ints, slices and ... are supported"
                    ) from None
                if not -n <= i < n:
                    raise bad(f"index {i} is out of bounds for dimension {d}, which has {n}")
                i += n if i < 0 else 0
                ranges.append((i, i + 1))
                drop.add(d)
        # Trailing whole dimensions need no range.
        while ranges and len(ranges) - 1 not in drop and ranges[-1] == (0, shape[len(ranges) - 1]):
            ranges.pop()
        return ranges, drop

    def __repr__(self) -> str:
        return f"<modelzip.TensorSlice {self._name!r} {self._dtype} {self._shape}>"


class _TagItems(collections.abc.ItemsView):
    """Tag.items(): ItemsView reading every array in one native call per iteration."""

    __slots__ = ()

    def __iter__(self) -> Iterator[Tuple[str, np.ndarray]]:
        yield from self._mapping._native.get_all()


class _TagValues(collections.abc.ValuesView):
    """Tag.values(): ValuesView reading every array in one native call per iteration."""

    __slots__ = ()

    def __iter__(self) -> Iterator[np.ndarray]:
        for _, arr in self._mapping._native.get_all():
            yield arr


# A Tag is a read-only mapping of name -> array: isinstance(tag, Mapping) holds. It is
# registered rather than derived so that `==` stays identity (Mapping's __eq__ would
# compare arrays elementwise) and keys()/items() keep their list/iterator results.
collections.abc.Mapping.register(Tag)


class Archive:
    """An open archive (memory-mapped). Use as a context manager or call :meth:`close`;
    arrays handed out stay valid after closing."""

    __slots__ = ("_native",)

    def __init__(self, path: PathLike) -> None:
        self._native = _modelzip.NativeArchive(_fspath(path))

    @property
    def path(self) -> str:
        """The archive's path as given."""
        return self._native.path

    @property
    def tags(self) -> List[str]:
        """Tag names, oldest first, as in tags.txt."""
        return self._native.tags

    @property
    def default_tag(self) -> Optional[str]:
        """The newest tag (the one loaded by default): the last line of tags.txt; None
        when the archive has no tags (``modelzip rm`` of its last tag leaves none)."""
        return self._native.default_tag

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._native.closed

    def tag(self, name: str) -> Tag:
        """Tag ``name``, ignoring ASCII case; a missing tag raises :class:`ModelzipKeyError`."""
        return Tag(self._native.tag(name))

    def __getitem__(self, name: str) -> Tag:
        return self.tag(name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if not name.isascii():  # tag names are ASCII; str.lower() maps "\u212a" to "k"
            return False
        low = name.lower()
        return any(t.lower() == low for t in self.tags)

    def __iter__(self) -> Iterator[str]:
        return iter(self.tags)

    def __len__(self) -> int:
        return len(self.tags)

    def latest(self) -> Tag:
        """The tag of :attr:`default_tag`; an archive with no tags raises
        ``ModelzipError(kind="invalid_input")`` ("the archive has no tags")."""
        return self.tag(self._native.latest_name())

    def extract(
        self,
        tag: Optional[str],
        out: PathLike,
        *,
        force: bool = False,
        link: bool = False,
        max_output: Optional[int] = None,
        max_files: int = 100_000,
    ) -> Dict[str, Any]:
        """Writes tag ``tag`` (``None``: the newest) under ``out`` as a Paddle
        persistables directory: :meth:`Tag.extract`."""
        t = self.latest() if tag is None else self.tag(tag)
        return t.extract(out, force=force, link=link, max_output=max_output, max_files=max_files)

    def verify(self) -> List[Tuple[Optional[str], str]]:
        """Checks structure, references, CRCs, SHA-256 manifests and every tensor, like
        ``modelzip verify``: the problems found as ``(entry, message)``; empty when sound."""
        return self._native.verify()

    def close(self) -> None:
        """Releases this object's hold on the memory map (arrays keep their own)."""
        self._native.close()

    def __enter__(self) -> "Archive":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<modelzip.Archive {self.path!r} (closed)>"
        return f"<modelzip.Archive {self.path!r}: {len(self.tags)} tags>"


def open(path: PathLike) -> Archive:  # noqa: A001 - the documented name
    """Opens the archive at ``path`` (memory-mapped; only the central directory and
    tags.txt are read). An unfinished append left by a killed writer is rolled back.

    ``path`` may be a URL — ``s3://bucket/key``, ``gs://``, ``az://``, ``http(s)://``,
    ``file://`` — read by byte ranges (credentials and endpoints from the environment,
    e.g. ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``; docs/REMOTE.md): opening fetches the
    end of the object, each tensor one range request; arrays are then owned copies.
    """
    return Archive(path)


def upload(local: PathLike, url: str, *, if_match: Optional[str] = None, force: bool = False) -> Optional[str]:
    """Uploads the local archive ``local`` to ``url`` (``modelzip cp``): create-only by
    default (an existing object is an error), or replacing only the version whose ETag
    is ``if_match`` (files of up to 64 MiB: a larger one, which goes up in parts, is
    refused with ``kind="remote_conflict"`` and nothing replaced), or anything with
    ``force=True``; large files go up in parts.
    Returns the new object's ETag when the store gives one."""
    return _modelzip.upload(_fspath(local), url, if_match, force)


def download(url: str, local: PathLike, *, force: bool = False) -> Optional[str]:
    """Downloads the archive at ``url`` to ``local`` atomically (a temp file, verified as
    an archive, renamed into place; nothing is left on failure). An existing ``local`` is
    refused (``FileExistsError``, before anything is downloaded, and again at the rename
    if one appeared meanwhile) unless ``force=True``, as ``modelzip cp`` without
    ``--force``. Returns the ETag."""
    dest = _local(local, "download to", "the destination must be a local path")
    return _modelzip.download(url, dest, force)


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


def save(
    path: PathLike,
    tag: str,
    params: Mapping[str, Any],
    updater: Optional[Mapping[str, Sequence[Any]]] = None,
    metadata: Optional[Mapping[str, Any]] = None,
    graph: Union[None, bytes, Tuple[str, bytes]] = None,
    *,
    wait: bool = False,
) -> Dict[str, Any]:
    """Saves tag ``tag``: creates the archive (atomically: temp file, fsync, rename), or
    appends the tag in place (journaled: a crash at any instant leaves the archive as it
    was) when it exists. A tensor identical to one already stored is referenced.

    ``params``: name -> array-like (C-contiguous arrays are read without copying);
    ``updater``: name -> sequence of arrays; ``metadata``: a JSON-serialisable dict
    (metadata.json; numpy scalars and arrays become numbers and lists, NaN and infinity
    are refused); ``graph``: the graph's bytes (graph.fb or a Paddle ProgramDesc,
    told apart by the FlatBuffers identifier) or ``(encoding, bytes)``. With
    ``wait=True`` a save waits for another writer instead of raising
    ``ModelzipError(kind="locked")``. The GIL is released while the arrays are hashed and
    written: do not modify them from another thread until ``save`` returns.

    Returns ``{"tag", "params", "shared", "own_bytes"}``: the tag, its parameter count,
    how many are shared with older tags, and the bytes the tag's own entries take. The
    last three are read back from the archive after the commit, without waiting for a
    writer: when that read fails (another writer appending at that instant, a remote read
    failing) the save has still succeeded, and the report leaves them out.

    ``path`` may be an ``s3://`` or ``az://`` URL (credentials and endpoint from the environment): the
    tag is appended to the object where it lies, its old bytes copied by the store and
    only the new ones uploaded, committed only if the object is still the version read
    (a lost race raises ``ModelzipError(kind="remote_conflict")``, "... changed since it
    was opened ...; nothing was written"); with no object there, one is created. The
    result then also has ``"created"``, ``"version"``, ``"previous_version"``,
    ``"bytes_uploaded"``, ``"bytes_copied"``, ``"bytes_reread"`` and ``"requests"``
    (docs/REMOTE.md, "Remote appends"). Other URLs are refused.
    """
    meta = _metadata_json(metadata)
    p = os.fspath(path)
    target = p if _is_s3(p) else _local(path, "save to")
    return _modelzip.save(
        target,
        tag,
        _params_list(params),
        _updater_list(updater),
        meta,
        _graph_arg(graph),
        wait,
    )


# ---------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------


def _whole(what: str, value: Any, least: int = 0, below: int = 1 << 64, why: str = "a u64") -> int:
    """``value`` as an integer ``least <= n < below`` for ``what`` (Python and numpy
    integers; a float, even 2.0, or a bool is refused rather than truncated), or
    ``invalid_input`` naming it; ``why`` says what the upper bound is."""
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        raise _make(
            "invalid_input",
            f"{what}={value!r} is invalid: it must be an integer >= {least}, "
            f"not a {type(value).__name__}",
        ) from None
    if n < least:
        raise _make(
            "invalid_input", f"{what}={n} is invalid: it must be an integer >= {least}"
        )
    if n >= below:
        raise _make(
            "invalid_input",
            f"{what}={n} is invalid: it must be below {_power(below)} ({why})",
        )
    return n


def _power(n: int) -> str:
    """``2**k`` for a power of two ``n``, else ``n``."""
    return f"2**{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def _optional_whole(what: str, value: Any) -> Optional[int]:
    return None if value is None else _whole(what, value, least=1)


def _keep_best(keep_best: Any) -> Optional[Tuple[str, str, int]]:
    if keep_best is None:
        return None
    try:
        metric, goal, count = keep_best
    except (TypeError, ValueError):
        raise _make(
            "invalid_input",
            f'checkpoint option keep_best={keep_best!r} is invalid: it must be '
            f'(metric, "min" or "max", count)',
        ) from None
    return (str(metric), str(goal), _whole("checkpoint option keep_best count", count, least=1))


def _fraction(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _make(
            "invalid_input",
            f"{what}={value!r} is invalid: it must be a number from 0 to 1, "
            f"not a {type(value).__name__}",
        )
    return float(value)


def _seconds(what: str, value: Any) -> float:
    """``value`` as a finite number of seconds >= 0 for ``what``, or ``invalid_input``
    naming it (a string, a bool, NaN or infinity is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _make(
            "invalid_input",
            f"{what}={value!r} is invalid: it must be a number of seconds >= 0, "
            f"not a {type(value).__name__}",
        )
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise _make(
            "invalid_input", f"{what}={value!r} is invalid: it must be a finite number of seconds >= 0"
        )
    return seconds


# Ranks and world sizes are u32s of the library's; it refuses world sizes past 131072
# (with its own message, naming that limit).
_RANKS = 1 << 32
_RANKS_WHY = "a u32; modelzip allows at most 131072 ranks"


def _metrics(metrics: Optional[Mapping[str, float]]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for k, v in (metrics or {}).items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError) as e:
            raise _make(
                "invalid_input",
                f"metric {str(k)!r}={v!r} is invalid: it must be a number ({e})",
            ) from None
    return out


@dataclass
class Checkpoint:
    """A restored checkpoint: owned, writable arrays (independent of the archive file)."""

    step: int
    tag: str
    params: Dict[str, np.ndarray] = field(default_factory=dict)
    updater: Dict[str, List[np.ndarray]] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)


class SaveHandle:
    """A running :meth:`Checkpointer.save_async`."""

    __slots__ = ("_native",)

    def __init__(self, native: Any) -> None:
        self._native = native

    def wait(self) -> Dict[str, Any]:
        """Waits for the save; returns its report (as :meth:`Checkpointer.save`'s, which
        says when ``"params"``, ``"shared"`` and ``"own_bytes"`` are left out) or raises
        its error."""
        return self._native.wait()

    def done(self) -> bool:
        """Whether the save has finished (successfully or not)."""
        return self._native.done()


def _checkpoint(restored: tuple) -> Checkpoint:
    step, tag, params, updater, metrics = restored
    return Checkpoint(
        step=step,
        tag=tag,
        params={name: _array(d, f"parameter {name!r}") for name, d in params},
        updater={
            name: [_array(d, f"updater state {k} of {name!r}") for k, d in enumerate(ds)]
            for name, ds in updater
        },
        metrics=dict(metrics),
    )


class Checkpointer:
    """Versioned checkpoints of one training run in one archive.

    Each save is a new tag named by ``pattern`` (``{step}`` or ``{step:0N}``); unchanged
    tensors are stored once; after each save the retention policy removes checkpoints
    that no policy keeps (``keep_last`` newest, every step divisible by ``keep_every``,
    the ``keep_best=(metric, "min"|"max", count)`` best); the newest is always kept.
    Tags that are not checkpoints (a ``release`` tag, an INT8 variant) are never removed.
    With no policy, every checkpoint is kept. Opening applies the policy to an existing
    archive (a run killed between a save and its retention pass ends as the policy says).

    With ``world_size`` > 1, each of ``world_size`` processes opens a Checkpointer with its
    ``rank`` and every save is a sharded save (docs/SHARDED.md): ``params`` and
    ``updater`` then hold this rank's rows as ``(rows, first_row, global_shape)`` (or
    its blocks as ``(block, offsets, global_shape)``), as
    :func:`modelzip.sharded.save` takes them; rank 0 commits, records the metrics and
    applies the retention policy; ``timeout`` bounds each wait for the other ranks;
    ``group`` is the job's id, as :func:`modelzip.sharded.save` takes it (a restarted
    job's lingering rank then cannot join the new job's save).

    ``path`` may be an ``s3://`` or ``az://`` URL: each save appends the checkpoint to the object
    where it lies (only its new bytes uploaded, the old ones copied by the store) and the
    retention pass removes checkpoints the same way (docs/REMOTE.md); a save that loses a
    race with another writer re-opens the archive and tries again, up to 4 more times,
    then raises ``ModelzipError(kind="remote_conflict")`` (a sharded save's commit,
    ``world_size`` > 1, is not tried again; its retention pass is). A remote archive is
    never compacted.

    The counts (``keep_last``, ``keep_every``, ``keep_best``'s count) must be integers
    >= 1 and ``compact_dead_fraction`` a number from 0 (compact whenever there are dead
    bytes) to 1 (never compact); anything else (0, 2.5, NaN ...) raises
    ``ModelzipError(kind="invalid_input")`` naming the option and the value, before the
    archive is touched. So are ``rank`` and ``world_size`` unless they are integers below
    2**32 with ``rank`` < ``world_size`` (the library allows at most 131072 ranks, which
    the first sharded save checks), and ``timeout`` unless it is a finite number of
    seconds >= 0. Steps are integers >= 0 (a float step is refused, not truncated).
    """

    def __init__(
        self,
        path: PathLike,
        keep_last: Optional[int] = None,
        keep_every: Optional[int] = None,
        keep_best: Optional[Tuple[str, str, int]] = None,
        pattern: str = "step-{step:09}",
        *,
        compact_dead_fraction: float = 0.5,
        wait: bool = False,
        rank: int = 0,
        world_size: int = 1,
        timeout: float = 600.0,
        group: Optional[str] = None,
    ) -> None:
        p = os.fspath(path)
        self._path = p if _is_s3(p) else _local(path, "checkpoint into")
        self._rank = _whole("checkpoint option rank", rank, below=_RANKS, why=_RANKS_WHY)
        self._world_size = _whole(
            "checkpoint option world_size", world_size, least=1, below=_RANKS, why=_RANKS_WHY
        )
        if self._rank >= self._world_size:
            raise _make(
                "invalid_input",
                f"checkpoint option rank={self._rank} is invalid: it is not below "
                f"checkpoint option world_size={self._world_size} (ranks count from 0)",
            )
        self._timeout = _seconds("checkpoint option timeout", timeout)
        self._group = None if group is None else str(group)
        self._native = _modelzip.NativeCheckpointer(
            self._path,
            _optional_whole("checkpoint option keep_last", keep_last),
            _optional_whole("checkpoint option keep_every", keep_every),
            _keep_best(keep_best),
            pattern,
            _fraction("checkpoint option compact_dead_fraction", compact_dead_fraction),
            wait,
        )

    @property
    def path(self) -> str:
        """The archive path."""
        return self._path

    def save(
        self,
        step: int,
        params: Mapping[str, Any],
        updater: Optional[Mapping[str, Sequence[Any]]] = None,
        metrics: Optional[Mapping[str, float]] = None,
    ) -> Dict[str, Any]:
        """Saves a checkpoint and applies the retention policy; returns when it is
        durable. Report: ``{"tag", "params", "shared", "own_bytes", "removed",
        "compacted", "deferred"}`` (``deferred``: the checkpoint is committed but another
        writer held the archive's lock before the retention pass, which the next save
        runs), plus ``"bytes_uploaded"`` and ``"bytes_copied"`` (by the store) for
        an ``s3://`` archive. ``"params"``, ``"shared"`` and ``"own_bytes"`` are read back
        after the commit, without waiting for a writer, and left out when that read fails
        (the tag already removed by a later save's retention, as ``keep_last=1`` does to an
        asynchronous save's tag before its handle is waited on; another writer appending
        at that instant): the save itself succeeded. A NaN or infinite metric is stored as JSON ``null``: absent when
        restored, and no ``keep_best`` candidate.

        Sharded (``world_size`` > 1): ``params``/``updater`` hold this rank's rows; returns
        once the checkpoint is committed, with ``{"tag", "removed", "compacted", "deferred",
        "rank"}``
        (``removed`` by rank 0's retention pass; empty on the other ranks; rank 0 adds
        ``bytes_uploaded`` and ``bytes_copied`` for a remote archive)."""
        if self._world_size > 1:
            from . import sharded

            items = [sharded._shard_item(f"shard of {k!r}", str(k), None, v) for k, v in params.items()]
            for k, states in (updater or {}).items():
                for slot, v in enumerate(states):
                    items.append(sharded._shard_item(f"updater array {slot} of {k!r}", str(k), slot, v))
            return self._native.save_sharded(
                _whole("step", step), items, _metrics(metrics), self._rank, self._world_size, self._timeout,
                self._group,
            )
        return self._native.save(
            _whole("step", step),
            _params_list(params),
            _updater_list(updater),
            _metrics(metrics),
        )

    def save_async(
        self,
        step: int,
        params: Mapping[str, Any],
        updater: Optional[Mapping[str, Sequence[Any]]] = None,
        metrics: Optional[Mapping[str, float]] = None,
    ) -> SaveHandle:
        """Snapshots (copies) the arrays and saves them on a background thread; returns
        at once (after waiting for a previous asynchronous save). The arrays may be
        changed as soon as this returns. Not for sharded checkpoints (``world_size`` > 1):
        use :meth:`save`."""
        if self._world_size > 1:
            raise _make("invalid_input", "save_async does not save sharded checkpoints (world_size > 1): use save")
        return SaveHandle(
            self._native.save_async(
                _whole("step", step),
                _params_list(params),
                _updater_list(updater),
                _metrics(metrics),
            )
        )

    def wait(self) -> Optional[Dict[str, Any]]:
        """Waits for the pending asynchronous save (if any); its report, or None."""
        return self._native.wait()

    def checkpoints(self) -> List[str]:
        """Checkpoint tags, oldest first (tags written by a checkpointer)."""
        return self._native.checkpoints()

    def tags(self) -> List[str]:
        """Every tag of the archive, oldest first."""
        return self._native.tags()

    def latest(self) -> Optional[Checkpoint]:
        """The newest checkpoint, or None when there is none (to resume training)."""
        ckpts = self._native.checkpoints()
        if not ckpts:
            return None
        return _checkpoint(self._native.restore(ckpts[-1]))

    def restore(self, tag: str) -> Checkpoint:
        """The checkpoint of tag ``tag`` (any ASCII case); a tag that is not a
        checkpoint raises ``ModelzipError(kind="not_a_checkpoint")``."""
        return _checkpoint(self._native.restore(tag))

    def __repr__(self) -> str:
        return f"<modelzip.Checkpointer {self._path!r}>"


def tag_for(pattern: str, step: int) -> str:
    """The tag name a checkpoint of ``step`` gets under ``pattern``."""
    return _modelzip.tag_for(pattern, _whole("step", step))


# ---------------------------------------------------------------------------------------
# Paddle
# ---------------------------------------------------------------------------------------


def import_paddle(
    archive: PathLike,
    tag: str,
    model: Optional[PathLike] = None,
    params: Optional[PathLike] = None,
    *,
    dir: Optional[PathLike] = None,  # noqa: A002 - mirrors the CLI's --dir
    wait: bool = False,
) -> Dict[str, Any]:
    """Imports a Paddle inference model (``.pdmodel``, or Paddle 3's default PIR program
    ``.json``, and its ``.pdiparams``; the params file may be omitted for a program
    without parameters) or, with ``dir=``, a
    persistables directory, as tag ``tag`` (archive created if absent, else the tag is
    appended in place; an ``s3://`` or ``az://`` URL gets it by a remote append). Returns
    the import report (tag, created, graph_bytes, params with name/dtype/dims/shared_from,
    shared; for a URL also version, previous_version, bytes_uploaded, bytes_copied,
    bytes_reread and requests)."""
    return _modelzip.import_paddle(
        _writable(archive, "import into"),
        tag,
        None if model is None else _fspath(model),
        None if params is None else _fspath(params),
        None if dir is None else _fspath(dir),
        wait,
    )


def export_paddle(
    archive: PathLike,
    tag: Optional[str],
    prefix: PathLike,
    *,
    overwrite: bool = False,
) -> Dict[str, Any]:
    """Writes tag ``tag`` (None: the newest) as ``PREFIX.pdmodel`` + ``PREFIX.pdiparams``
    (what ``paddle.static.load_inference_model(PREFIX, exe)`` loads; ``PREFIX.json`` in
    place of the ``.pdmodel`` for a tag imported from a PIR program), atomically;
    existing files are refused unless ``overwrite``. Missing parent directories of
    ``PREFIX`` are created (and removed again if the export fails)."""
    prefix = _local(prefix, "export to", _EXPORT_HINT)
    parent = os.path.dirname(os.path.abspath(prefix))
    created = []
    probe = parent
    while not os.path.exists(probe):
        created.append(probe)
        probe = os.path.dirname(probe)
    if created:
        os.makedirs(parent)
    try:
        return _modelzip.export_paddle(_fspath(archive), tag, prefix, overwrite)
    except BaseException:
        for d in created:  # deepest first
            try:
                os.rmdir(d)
            except OSError:
                break
        raise


def import_model(
    archive: PathLike,
    tag: str,
    *inputs: PathLike,
    format: Optional[str] = None,  # noqa: A002 - mirrors the CLI's --format
    wait: bool = False,
) -> Dict[str, Any]:
    """Imports model files of any format as tag ``tag`` (``modelzip import``): Paddle
    (``.pdmodel`` or Paddle 3's PIR ``.json`` [+ ``.pdiparams``], a directory holding
    one such pair as ``paddle.jit.save`` writes it, or a persistables directory),
    TensorFlow (``.pb`` / ``.pbtxt`` frozen GraphDef, or a SavedModel directory),
    safetensors (files, a sharded checkpoint's index or directory), ONNX (``.onnx``,
    external data included). The format is detected from the files unless ``format``
    names it. Returns the import report (as :func:`import_paddle`'s) with ``format`` (the
    format's name) and ``graph`` (the graph entry stored, ``"graph.pdmodel"`` or
    ``"graph.fb"``; None when no graph was imported). ``archive`` may be an ``s3://``
    URL: the tag is a remote append (docs/REMOTE.md)."""
    if not inputs:
        raise _make("invalid_input", "import_model needs at least one input file")
    return _modelzip.import_model(
        _writable(archive, "import into"), tag, [_fspath(p) for p in inputs], format, wait
    )


def export_model(
    archive: PathLike,
    tag: Optional[str],
    out: PathLike,
    *,
    format: Optional[str] = None,  # noqa: A002 - mirrors the CLI's --format
    overwrite: bool = False,
    external_data: bool = False,
    max_shard_bytes: Optional[int] = None,
) -> Dict[str, Any]:
    """Writes tag ``tag`` (None: the newest) as model files (``modelzip export``): in
    ``format`` (``"paddle"``, ``"tf"``, ``"safetensors"``, ``"onnx"``), by default the
    one the tag was imported from. ``out`` is a prefix for Paddle (``OUT.pdmodel``, or
    ``OUT.json`` for a PIR program, + ``OUT.pdiparams``), a file otherwise (a directory
    for sharded safetensors, and for a tag imported from a TensorFlow SavedModel, which
    is written back as a SavedModel directory); ``external_data`` puts ONNX initializers
    in ``OUT.data``; ``max_shard_bytes`` (safetensors only, ``OUT`` an existing
    directory) cuts a sharded checkpoint into shards of at most that many bytes of tensor
    data. Files are written atomically; existing ones are refused unless ``overwrite``.
    Returns ``{"tag", "format", "files", "params", "unused", "notes"}`` (``files``: every
    file written with its size, a sharded checkpoint's shards then its index)."""
    return _modelzip.export_model(
        _fspath(archive), tag, _local(out, "export to", _EXPORT_HINT), format, overwrite,
        external_data, None if max_shard_bytes is None else _whole("max_shard_bytes", max_shard_bytes),
    )


# ---------------------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------------------


def quantize(
    archive: PathLike,
    source: str,
    tag: str,
    *,
    per_channel: bool = True,
    wait: bool = False,
    allow_non_finite: bool = False,
) -> Dict[str, Any]:
    """Derives an INT8 tag ``tag`` from float tag ``source`` (like ``modelzip quantize``):
    symmetric INT8 weights with their scales, per output channel by default; parameters
    that are not quantized are shared with ``source`` at no cost, and the graph (if any)
    dequantizes so Paddle runs the variant. A parameter holding NaN or ±inf is refused
    (``ModelzipError`` kind ``unrepresentable_values``) unless ``allow_non_finite``: then
    those values are stored as 0 and left out of the scale. Returns the variant report
    (each parameter's ``non_finite`` count included, and its ``per_tensor_reason``: why a
    weight was quantized per tensor though ``per_channel``, else ``None``). ``archive``
    may be an ``s3://`` URL: the source read by ranges, the new tag a remote append
    (docs/REMOTE.md)."""
    return _modelzip.quantize(
        _writable(archive, "quantize in"), source, tag, per_channel, wait, allow_non_finite
    )


def compact(archive: PathLike, *, wait: bool = False) -> Dict[str, Any]:
    """Rewrites the archive without its dead bytes (like ``modelzip compact``): those of
    removed tags, rolled-back saves and replaced tables. Locally a new file is written
    and renamed over the old one (arrays of an open archive stay valid); ``archive`` may
    be an ``s3://`` URL: the store copies the live runs of 5 MiB and more, shorter ones
    are read by range and uploaded again, and the commit is conditional on the version
    read (docs/REMOTE.md). Takes the write lock (``wait`` waits for another writer).
    Returns ``{"before", "after"}`` in bytes, and for a URL also ``"padding"``,
    ``"headers_read"``, ``"version"``, ``"bytes_uploaded"``, ``"bytes_copied"``,
    ``"bytes_reread"`` and ``"requests"`` (0, and ``"version"`` None, when the object had
    no dead bytes and nothing was written)."""
    return _modelzip.compact(_writable(archive, "compact"), wait)


def cast(
    archive: PathLike,
    source: str,
    tag: str,
    dtype: str,
    *,
    wait: bool = False,
    allow_non_finite: bool = False,
    allow_overflow: bool = False,
) -> Dict[str, Any]:
    """Derives an ``"FP16"`` or ``"BF16"`` tag ``tag`` from float tag ``source`` (like
    ``modelzip cast``). A parameter holding NaN or ±inf, or finite values beyond the
    dtype's range (which would become ±inf), is refused (``ModelzipError`` kind
    ``unrepresentable_values``) unless ``allow_non_finite`` / ``allow_overflow``. Returns
    the variant report (each parameter's ``non_finite``, ``overflowed`` and
    ``underflowed`` counts included). ``archive`` may be an ``s3://`` URL, as for
    :func:`quantize`."""
    return _modelzip.cast(
        _writable(archive, "cast in"), source, tag, dtype, wait, allow_non_finite, allow_overflow
    )
