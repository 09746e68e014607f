"""A reader of modelzip archives written from docs/FORMAT.md alone, as a third party would.

It uses zipfile, struct, hashlib, json, numpy and xxhash (the summary's fingerprint)
only (no modelzip import, no look at the
implementation), so that what it reads is what the format says, not what the code does.
Every "must" of FORMAT.md that a reader checks is checked here and refused with a
`SpecError` naming the entry (and the line or byte offset).

    ar = SpecArchive("model.zip")
    ar.tags, ar.default_tag           # tags.txt order; the last line
    t = ar.tag("FP32")                # ASCII case ignored
    t.param_names(), t.param("fc.w")  # a Tensor: dtype, dims, lod, data
    t.updater_names(), t.updater("fc.w")
    t.graph(), t.training_config(), t.metadata(), t.check_sha256sums()
    ar.summary()                      # _summary.txt when current, else None
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash


class SpecError(Exception):
    """A rule of FORMAT.md broken: what, and where (entry, line, byte offset)."""

    def __init__(
        self, entry: str, message: str, *, line: int | None = None, offset: int | None = None
    ):
        where = entry
        if line is not None:
            where += f" line {line}"
        if offset is not None:
            where += f" byte {offset}"
        super().__init__(f"{where}: {message}")
        self.entry = entry
        self.line = line
        self.offset = offset


# Element types: Paddle VarType number -> (name, element size, numpy dtype name). The
# numpy names of BF16 and FP8 are ml_dtypes' (numpy has no such types): `Tensor.array()`
# needs ml_dtypes for them, everything else here is plain bytes.
DTYPES: dict[int, tuple[str, int, str]] = {
    0: ("BOOL", 1, "bool"),
    1: ("INT16", 2, "int16"),
    2: ("INT32", 4, "int32"),
    3: ("INT64", 8, "int64"),
    4: ("FP16", 2, "float16"),
    5: ("FP32", 4, "float32"),
    6: ("FP64", 8, "float64"),
    19: ("SIZE_T", 8, "uint64"),
    20: ("UINT8", 1, "uint8"),
    21: ("INT8", 1, "int8"),
    22: ("BF16", 2, "bfloat16"),
    23: ("COMPLEX64", 8, "complex64"),
    24: ("COMPLEX128", 16, "complex128"),
    32: ("FP8_E4M3FN", 1, "float8_e4m3fn"),
    33: ("FP8_E5M2", 1, "float8_e5m2"),
    36: ("UINT16", 2, "uint16"),
    37: ("UINT32", 4, "uint32"),
    38: ("UINT64", 8, "uint64"),
}

MAX_LOD_LEVELS = 1024
MAX_METADATA = 4 << 20
MAX_SUMMARY = 16 << 20
MAX_UPDATER_REFS = 256
MAX_TABLE_LINE = 1 << 20  # params.txt, updater.txt, sha256sums.txt
MAX_TAGS_LINE = 64 << 10
MAX_SHARED_TXT = 64 << 10
SHARED_FILES = ("graph.fb", "graph.pdmodel", "trainingConfig.fb")
GRAPH_FILES = ("graph.fb", "graph.pdmodel")
ALIGN_EXTRA_ID = 0xD935
DEVICE_NAMES = {"CON", "PRN", "AUX", "NUL"} | {
    f"{p}{d}" for p in ("COM", "LPT") for d in "123456789"
}
TAG_CHARS = re.compile(r"[A-Za-z0-9._-]{1,128}")
DECIMAL_U64 = re.compile(r"0|[1-9][0-9]*")


def tag_name_problem(name: str) -> str | None:
    """Why `name` is not a valid tag name (FORMAT.md, tags.txt), or None."""
    if not TAG_CHARS.fullmatch(name) or not name.isascii():
        return "a tag name is 1-128 bytes of ASCII letters, digits, '.', '_', '-'"
    if not name[0].isalnum():
        return "a tag name starts with a letter or digit"
    if name.endswith("."):
        return "a tag name does not end with '.'"
    if name.split(".", 1)[0].upper() in DEVICE_NAMES:
        return "a tag name is not a Windows device name"
    if name.lower() == "tags.txt":
        return "a tag name is not tags.txt"
    return None


def decode_name(text: str, entry: str, line: int) -> str:
    """A params.txt / updater.txt name: `%XX` (either case) decoded, any other `%` refused."""
    out = bytearray()
    i = 0
    raw = text.encode("utf-8")
    while i < len(raw):
        b = raw[i]
        if b == 0x25:  # '%'
            hex2 = raw[i + 1 : i + 3]
            if len(hex2) != 2 or not all(c in b"0123456789abcdefABCDEF" for c in hex2):
                raise SpecError(
                    entry, f"'%' not followed by two hex digits in name {text!r}", line=line
                )
            out.append(int(hex2, 16))
            i += 3
        else:
            out.append(b)
            i += 1
    try:
        name = out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(
            entry, f"name {text!r} decodes to bytes that are not UTF-8", line=line
        ) from e
    if not name:
        raise SpecError(entry, "empty parameter name", line=line)
    return name


def encode_name(name: str) -> str:
    """The writer's side of `decode_name`: `%`, space, below U+0020 and U+007F as %XX."""
    out = []
    for ch in name:
        if ch in "% " or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


def text_lines(data: bytes, entry: str, max_line: int = MAX_TABLE_LINE) -> list[tuple[int, str]]:
    """(line number, line) of a UTF-8 text entry: `\\n` or `\\r\\n`, the last line's end
    optional, empty or whitespace-only lines skipped, lines of at most `max_line` bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(entry, "not UTF-8", offset=e.start) from e
    out = []
    for n, line in enumerate(text.split("\n"), start=1):
        if len(line.encode()) > max_line:
            raise SpecError(entry, f"line longer than {max_line} bytes", line=n)
        if line.endswith("\r"):
            line = line[:-1]
        if line.strip():
            out.append((n, line))
    return out


# ---- LoDTensor records ---------------------------------------------------------------


@dataclass
class Tensor:
    """One decoded LoDTensor record."""

    dtype: int
    dims: tuple[int, ...]
    lod: list[list[int]]
    data: bytes
    data_offset: int = 0  # where the raw data starts in the record

    @property
    def dtype_name(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def numpy_dtype_name(self) -> str:
        return DTYPES[self.dtype][2]

    def array(self) -> np.ndarray:
        name = self.numpy_dtype_name
        if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            import ml_dtypes  # only for the types numpy lacks

            dt = np.dtype(getattr(ml_dtypes, name))
        else:
            dt = np.dtype(name).newbyteorder("<")
        return np.frombuffer(self.data, dtype=dt).reshape(self.dims)


class _Cursor:
    def __init__(self, data: bytes, entry: str):
        self.data, self.entry, self.pos = data, entry, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SpecError(
                self.entry,
                f"truncated {what}: {n} bytes needed, {len(self.data) - self.pos} left",
                offset=self.pos,
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def i32(self, what: str) -> int:
        return struct.unpack("<i", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]


def _varint(buf: bytes, pos: int, entry: str, base: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise SpecError(entry, "TensorDesc: bad varint", offset=base + pos)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value & ((1 << 64) - 1), pos


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_tensor_desc(buf: bytes, entry: str, base: int) -> tuple[int, list[int]]:
    """VarType.TensorDesc: field 1 data_type (varint), field 2 dims (int64, packed or not)."""
    dtype = None
    dims: list[int] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, entry, base)
        fieldno, wire = key >> 3, key & 7
        if fieldno == 0:
            raise SpecError(entry, "TensorDesc: field number 0", offset=base + pos)
        if wire == 0:
            value, pos = _varint(buf, pos, entry, base)
            if fieldno == 1:
                dtype = value
            elif fieldno == 2:
                dims.append(_signed64(value))
        elif wire == 2:
            length, pos = _varint(buf, pos, entry, base)
            if pos + length > len(buf):
                raise SpecError(entry, "TensorDesc: truncated field", offset=base + pos)
            chunk = buf[pos : pos + length]
            pos += length
            if fieldno == 2:  # packed dims
                p = 0
                while p < len(chunk):
                    value, p = _varint(chunk, p, entry, base)
                    dims.append(_signed64(value))
            elif fieldno == 1:
                raise SpecError(entry, "TensorDesc: data_type is not a varint", offset=base + pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise SpecError(entry, f"TensorDesc: wire type {wire} unsupported", offset=base + pos)
        if pos > len(buf):
            raise SpecError(entry, "TensorDesc: truncated field", offset=base + len(buf))
    if dtype is None:
        raise SpecError(entry, "TensorDesc lacks data_type", offset=base)
    return dtype, dims


def decode_lodtensor(data: bytes, entry: str) -> Tensor:
    """One LoDTensor record, and nothing after it (FORMAT.md, The Paddle LoDTensor record)."""
    c = _Cursor(data, entry)
    at = c.pos
    if (v := c.u32("version")) != 0:
        raise SpecError(entry, f"LoDTensor version {v}, expected 0", offset=at)
    at = c.pos
    levels = c.u64("lod_level")
    if levels > MAX_LOD_LEVELS:
        raise SpecError(entry, f"{levels} LoD levels, more than {MAX_LOD_LEVELS}", offset=at)
    lod: list[list[int]] = []
    for _ in range(levels):
        at = c.pos
        nbytes = c.u64("LoD level size")
        if nbytes % 8:
            raise SpecError(entry, f"LoD level of {nbytes} bytes, not a multiple of 8", offset=at)
        raw = c.take(nbytes, "LoD level")  # checked against what remains before any allocation
        lod.append(list(struct.unpack(f"<{nbytes // 8}Q", raw)))
    lod_end = c.pos
    at = c.pos
    if (v := c.u32("tensor version")) != 0:
        raise SpecError(entry, f"tensor version {v}, expected 0", offset=at)
    at = c.pos
    desc_size = c.i32("desc_size")
    if desc_size < 0:
        raise SpecError(entry, f"desc_size {desc_size} is negative", offset=at)
    desc_at = c.pos
    desc = c.take(desc_size, "TensorDesc")
    dtype, dims = decode_tensor_desc(desc, entry, desc_at)
    if dtype not in DTYPES:
        raise SpecError(entry, f"unknown data_type {dtype}", offset=desc_at)
    for d in dims:
        if d < 0:
            raise SpecError(entry, f"negative dim {d} in {dims}", offset=desc_at)
    numel = 1
    for d in dims:
        numel *= d
    nbytes = numel * DTYPES[dtype][1]
    nonzero = 1
    for d in dims:
        nonzero *= d or 1
    if nonzero >= 1 << 64 or nonzero * DTYPES[dtype][1] >= 1 << 64:
        raise SpecError(
            entry, f"dims {dims}: element or byte count of 2^64 or more", offset=desc_at
        )
    data_at = c.pos
    payload = c.take(nbytes, "data")
    if c.pos != len(data):
        raise SpecError(entry, f"{len(data) - c.pos} bytes after the record", offset=c.pos)
    _check_lod(lod, dims, entry, lod_end)
    return Tensor(dtype, tuple(dims), lod, bytes(payload), data_at)


def _check_lod(lod: list[list[int]], dims: list[int], entry: str, at: int) -> None:
    if lod and not dims:
        raise SpecError(entry, "a LoD on a 0-D tensor", offset=at)
    for i, level in enumerate(lod):
        if len(level) < 2:
            raise SpecError(
                entry, f"LoD level {i} has {len(level)} offsets, fewer than 2", offset=at
            )
        if level[0] != 0:
            raise SpecError(entry, f"LoD level {i} starts at {level[0]}, not 0", offset=at)
        if any(b < a for a, b in zip(level, level[1:])):
            raise SpecError(entry, f"LoD level {i} decreases", offset=at)
        if i + 1 < len(lod) and level[-1] != len(lod[i + 1]) - 1:
            raise SpecError(entry, f"LoD level {i} does not nest in level {i + 1}", offset=at)
    if lod and dims[0] != 0 and lod[-1][-1] != dims[0]:
        raise SpecError(entry, f"LoD ends at {lod[-1][-1]}, dims[0] is {dims[0]}", offset=at)


# ---- the archive ----------------------------------------------------------------------


def _raw_name(info: zipfile.ZipInfo) -> bytes:
    """The name's bytes as stored (zipfile decodes names without flag bit 11 as cp437)."""
    return info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")


def entry_name(info: zipfile.ZipInfo) -> str:
    """Names are UTF-8 whether or not flag bit 11 is set (FORMAT.md, Zip container)."""
    try:
        return _raw_name(info).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(info.orig_filename, "entry name is not UTF-8") from e


def check_entry(info: zipfile.ZipInfo) -> None:
    """The zip-container rules a reader must enforce for every entry (FORMAT.md, Zip container)."""
    name = entry_name(info)
    if not name:
        raise SpecError(name, "empty entry name")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise SpecError(name, f"compression method {info.compress_type}, only 0 and 8 allowed")
    if info.flag_bits & 0x1:
        raise SpecError(name, "encrypted entry")
    if name.startswith("/") or "\\" in name or "\0" in name or re.match(r"[A-Za-z]:", name):
        raise SpecError(name, "unsafe entry name")
    body = name[:-1] if name.endswith("/") else name
    if any(c in ("", ".", "..") for c in body.split("/")):
        raise SpecError(name, "entry name has an empty, '.' or '..' component")
    if (info.external_attr >> 16) & 0o170000 == 0o120000:
        raise SpecError(name, "symlink entry")


@dataclass
class Ref:
    """A params.txt / updater.txt ref resolved to its entry."""

    tag: str  # the tag that holds the file, as tags.txt spells it
    number: int
    entry: str
    foreign: bool  # True when written TAG/N


@dataclass
class Summary:
    count: int
    fingerprint: str
    records: list[dict] = field(default_factory=list)


class SpecArchive:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        # FORMAT.md: a journal beside the archive means an interrupted in-place write; whoever
        # opens it rolls back under the write lock, and "a reader that cannot write says so
        # and stops". This reader does not write.
        journal = Path(str(self.path.resolve()) + ".journal")
        if journal.exists():
            raise SpecError(
                journal.name, "an interrupted append left a rollback journal: open with a writer"
            )
        self.zip = zipfile.ZipFile(self.path)
        self.infos = self.zip.infolist()
        self.entries: dict[str, zipfile.ZipInfo] = {}
        for info in self.infos:
            check_entry(info)
            name = entry_name(info)
            if name in self.entries:
                raise SpecError(name, "listed twice in the central directory")
            self.entries[name] = info
        self.tags = self._read_tags()
        self._by_lower = {t.lower(): t for t in self.tags}

    def close(self) -> None:
        self.zip.close()

    def __enter__(self) -> "SpecArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, name: str, limit: int | None = None) -> bytes:
        info = self.entries.get(name)
        if info is None:
            raise SpecError(name, "no such entry")
        if limit is not None and info.file_size > limit:
            raise SpecError(name, f"{info.file_size} bytes, over the limit of {limit}")
        return self.zip.read(info)

    def has(self, name: str) -> bool:
        return name in self.entries

    def _read_tags(self) -> list[str]:
        tags: list[str] = []
        seen: dict[str, int] = {}
        for n, line in text_lines(self.read("tags.txt"), "tags.txt", MAX_TAGS_LINE):
            if problem := tag_name_problem(line):
                raise SpecError("tags.txt", f"tag {line!r}: {problem}", line=n)
            if line.lower() in seen:
                raise SpecError(
                    "tags.txt",
                    f"tag {line!r} equals line {seen[line.lower()]} ignoring case",
                    line=n,
                )
            seen[line.lower()] = n
            tags.append(line)
        return tags

    @property
    def default_tag(self) -> str | None:
        return self.tags[-1] if self.tags else None

    def resolve_tag(self, name: str) -> str | None:
        """The tags.txt spelling of `name` (ASCII case ignored), or None."""
        return self._by_lower.get(name.lower()) if name.isascii() else None

    def tag(self, name: str | None = None) -> "SpecTag":
        if name is None:
            if not self.tags:
                raise SpecError("tags.txt", "no tags")
            name = self.default_tag
        spelled = self.resolve_tag(name)
        if spelled is None:
            raise KeyError(name)
        return SpecTag(self, spelled)

    def tag_files(self, tag: str) -> list[str]:
        """The entries under `<tag>/` (the tag's own files), in central-directory order."""
        prefix = tag + "/"
        return [n for n in self.entries if n.startswith(prefix) and not n.endswith("/")]

    def data_offset(self, entry: str, tensor: Tensor) -> int:
        """File offset of a stored tensor's raw data (FORMAT.md: a multiple of 64 in modelzip's)."""
        info = self.entries[entry]
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(30)
        sig, *_, name_len, extra_len = struct.unpack("<IHHHHHIIIHH", header)
        if sig != 0x04034B50:
            raise SpecError(entry, "no local header signature", offset=info.header_offset)
        return info.header_offset + 30 + name_len + extra_len + tensor.data_offset

    def alignment_field(self, entry: str) -> int | None:
        """The alignment of the local header's 0xd935 extra field (u16 alignment, then zero
        bytes), or None when there is none."""
        info = self.entries[entry]
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            name_len, extra_len = struct.unpack("<HH", f.read(30)[26:30])
            f.seek(info.header_offset + 30 + name_len)
            extra = f.read(extra_len)
        pos = 0
        while pos + 4 <= len(extra):
            field_id, size = struct.unpack_from("<HH", extra, pos)
            body = extra[pos + 4 : pos + 4 + size]
            if field_id == ALIGN_EXTRA_ID:
                if size < 2 or len(body) != size or any(body[2:]):
                    raise SpecError(entry, "0xd935 extra field is not u16 alignment + zero bytes")
                return struct.unpack_from("<H", body)[0]
            pos += 4 + size
        return None

    # ---- _summary.txt

    def fingerprint(self, version: int = 2) -> tuple[int, str]:
        """(count, fingerprint) of the central directory without _summary.txt (FORMAT.md):
        XXH3-128 for summary version 2, SHA-256 for version 1."""
        h = hashlib.sha256() if version == 1 else xxhash.xxh3_128()
        count = 0
        for info in self.infos:
            if _raw_name(info) == b"_summary.txt":
                continue
            name = _raw_name(info)
            h.update(struct.pack("<Q", len(name)) + name)
            h.update(
                struct.pack(
                    "<HIQQ", info.compress_type, info.CRC, info.compress_size, info.file_size
                )
            )
            count += 1
        return count, h.hexdigest()

    def summary(self) -> Summary | None:
        """_summary.txt parsed, when present and current (count and fingerprint match); None
        otherwise. A current summary that breaks the grammar raises SpecError (FORMAT.md has
        readers ignore it; raising lets the tests see a writer that makes one)."""
        if not self.has("_summary.txt"):
            return None
        data = self.read("_summary.txt", MAX_SUMMARY)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SpecError("_summary.txt", "not UTF-8", offset=e.start) from e
        lines = text.split("\n")
        head = lines[0].split(" ")
        if len(head) != 4 or head[0] != "modelzip-summary" or head[1] not in ("1", "2"):
            return None  # another version: ignored
        version = int(head[1])
        count, fp = self.fingerprint(version)
        if head[2] != str(count) or head[3] != fp:
            return None  # stale
        entry = "_summary.txt"
        if not text.endswith("\n"):
            raise SpecError(entry, "does not end with LF")
        records = []
        for n, line in enumerate(lines[1:-1], start=2):
            f = line.split(" ")
            want = 7 if version == 1 else 8
            if len(f) != want:
                raise SpecError(entry, f"record of {len(f)} fields, expected {want}", line=n)
            sharded = "-" if version == 1 else f.pop()
            if sharded != "-" and not DECIMAL_U64.fullmatch(sharded):
                raise SpecError(entry, f"sharded {sharded!r} is not a decimal", line=n)
            tag, params, updater, shared, graph, dtypes, created = f
            for v in (params, updater, shared):
                if not DECIMAL_U64.fullmatch(v):
                    raise SpecError(entry, f"{v!r} is not a decimal", line=n)
            if graph not in ("flatbuffers", "programdesc", "-"):
                raise SpecError(entry, f"graph {graph!r}", line=n)
            dtype_list = [] if dtypes == "-" else dtypes.split(",")
            known = {v[0] for v in DTYPES.values()}
            if any(d not in known for d in dtype_list) or len(set(dtype_list)) != len(dtype_list):
                raise SpecError(entry, f"dtypes {dtypes!r}", line=n)
            records.append(
                {
                    "tag": tag,
                    "params": int(params),
                    "updater": int(updater),
                    "shared": int(shared),
                    "graph": None if graph == "-" else graph,
                    "dtypes": dtype_list,
                    "created": None if created == "-" else decode_name(created, entry, n),
                    # Version 1 has no field: metadata.json says it.
                    "sharded": (
                        self.tag(tag).sharded()
                        if version == 1
                        else None if sharded == "-" else int(sharded)
                    ),
                }
            )
        if [r["tag"] for r in records] != self.tags:
            raise SpecError(entry, "records do not name the tags of tags.txt in order")
        return Summary(count, fp, records)

    def describe(self, tag: str) -> dict:
        """What a _summary.txt record of `tag` should say, from the tables."""
        t = self.tag(tag)
        foreign: set[str] = set()
        dtypes: set[int] = set()
        for name in t.param_names():
            ref = t.param_ref(name)
            if ref.tag != t.name:
                foreign.add(ref.entry)
            dtypes.add(t.param(name).dtype)
        updater = 0
        for name in t.updater_names():
            for ref, tensor in zip(t.updater_refs(name), t.updater(name)):
                updater += 1
                if ref.tag != t.name:
                    foreign.add(ref.entry)
                dtypes.add(tensor.dtype)
        for file, owner in t.shared().items():
            foreign.add(f"{owner}/{file}")
        graph = t.graph()
        meta = t.metadata()
        created = meta.get("created")
        return {
            "tag": t.name,
            "params": len(t.param_names()),
            "updater": updater,
            "shared": sum(self.entries[e].compress_size for e in foreign),
            "graph": graph[0] if graph else None,
            "dtypes": [DTYPES[d][0] for d in sorted(dtypes)],  # VarType number order
            "created": created if isinstance(created, str) else None,
            "sharded": t.sharded(),
        }


class SpecTag:
    def __init__(self, archive: SpecArchive, name: str):
        self.ar = archive
        self.name = name
        self._params = self._read_table("params.txt", "params", updater=False)
        self._updater = self._read_table("updater.txt", "updater", updater=True)
        self._shared = self._read_shared()

    def _entry(self, file: str) -> str:
        return f"{self.name}/{file}"

    def _parse_ref(self, text: str, kind: str, entry: str, line: int) -> Ref:
        tag_part, sep, num = text.partition("/")  # split at the first '/'
        if not sep:
            tag_part, num = "", text
        if sep and tag_name_problem(tag_part):
            raise SpecError(entry, f"ref {text!r}: {tag_part!r} is not a tag name", line=line)
        if not DECIMAL_U64.fullmatch(num) or int(num) >= 1 << 64:
            raise SpecError(
                entry,
                f"ref {text!r}: N is not a decimal u64 without sign or leading zeros",
                line=line,
            )
        owner = self.name
        if sep:
            owner = self.ar.resolve_tag(tag_part)
            if owner is None:
                raise SpecError(
                    entry, f"ref {text!r}: tag {tag_part!r} is not in tags.txt", line=line
                )
        target = f"{owner}/{kind}/{int(num)}.lodtensor"
        if not self.ar.has(target):
            raise SpecError(entry, f"ref {text!r}: entry {target} does not exist", line=line)
        return Ref(owner, int(num), target, bool(sep))

    def _read_table(self, file: str, kind: str, updater: bool) -> dict[str, list[Ref]]:
        entry = self._entry(file)
        table: dict[str, list[Ref]] = {}
        if not self.ar.has(entry):
            return table
        for n, line in text_lines(self.ar.read(entry), entry):
            fields = line.split(" ")
            if updater:
                if len(fields) < 2:
                    raise SpecError(entry, "a line is a name and at least one ref", line=n)
                if len(fields) - 1 > MAX_UPDATER_REFS:
                    raise SpecError(
                        entry, f"{len(fields) - 1} refs, more than {MAX_UPDATER_REFS}", line=n
                    )
            elif len(fields) != 2:
                raise SpecError(entry, f"{len(fields)} fields, expected 'name ref'", line=n)
            name = decode_name(fields[0], entry, n)
            if name in table:
                raise SpecError(entry, f"name {name!r} twice", line=n)
            table[name] = [self._parse_ref(r, kind, entry, n) for r in fields[1:]]
        return table

    def _read_shared(self) -> dict[str, str]:
        entry = self._entry("shared.txt")
        out: dict[str, str] = {}
        if not self.ar.has(entry):
            return out
        for n, line in text_lines(self.ar.read(entry, MAX_SHARED_TXT), entry):
            fields = line.split(" ")
            if len(fields) != 2 or fields[0] not in SHARED_FILES:
                raise SpecError(entry, f"line {line!r} is not 'file tag'", line=n)
            file, tag = fields
            owner = self.ar.resolve_tag(tag)
            if owner is None:
                raise SpecError(entry, f"tag {tag!r} is not in tags.txt", line=n)
            if owner == self.name:
                raise SpecError(entry, "a tag does not reference itself", line=n)
            if not self.ar.has(f"{owner}/{file}"):
                raise SpecError(entry, f"{owner}/{file} does not exist", line=n)
            if file in out:
                raise SpecError(entry, f"{file} listed twice", line=n)
            if self.ar.has(self._entry(file)):
                raise SpecError(entry, f"{file} is both held and listed", line=n)
            out[file] = owner
        graphs = [g for g in GRAPH_FILES if g in out or self.ar.has(self._entry(g))]
        if len(graphs) > 1:
            raise SpecError(entry, "two graphs (own or referenced)")
        return out

    # ---- parameters and updater state

    def param_names(self) -> list[str]:
        return list(self._params)

    def param_ref(self, name: str) -> Ref:
        return self._params[name][0]

    def param(self, name: str) -> Tensor:
        ref = self._params[name][0]
        return decode_lodtensor(self.ar.read(ref.entry), ref.entry)

    def updater_names(self) -> list[str]:
        return list(self._updater)

    def updater_refs(self, name: str) -> list[Ref]:
        return self._updater[name]

    def updater(self, name: str) -> list[Tensor]:
        return [decode_lodtensor(self.ar.read(r.entry), r.entry) for r in self._updater[name]]

    # ---- graph, training config, metadata

    def shared(self) -> dict[str, str]:
        """shared.txt: file -> owner tag."""
        return dict(self._shared)

    def _file(self, file: str) -> tuple[str, bytes] | None:
        own = self._entry(file)
        if self.ar.has(own):
            return own, self.ar.read(own)
        if file in self._shared:
            entry = f"{self._shared[file]}/{file}"
            return entry, self.ar.read(entry)
        return None

    def graph(self) -> tuple[str, bytes] | None:
        """("flatbuffers" | "programdesc", bytes), own or shared; None when the tag has none."""
        if found := self._file("graph.fb"):
            entry, data = found
            if data[4:8] != b"MZGF":
                raise SpecError(entry, "no MZGF file identifier")
            return "flatbuffers", data
        if found := self._file("graph.pdmodel"):
            return "programdesc", found[1]
        return None

    def training_config(self) -> bytes | None:
        if found := self._file("trainingConfig.fb"):
            entry, data = found
            if data[4:8] != b"MZTC":
                raise SpecError(entry, "no MZTC file identifier")
            return data
        return None

    def metadata(self) -> dict:
        entry = self._entry("metadata.json")
        if not self.ar.has(entry):
            return {}
        value = json.loads(self.ar.read(entry, MAX_METADATA))
        if not isinstance(value, dict):
            raise SpecError(entry, "not a JSON object")
        return value

    def sharded(self) -> int | None:
        """metadata.json's "sharded" "world_size" (a sharded save wrote the tag), when it
        is a whole number; else None."""
        s = self.metadata().get("sharded")
        w = s.get("world_size") if isinstance(s, dict) else None
        return w if isinstance(w, int) and not isinstance(w, bool) and 0 <= w < 1 << 64 else None

    def check_sha256sums(self) -> list[str]:
        """Checks sha256sums.txt like `sha256sum -c`, and that it covers every file the tag
        owns (FORMAT.md: not the referenced files). Returns the paths it checked; [] when
        the tag has no sha256sums.txt (readers do not require one)."""
        entry = self._entry("sha256sums.txt")
        if not self.ar.has(entry):
            return []
        listed: list[str] = []
        for n, line in text_lines(self.ar.read(entry), entry):
            m = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](.+)", line)
            if not m:
                raise SpecError(entry, f"line {line!r} is not '<sha256>  <path>'", line=n)
            digest, path = m.groups()
            target = self._entry(path)
            if not self.ar.has(target):
                raise SpecError(entry, f"{path}: no entry {target}", line=n)
            if hashlib.sha256(self.ar.read(target)).hexdigest() != digest.lower():
                raise SpecError(target, f"SHA-256 differs from {entry} line {n}")
            listed.append(path)
        own = {n[len(self.name) + 1 :] for n in self.ar.tag_files(self.name)} - {"sha256sums.txt"}
        if missing := own - set(listed):
            raise SpecError(entry, f"own files not listed: {sorted(missing)}")
        return listed
