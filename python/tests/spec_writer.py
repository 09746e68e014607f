"""A writer of modelzip archives written from docs/FORMAT.md alone (zipfile, struct, numpy).

It writes what FORMAT.md says a writer writes: stored tensor entries whose raw data starts
at a file offset that is a multiple of 64 (the padding in a local-header extra field with
id 0xd935: u16 alignment, then zero bytes), deflated text entries, params.txt / updater.txt
with `N` and `TAG/N` refs and %XX-escaped names, shared.txt, metadata.json, one
sha256sums.txt per tag over the tag's own files, and tags.txt.

    w = SpecWriter(path)
    w.tensor("a", "params", 0, np.arange(6, dtype=np.float32).reshape(2, 3))
    w.table("a", "params.txt", [("w", ["0"])])
    w.file("a", "metadata.json", json.dumps({...}).encode())
    w.close(["a"])            # sha256sums.txt of every tag, then tags.txt
"""

from __future__ import annotations

import hashlib
import struct
import zipfile
from pathlib import Path

import numpy as np

from spec_reader import DTYPES, encode_name

NUMPY_TO_CODE = {np_name: code for code, (_, _, np_name) in DTYPES.items() if code != 19}
ALIGNMENT = 64


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def lodtensor(
    array: np.ndarray, lod: list[list[int]] = (), dtype: int | None = None
) -> tuple[bytes, int]:
    """One LoDTensor record of `array` and the length of its header (where the data starts)."""
    array = np.asarray(array)
    if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-D array 1-D)
        array = array.copy(order="C")
    code = NUMPY_TO_CODE[array.dtype.name] if dtype is None else dtype
    head = struct.pack("<IQ", 0, len(lod))
    for level in lod:
        head += struct.pack(f"<Q{len(level)}Q", 8 * len(level), *level)
    desc = b"\x08" + _varint(code) + b"".join(b"\x10" + _varint(d) for d in array.shape)
    head += struct.pack("<Ii", 0, len(desc)) + desc
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return head + data, len(head)


def _align_extra(data_start_without_extra: int) -> bytes:
    """The 0xd935 extra field that puts the data start on a multiple of ALIGNMENT."""
    pad = (-(data_start_without_extra + 6)) % ALIGNMENT
    return struct.pack("<HHH", 0xD935, 2 + pad, ALIGNMENT) + b"\0" * pad


class SpecWriter:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.zip = zipfile.ZipFile(self.path, "w")
        self.own: dict[str, dict[str, bytes]] = {}

    def _info(self, name: str, method: int) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, date_time=(2026, 11, 26, 0, 0, 0))
        info.compress_type = method
        info.flag_bits |= 0x800  # names are UTF-8
        info.external_attr = 0o100644 << 16
        return info

    def entry(self, name: str, data: bytes, *, deflate: bool = True) -> None:
        """Any entry, deflated or stored."""
        self.zip.writestr(
            self._info(name, zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED), data
        )

    def file(self, tag: str, rel: str, data: bytes, *, deflate: bool = True) -> None:
        """One of the tag's own files (listed in its sha256sums.txt)."""
        self.entry(f"{tag}/{rel}", data, deflate=deflate)
        self.own.setdefault(tag, {})[rel] = data

    def record(
        self, tag: str, kind: str, n: int, record: bytes, header_len: int, *, align: bool = True
    ) -> None:
        """`<tag>/<kind>/<n>.lodtensor`, stored, its raw data aligned (unless align=False)."""
        rel = f"{kind}/{n}.lodtensor"
        name = f"{tag}/{rel}"
        info = self._info(name, zipfile.ZIP_STORED)
        offset = self.zip.fp.tell()
        if align:
            info.extra = _align_extra(offset + 30 + len(name.encode()) + header_len)
        self.zip.writestr(info, record)
        assert info.header_offset == offset
        if align:
            assert (
                offset + 30 + len(name.encode()) + len(info.extra) + header_len
            ) % ALIGNMENT == 0
        self.own.setdefault(tag, {})[rel] = record

    def tensor(
        self, tag: str, kind: str, n: int, array: np.ndarray, lod: list[list[int]] = ()
    ) -> None:
        record, header_len = lodtensor(array, lod)
        self.record(tag, kind, n, record, header_len)

    def table(self, tag: str, file: str, rows: list[tuple[str, list[str]]]) -> None:
        """params.txt or updater.txt: `name ref ...` lines, names escaped."""
        text = "".join(f"{encode_name(name)} {' '.join(refs)}\n" for name, refs in rows)
        self.file(tag, file, text.encode())

    def close(
        self, tags: list[str], *, sums: bool = True, replace: dict[str, bytes] | None = None
    ) -> None:
        """Each tag's sha256sums.txt (its own files; `replace` gives a tag's bytes instead),
        then tags.txt, then the directory."""
        replace = replace or {}
        if sums:
            for tag in tags:
                lines = "".join(
                    f"{hashlib.sha256(data).hexdigest()}  {rel}\n"
                    for rel, data in self.own.get(tag, {}).items()
                )
                self.entry(f"{tag}/sha256sums.txt", replace.get(tag, lines.encode()))
        self.entry("tags.txt", "".join(t + "\n" for t in tags).encode())
        self.zip.close()


def training_config(updater: str, state: list[str]) -> bytes:
    """A minimal trainingConfig.fb (schemas/training_config.fbs, identifier MZTC) built by
    hand: the table's `updater` (field 1) and `updater_state` (field 9), nothing else."""

    def string(s: str) -> bytes:
        b = s.encode() + b"\0"
        return struct.pack("<I", len(b) - 1) + b + b"\0" * (-len(b) % 4)

    vtable_at, table_at = 8, 32
    vtable = struct.pack("<HH", 24, 12) + struct.pack("<10H", 0, 4, 0, 0, 0, 0, 0, 0, 0, 8)
    updater_at = table_at + 12
    upd = string(updater)
    vector_at = updater_at + len(upd)
    strings_at = vector_at + 4 + 4 * len(state)
    blobs, offsets, pos = b"", [], strings_at
    for s in state:
        offsets.append(pos)
        blob = string(s)
        blobs += blob
        pos += len(blob)
    vector = struct.pack("<I", len(state)) + b"".join(
        struct.pack("<I", off - (vector_at + 4 + 4 * i)) for i, off in enumerate(offsets)
    )
    table = struct.pack(
        "<iII", table_at - vtable_at, updater_at - (table_at + 4), vector_at - (table_at + 8)
    )
    out = struct.pack("<I", table_at) + b"MZTC" + vtable + table + upd + vector + blobs
    assert len(struct.pack("<I", 0) + b"MZTC" + vtable) == table_at
    return out
