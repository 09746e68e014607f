#!/usr/bin/env python3
"""Writes the hostile input files of tests/hostile/ and their manifest, expected.json.

Every file is named after the attack it carries. The zip bytes are assembled by hand
(struct), not with zipfile, so that headers can lie. Run from anywhere:

    python3 tests/hostile/make_hostile.py

The output is deterministic (fixed DOS times, fixed data), so re-running it after a change
shows the change in `git diff --stat`. tests/it/hostile.rs runs every file through the library
and through the `modelzip` CLI and checks the error in expected.json.
"""

import hashlib
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = {}

SIG_LOCAL, SIG_CENTRAL, SIG_EOCD = 0x04034B50, 0x02014B50, 0x06054B50
SIG_EOCD64, SIG_LOC64 = 0x06064B50, 0x07064B50
U32 = 0xFFFFFFFF


# ---- LoDTensor records -----------------------------------------------------------------

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def desc(dtype=5, dims=(4,)):
    d = b"\x08" + varint(dtype)
    for x in dims:
        d += b"\x10" + varint(x)
    return d


def tensor(dtype=5, dims=(4,), data=None, lod=(), version=0, tversion=0,
           desc_bytes=None, desc_size=None, lod_level=None, trailing=b""):
    if data is None:
        data = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    d = desc(dtype, dims) if desc_bytes is None else desc_bytes
    out = struct.pack("<I", version)
    out += struct.pack("<Q", len(lod) if lod_level is None else lod_level)
    for level in lod:
        out += struct.pack("<Q", 8 * len(level)) + b"".join(struct.pack("<Q", x) for x in level)
    out += struct.pack("<I", tversion)
    out += struct.pack("<i", len(d) if desc_size is None else desc_size)
    return out + d + data + trailing


GOOD_TENSOR = tensor()


# ---- zip assembly ----------------------------------------------------------------------

class E:
    """One entry; every header field can be overridden to lie."""

    def __init__(self, name, data=b"", deflate=False, **kw):
        self.name = name.encode() if isinstance(name, str) else name
        self.data = data
        self.stored = zlib.compress(data, 9)[2:-4] if deflate else data
        self.method = 8 if deflate else 0
        self.crc = zlib.crc32(data)
        self.csize = len(self.stored)
        self.usize = len(data)
        self.flags = 0x0800
        self.made_by = 0x031E
        self.ext_attr = 0o100644 << 16
        self.cd_extra = b""
        self.local_extra = b""
        self.local = {}  # overrides of the local header: name, method, crc, csize, usize, flags, sig
        self.header_offset = None  # override of the central record's offset
        for k, v in kw.items():
            setattr(self, k, v)


def build(entries, count=None, cd_offset=None, cd_size=None, disk=0, comment=b"",
          zip64=None, cd_mutate=None):
    out = bytearray()
    offsets = []
    for e in entries:
        offsets.append(len(out))
        L = e.local
        name = L.get("name", e.name)
        extra = L.get("extra", e.local_extra)
        out += struct.pack("<IHHHHHIIIHH", L.get("sig", SIG_LOCAL), 20, L.get("flags", e.flags),
                           L.get("method", e.method), 0, 0x5821, L.get("crc", e.crc),
                           L.get("csize", min(e.csize, U32)), L.get("usize", min(e.usize, U32)),
                           len(name), len(extra))
        out += name + extra + e.stored
    cd_start = len(out)
    cd = bytearray()
    for e, off in zip(entries, offsets):
        off = e.header_offset if e.header_offset is not None else off
        cd += struct.pack("<IHHHHHHIIIHHHHHII", SIG_CENTRAL, e.made_by, 20, e.flags, e.method,
                          0, 0x5821, e.crc, min(e.csize, U32), min(e.usize, U32), len(e.name),
                          len(e.cd_extra), 0, 0, 0, e.ext_attr, min(off, U32))
        cd += e.name + e.cd_extra
    if cd_mutate:
        cd = cd_mutate(cd)
    out += cd
    n = len(entries) if count is None else count
    if zip64 is not None:
        z64_at = len(out)
        out += struct.pack("<IQHHIIQQQQ", SIG_EOCD64, 44, 45, 45, 0, 0,
                           zip64.get("count", n), zip64.get("count", n),
                           zip64.get("cd_size", len(cd)), zip64.get("cd_offset", cd_start))
        out += struct.pack("<IIQI", SIG_LOC64, 0, zip64.get("locator", z64_at), 1)
        out += struct.pack("<IHHHHIIH", SIG_EOCD, 0, 0, 0xFFFF, 0xFFFF, U32, U32, len(comment))
    else:
        out += struct.pack("<IHHHHIIH", SIG_EOCD, disk, disk, min(n, 0xFFFF), min(n, 0xFFFF),
                           len(cd) if cd_size is None else cd_size,
                           cd_start if cd_offset is None else cd_offset, len(comment))
    return bytes(out + comment)


def base_entries(tags=b"t\n", params=b"w 0\n", t=GOOD_TENSOR, extra=()):
    return [E("tags.txt", tags), E("t/params.txt", params), E("t/params/0.lodtensor", t)] + list(extra)


def emit(name, data, command, error, exit_code=2, kind=None, stdout=None, extra_files=None):
    """Writes one hostile file and its manifest row. `kind` is the library ErrorKind
    variant (None: the library accepts the file; the CLI command is what refuses)."""
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    for suffix, blob in (extra_files or {}).items():
        with open(os.path.join(HERE, name + suffix), "wb") as f:
            f.write(blob)
    row = {"command": command, "exit": exit_code}
    if error is not None:
        row["error_contains"] = error
    if kind is not None:
        row["kind"] = kind
    if stdout is not None:
        row["stdout_contains"] = stdout
    if extra_files:
        row["extra_files"] = sorted(extra_files)
    MANIFEST[name] = row


def entry_name_attacks():
    cases = [
        ("entry-name-dotdot.zip", "t/../../evil.txt", "'..' path component"),
        ("entry-name-dotdot-leading.zip", "../evil.txt", "'..' path component"),
        ("entry-name-absolute.zip", "/etc/passwd", "absolute path"),
        ("entry-name-backslash.zip", "t\\..\\..\\evil.txt", "contains a backslash"),
        ("entry-name-nul.zip", "t/params.txt\0.png", "contains NUL"),
        ("entry-name-drive-letter.zip", "C:/Windows/evil.dll", "starts with a drive letter"),
        ("entry-name-dot-component.zip", "t/./params.txt", "'.' path component"),
        ("entry-name-empty-component.zip", "t//evil.txt", "empty path component"),
        ("entry-name-empty.zip", "", "empty name"),
    ]
    for file, name, why in cases:
        emit(file, build(base_entries(extra=[E(name, b"evil")])), "tags",
             "unsafe entry name", kind="UnsafeName")
        MANIFEST[file]["error_contains"] = why
    emit("entry-name-not-utf8.zip", build(base_entries(extra=[E(b"t/\xff\xfe.txt", b"x")])),
         "tags", "is not UTF-8", kind="Zip")
    link = E("t/evil-link", b"/etc/passwd", ext_attr=0o120777 << 16)
    emit("symlink-entry.zip", build(base_entries(extra=[link])), "tags",
         "symbolic link entry", kind="UnsafeName")
    link_tags = E("tags.txt", b"/etc/passwd", ext_attr=0o120777 << 16)
    emit("symlink-entry-tags-txt.zip", build([link_tags] + base_entries()[1:]), "tags",
         "symbolic link entry", kind="UnsafeName")


def container_attacks():
    good = build(base_entries())
    emit("empty-file.zip", b"", "tags", "too short to be a zip archive", kind="Zip")
    emit("not-a-zip.zip", b"modelzip? no, just text\n" * 8, "tags",
         "no end-of-central-directory record", kind="Zip")
    emit("truncated-archive.zip", good[: len(good) // 2], "tags",
         "no end-of-central-directory record", kind="Zip")
    emit("truncated-inside-end-record.zip", good[:-7], "tags",
         "no end-of-central-directory record", kind="Zip")
    emit("eocd-cd-offset-outside-file.zip", build(base_entries(), cd_offset=0x7FFF0000), "tags",
         "does not end where the end record starts", kind="Zip")
    emit("eocd-cd-size-outside-file.zip", build(base_entries(), cd_size=0x7FFF0000), "tags",
         "does not end where the end record starts", kind="Zip")
    emit("eocd-cd-offset-ffffffff.zip", build(base_entries(), cd_offset=U32, cd_size=U32), "tags",
         "does not end where the end record starts", kind="Zip")
    emit("cd-entry-count-lying-high.zip", build(base_entries(), count=0xFFFE), "tags",
         "entries cannot fit in a central directory", kind="Zip")
    emit("cd-entry-count-lying-low.zip", build(base_entries(), count=1), "tags",
         "unexpected bytes after the last central directory record", kind="Zip")
    emit("multi-disk.zip", build(base_entries(), disk=1), "tags",
         "multi-disk archives are not supported", kind="Zip")
    emit("zip64-locator-outside-file.zip", build(base_entries(), zip64={"locator": 1 << 62}),
         "tags", "zip64 end record at byte", kind="Zip")
    emit("zip64-eocd-count-lying.zip", build(base_entries(), zip64={"count": 1 << 60}), "tags",
         "entries cannot fit in a central directory", kind="Zip")
    emit("zip64-eocd-cd-offset-lying.zip", build(base_entries(), zip64={"cd_offset": 1 << 62}),
         "tags", "does not end where the end record starts", kind="Zip")
    # Zip64 extra fields that lie: sizes or the header offset far beyond the file.
    z64 = struct.pack("<HHQQ", 1, 16, 4, 1 << 40)
    lying = E("t/params/0.lodtensor", GOOD_TENSOR, csize=U32, usize=U32, cd_extra=z64)
    emit("zip64-extra-lying-size.zip", build(base_entries()[:2] + [lying]), "tags",
         "differs from the central directory", kind="Zip")
    z64 = struct.pack("<HHQ", 1, 8, 1 << 63)
    lying = E("t/params/0.lodtensor", GOOD_TENSOR, header_offset=U32, cd_extra=z64)
    emit("zip64-extra-lying-offset.zip", build(base_entries()[:2] + [lying]), "tags",
         "lies past the central directory", kind="Zip")
    short = E("t/params/0.lodtensor", GOOD_TENSOR, csize=U32, usize=U32,
              cd_extra=struct.pack("<HHI", 1, 4, 7))
    emit("zip64-extra-too-short.zip", build(base_entries()[:2] + [short]), "tags",
         "zip64 extra field is too short", kind="Zip")
    trunc = E("t/params/0.lodtensor", GOOD_TENSOR, cd_extra=b"\x01\x00\x10")
    emit("extra-field-truncated.zip", build(base_entries()[:2] + [trunc]), "tags",
         "truncated extra field", kind="Zip")
    enc = E("t/params/0.lodtensor", GOOD_TENSOR, flags=0x0801)
    emit("encrypted-flag.zip", build(base_entries()[:2] + [enc]), "tags",
         "encrypted entries are not supported", kind="Zip")
    emit("unknown-compression-method-tags-txt.zip",
         build([E("tags.txt", b"t\n", method=12)] + base_entries()[1:]), "tags",
         "unsupported compression method 12", kind="Zip")
    emit("unknown-compression-method-tensor.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR, method=14)]), "tags",
         "unsupported compression method 14", kind="Zip")
    emit("duplicate-entry-names.zip",
         build(base_entries(extra=[E("t/params.txt", b"w 0\n")])), "tags",
         "appears twice", kind="Zip")
    # Entry b's local header and data sit inside entry a's data.
    inner_name = b"t/params/0.lodtensor"
    inner = struct.pack("<IHHHHHIIIHH", SIG_LOCAL, 20, 0x800, 0, 0, 0x5821,
                        zlib.crc32(GOOD_TENSOR), len(GOOD_TENSOR), len(GOOD_TENSOR),
                        len(inner_name), 0) + inner_name + GOOD_TENSOR
    outer = E("t/notes.bin", inner)
    # The phantom's CD record points at the copy inside a's data (a is the first entry, its
    # data starts after the 30-byte header and the name); build() also writes a dead copy.
    inner_at = 30 + len(b"t/notes.bin")
    phantom = E("t/params/0.lodtensor", GOOD_TENSOR, header_offset=inner_at)
    data = build([outer, E("tags.txt", b"t\n"), E("t/params.txt", b"w 0\n"), phantom])
    emit("overlapping-entries.zip", data, "tags", "overlap", kind="Zip")
    into_cd = E("t/params/0.lodtensor", GOOD_TENSOR, csize=len(GOOD_TENSOR) + 40,
                usize=len(GOOD_TENSOR) + 40,
                local={"csize": len(GOOD_TENSOR) + 40, "usize": len(GOOD_TENSOR) + 40})
    emit("entry-data-overlaps-central-directory.zip", build(base_entries()[:2] + [into_cd]),
         "tags", "runs into the central directory", kind="Zip")
    emit("local-header-name-differs.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR,
                                       local={"name": b"t/params/9.lodtensor"})]),
         "tags", "local header name", kind="Zip")
    emit("local-header-method-differs.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR, local={"method": 8})]),
         "tags", "local header method 8 differs", kind="Zip")
    emit("local-header-crc-differs.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR, local={"crc": 1})]),
         "tags", "differs from the central directory", kind="Zip")
    emit("local-header-size-lies.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR,
                                       local={"csize": 2, "usize": 2})]),
         "tags", "differs from the central directory", kind="Zip")
    n = len(GOOD_TENSOR)
    emit("stored-sizes-disagree.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR, usize=n + 1,
                                       local={"usize": n + 1})]),
         "tags", "stored entry has compressed size", kind="Zip")
    emit("lying-size-past-end-of-file.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR, csize=0x7FFF0000,
                                       usize=0x7FFF0000,
                                       local={"csize": 0x7FFF0000, "usize": 0x7FFF0000})]),
         "tags", "runs into the central directory", kind="Zip")
    emit("local-header-bad-signature.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR,
                                       local={"sig": 0x08074B50})]),
         "tags", "no local header signature", kind="Zip")
    emit("central-record-bad-signature.zip",
         build(base_entries(), cd_mutate=lambda cd: b"PK\x01\x03" + cd[4:]), "tags",
         "bad central directory record signature", kind="Zip")
    emit("crc-mismatch-stored-tensor.zip",
         build(base_entries()[:2] + [E("t/params/0.lodtensor", GOOD_TENSOR, crc=0x12345678,
                                       local={"crc": 0x12345678})]),
         "verify", "CRC-32 is", exit_code=1)
    emit("crc-mismatch-deflated-tags-txt.zip",
         build([E("tags.txt", b"t\n", deflate=True, crc=7, local={"crc": 7})] +
               base_entries()[1:]), "tags", "checksum mismatch", kind="Checksum")
    bad = E("tags.txt", b"t\n", deflate=True)
    bad.stored = b"\xff\xff\xff\xff\xff"
    bad.csize = 5
    emit("deflate-stream-corrupt.zip", build([bad] + base_entries()[1:]), "tags",
         "deflate stream is corrupt", kind="Zip")


def zeros_deflated(n):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    out = bytearray()
    for _ in range(n >> 20):
        out += c.compress(chunk)
    return bytes(out + c.flush())


def bomb_attacks():
    size = 128 << 20
    z = zeros_deflated(size)
    crc = 0
    chunk = bytes(1 << 20)
    for _ in range(size >> 20):
        crc = zlib.crc32(chunk, crc)
    # A tensor entry whose (honest) declared size is 128 MiB: refused by the ratio limit
    # before anything is inflated.
    t = E("t/params/0.lodtensor", b"", method=8)
    t.stored, t.crc, t.csize, t.usize = z, crc, len(z), size
    emit("deflate-bomb-tensor-128mib.zip", build(base_entries()[:2] + [t]), "tags",
         "compression ratio", kind="LimitExceeded")
    # The same stream declared as 1000 bytes: inflation stops at 1001 bytes.
    t = E("t/params/0.lodtensor", b"", method=8)
    t.stored, t.crc, t.csize, t.usize = z, crc, len(z), 1000
    emit("deflate-bomb-lying-size.zip", build(base_entries()[:2] + [t]), "tags",
         "inflates to 1001+ bytes", kind="Zip")
    # Declared 4 GiB + 1 through Zip64: over the 4 GiB inflate limit.
    big = (4 << 30) + 1
    t = E("t/params/0.lodtensor", b"", method=8)
    t.stored, t.crc, t.csize, t.usize = z, crc, len(z), big
    t.cd_extra = struct.pack("<HHQ", 1, 8, big)
    t.local = {"usize": U32, "csize": U32, "extra": struct.pack("<HHQQ", 1, 16, big, len(z))}
    emit("deflate-bomb-4gib.zip", build(base_entries()[:2] + [t]), "tags",
         "exceeds the limit of 4294967296", kind="LimitExceeded")
    # tags.txt declared 64 MiB: over the tags.txt limit, refused before inflating.
    tz = zeros_deflated(64 << 20)
    tt = E("tags.txt", b"", method=8)
    tt.stored, tt.csize, tt.usize = tz, len(tz), 64 << 20
    emit("deflate-bomb-tags-txt.zip", build([tt] + base_entries()[1:]), "tags",
         "tags.txt size of 67108864 exceeds the limit", kind="LimitExceeded")
    # params.txt: 128 MiB of newlines (blank lines are legal), deflated to ~130 KB.
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    nl = b"\n" * (1 << 20)
    pz = bytearray()
    pcrc = 0
    for _ in range(128):
        pz += c.compress(nl)
        pcrc = zlib.crc32(nl, pcrc)
    pz += c.flush()
    pt = E("t/params.txt", b"", method=8)
    pt.stored, pt.crc, pt.csize, pt.usize = bytes(pz), pcrc, len(pz), 128 << 20
    emit("deflate-bomb-params-txt.zip",
         build([E("tags.txt", b"t\n"), pt, E("t/params/0.lodtensor", GOOD_TENSOR)]), "tags",
         "compression ratio", kind="LimitExceeded")

    # metadata.json: 16 MiB of `[0,0,...` (the most that inflates without the ratio
    # check) from ~16 KB: over the metadata.json limit, refused before inflating.
    n = 16 << 20
    body = b"[" + b"0," * ((n - 2) // 2) + b"0]"
    body = body[: n - 1] + b"]"
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    mz = c.compress(body) + c.flush()
    mt = E("t/metadata.json", b"", method=8)
    mt.stored, mt.crc, mt.csize, mt.usize = mz, zlib.crc32(body), len(mz), len(body)
    emit("deflate-bomb-metadata-json.zip", build(base_entries() + [mt]), "tags",
         "metadata.json size of 16777216 exceeds the limit of 4194304", kind="LimitExceeded")


def tensor_attacks():
    def arch(t):
        return build(base_entries(t=t))

    cases = [
        ("tensor-dims-2pow63.zip", tensor(dims=(1 << 63,), data=b""), "negative dimension", "NegativeDim"),
        ("tensor-dims-2pow62-squared.zip", tensor(dims=(1 << 62, 1 << 62), data=b""), "size overflow", "SizeOverflow"),
        ("tensor-element-count-overflow.zip", tensor(dims=(1 << 32, 1 << 32, 2), data=b""), "size overflow", "SizeOverflow"),
        ("tensor-byte-count-overflow.zip", tensor(dtype=6, dims=(1 << 61,), data=b""), "size overflow", "SizeOverflow"),
        ("tensor-dims-huge-no-data.zip", tensor(dims=(1 << 40,), data=b""), "truncated tensor data", "Truncated"),
        ("tensor-lod-level-2pow60.zip", tensor(lod_level=1 << 60), "over the limit of 1024 levels", "BadLod"),
        ("tensor-lod-level-1000-in-a-small-entry.zip", tensor(lod_level=1000), "truncated LoD levels", "Truncated"),
        ("tensor-lod-level-with-one-offset.zip", tensor(lod=((0,),)), "a level needs at least 2", "BadLod"),
        ("tensor-lod-non-monotonic.zip", tensor(lod=((0, 3, 1, 4),)), "invalid LoD", "BadLod"),
        ("tensor-lod-not-starting-at-zero.zip", tensor(lod=((1, 4),)), "invalid LoD", "BadLod"),
        ("tensor-lod-end-differs-from-dims.zip", tensor(lod=((0, 2, 9),)), "invalid LoD", "BadLod"),
        ("tensor-desc-size-negative.zip", tensor(desc_size=-1), "invalid TensorDesc size -1", "BadDescSize"),
        ("tensor-desc-size-huge.zip", tensor(desc_size=0x7FFFFFFF), "invalid TensorDesc size 2147483647", "BadDescSize"),
        ("tensor-desc-garbage.zip", tensor(desc_bytes=b"\xff\xff\xff\xff\xff\xff", data=b""), "invalid TensorDesc", "BadTensorDesc"),
        ("tensor-dtype-unknown.zip", tensor(dtype=17), "unknown dtype number 17", "UnknownDType"),
        ("tensor-version-nonzero.zip", tensor(version=7), "unsupported LoDTensor version 7", "BadVersion"),
        ("tensor-trailing-bytes.zip", tensor(trailing=b"\0" * 9), "9 unexpected bytes after the record", "TrailingBytes"),
        ("tensor-data-truncated.zip", tensor(data=b"\0" * 15), "truncated tensor data", "Truncated"),
        ("tensor-empty-entry.zip", b"", "truncated version", "Truncated"),
    ]
    for file, t, err, kind in cases:
        emit(file, arch(t), "tags", err, kind=kind)
    # A params ref to an entry that is not a tensor record (a text file in its place).
    emit("params-ref-to-non-tensor-entry.zip", arch(b"w 0\nthis is params.txt, not a tensor\n"),
         "tags", "unsupported LoDTensor version", kind="BadVersion")


def text_attacks():
    def arch(tags=b"t\n", params=b"w 0\n", extra=()):
        return build(base_entries(tags=tags, params=params, extra=extra))

    emit("tags-txt-missing.zip", build(base_entries()[1:]), "tags",
         'missing entry "tags.txt"', kind="MissingEntry")
    emit("tags-txt-duplicate-differing-in-case.zip", arch(tags=b"t\nT\n"), "tags",
         "is listed twice", kind="Syntax")
    emit("tags-txt-reserved-con.zip", arch(tags=b"t\nCON\n"), "tags",
         "Windows device name", kind="InvalidTagName")
    emit("tags-txt-reserved-lpt1-ext.zip", arch(tags=b"t\nlpt1.txt\n"), "tags",
         "Windows device name", kind="InvalidTagName")
    emit("tags-txt-reserved-tags-txt.zip", arch(tags=b"t\nTAGS.TXT\n"), "tags",
         "invalid tag name", kind="InvalidTagName")
    emit("tags-txt-1mb-line.zip",
         build([E("tags.txt", b"t\n" + b"a" * (1 << 20) + b"\n", deflate=True)] + base_entries()[1:]),
         "tags", "line length of 1048576 exceeds the limit of 65536", kind="LimitExceeded")
    emit("tags-txt-invalid-utf8.zip", arch(tags=b"t\n\xc3\x28\n"), "tags",
         "not valid UTF-8", kind="Syntax")
    emit("tags-txt-dotdot.zip", arch(tags=b"t\n..\n"), "tags", "invalid tag name", kind="InvalidTagName")
    emit("tags-txt-slash.zip", arch(tags=b"t\nt/../x\n"), "tags", "invalid tag name", kind="InvalidTagName")
    emit("tags-txt-nul.zip", arch(tags=b"t\nx\0y\n"), "tags", "invalid tag name", kind="InvalidTagName")
    emit("tags-txt-too-long-name.zip", arch(tags=b"t\n" + b"a" * 129 + b"\n"), "tags",
         "at most 128 bytes", kind="InvalidTagName")
    emit("tags-txt-no-tags.zip", arch(tags=b"\n\n"), "show", "the archive has no tags",
         kind="InvalidInput")
    emit("params-ref-missing-tag.zip", arch(params=b"w other/0\n"), "tags",
         'names tag "other", which tags.txt does not list', kind="Syntax")
    emit("params-ref-missing-file.zip", arch(params=b"w 5\n"), "tags",
         'missing entry "t/params/5.lodtensor"', kind="MissingEntry")
    emit("params-ref-tag-tags-txt.zip", arch(params=b"w tags.txt/0\n"), "tags",
         "bad tag in reference", kind="Syntax")
    emit("params-ref-dotdot.zip", arch(params=b"w ../0\n"), "tags",
         "bad tag in reference", kind="Syntax")
    emit("params-ref-leading-zero.zip", arch(params=b"w 00\n"), "tags", "leading zero", kind="Syntax")
    emit("params-ref-overflow.zip", arch(params=b"w 18446744073709551616\n"), "tags",
         "does not fit in 64 bits", kind="Syntax")
    emit("params-ref-negative.zip", arch(params=b"w -1\n"), "tags", "decimal digits only", kind="Syntax")
    emit("params-bad-percent-escape.zip", arch(params=b"w%G1 0\n"), "tags",
         "is not followed by two hex digits", kind="Syntax")
    emit("params-percent-at-end.zip", arch(params=b"w% 0\n"), "tags",
         "is not followed by two hex digits", kind="Syntax")
    emit("params-percent-not-utf8.zip", arch(params=b"w%FF 0\n"), "tags",
         "decodes to bytes that are not UTF-8", kind="Syntax")
    emit("params-duplicate-names.zip", arch(params=b"w 0\nw 0\n"), "tags", "w", kind="Syntax")
    emit("params-invalid-utf8.zip", arch(params=b"w\xff 0\n"), "tags", "not valid UTF-8", kind="Syntax")
    emit("params-missing-ref.zip", arch(params=b"w\n"), "tags", "params.txt", kind="Syntax")
    emit("params-line-over-1mib.zip",
         build([E("tags.txt", b"t\n"), E("t/params.txt", b"w" * ((1 << 20) + 1) + b" 0\n", deflate=True),
                E("t/params/0.lodtensor", GOOD_TENSOR)]),
         "tags", "line length", kind="LimitExceeded")
    # A million names aliasing one tensor file: legal, and answered in bounded time.
    names = b"".join(b"%x 0\n" % i for i in range(1_000_000))
    emit("params-million-names-one-file.zip",
         build([E("tags.txt", b"t\n"), E("t/params.txt", names, deflate=True),
                E("t/params/0.lodtensor", GOOD_TENSOR)]),
         "tags --json", None, exit_code=0, stdout='"params": 1000000')
    # 100,000 tags (213 KB): every per-tag lookup must be constant time, or `tags` and
    # `verify` take minutes.
    many = b"".join(b"t%d\n" % i for i in range(100_000))
    emit("tags-txt-100k-tags.zip",
         build([E("tags.txt", many, deflate=True)] + base_entries()[1:]),
         "tags --json", None, exit_code=0, stdout='"name": "t99999"')
    emit("graph-both-encodings.zip",
         build(base_entries(extra=[E("t/graph.fb", b"x"), E("t/graph.pdmodel", b"")])), "tags",
         "at most one is allowed", kind="InvalidInput")


def extract_attacks():
    """Parameter names that would escape the extraction directory: the library hands the
    names out (they are data), `extract` refuses them and writes nothing."""
    cases = [
        ("extract-param-dotdot.zip", b"..%2F..%2Fevil 0\n"),
        ("extract-param-dotdot-plain.zip", b"../../evil 0\n"),
        ("extract-param-absolute.zip", b"/tmp/modelzip-evil 0\n"),
        ("extract-param-backslash.zip", b"..\\..\\evil 0\n"),
        ("extract-param-nul.zip", b"evil%00.txt 0\n"),
        ("extract-param-drive-letter.zip", b"C:evil 0\n"),
        ("extract-param-dot.zip", b"./evil 0\n"),
        ("extract-param-empty-component.zip", b"a//evil 0\n"),
    ]
    for file, params in cases:
        emit(file, build(base_entries(params=b"ok 0\n" + params)), "extract --out OUT",
             "refusing to extract parameter")
    emit("extract-param-collides-with-graph.zip",
         build(base_entries(params=b"__model__ 0\n", extra=[E("t/graph.pdmodel", b"")])),
         "extract --out OUT", "collides with another file")


def journal_cases():
    """A writer killed in the middle of an in-place append: the archive's end was
    overwritten and a journal lies beside it. Expected: rolled back, the old tags readable."""
    entries = [E("tags.txt", b"a\n"), E("a/params.txt", b"w 0\n"), E("a/params/0.lodtensor", GOOD_TENSOR)]
    old = build(entries)
    cd_offset = struct.unpack("<I", old[-6:-2])[0]
    saved = old[cd_offset:]
    head = b"MZJRNL01" + struct.pack("<QQQ", len(old), cd_offset, len(saved))
    journal = head + saved + hashlib.sha256(head + saved).digest()
    # The killed append wrote part of a new tag's entries over the old central directory.
    partial = build([E("b/params.txt", b"w a/0\n"), E("b/params/0.lodtensor", GOOD_TENSOR)])
    killed = old[:cd_offset] + partial[: len(partial) - 30]
    emit("journal-left-by-killed-writer.zip", killed, "tags --json", None, exit_code=0,
         stdout='"name": "a"', extra_files={".journal": journal})
    # The archive was replaced (say, restored from a backup) after the append was killed:
    # the journal must not be replayed onto it.
    other = build([E("tags.txt", b"x\n"), E("x/params.txt", b"v 0\n"),
                   E("x/params/0.lodtensor", tensor(dims=(8,), data=bytes(32))),
                   E("x/notes.txt", b"a longer file, so that the old offset lands inside it")])
    emit("journal-of-another-archive.zip", other, "tags", "does not belong to this archive",
         kind="ForeignJournal", extra_files={".journal": journal})
    # A journal cut short while being written (bad checksum): the archive was not touched.
    emit("journal-torn-archive-untouched.zip", old, "tags --json", None, exit_code=0,
         stdout='"name": "a"', extra_files={".journal": journal[:-40]})


def summary_fingerprint(entries):
    """(count, SHA-256 hex) of the central-directory records of `entries` other than
    _summary.txt, as docs/FORMAT.md (format 1.2) defines them."""
    h = hashlib.sha256()
    n = 0
    for e in entries:
        if e.name == b"_summary.txt":
            continue
        n += 1
        h.update(struct.pack("<Q", len(e.name)) + e.name)
        h.update(struct.pack("<HIQQ", e.method, e.crc, e.csize, e.usize))
    return n, h.hexdigest()


def summary_attacks():
    """Summaries (_summary.txt, FORMAT.md format 1.2) made current for their archive (the
    right fingerprint) that lie or break the grammar: ignored with a reason, the tags
    listed from the tables (`"params": 1`), and reported by verify. The true summary of
    these archives is `t 1 0 0 - FP32 -`."""
    def with_summary(body, deflate=False, fingerprint=None):
        entries = base_entries()
        n, fp = summary_fingerprint(entries)
        text = f"modelzip-summary 1 {n} {fingerprint or fp}\n".encode() + body
        return build(entries + [E("_summary.txt", text, deflate=deflate)])
    emit("summary-params-count-huge.zip", with_summary(b"t 18446744073709551615 0 0 - FP32 -\n"),
         "tags --json", None, exit_code=0, stdout='"params": 1')
    emit("summary-params-count-huge-verify.zip",
         with_summary(b"t 18446744073709551615 0 0 - FP32 -\n"), "verify",
         "more than t/params.txt", exit_code=1)
    emit("summary-not-utf8.zip", with_summary(b"t 1 0 0 - FP32 \xff\n"), "verify", "not UTF-8",
         exit_code=1)
    # Plausible but wrong: listed as the archive claims (a current summary is trusted for
    # a listing); verify compares it with the tables.
    emit("summary-lying-plausible.zip", with_summary(b"t 0 0 0 - FP32 -\n"), "verify",
         "its tables say", exit_code=1)
    # 20 MiB once inflated: over the 16 MiB limit, refused from the directory's sizes
    # before anything is inflated.
    emit("summary-deflate-bomb.zip", with_summary(b"t" * (20 << 20), deflate=True),
         "tags --json", None, exit_code=0, stdout='"params": 1')
    # Written for another directory: stale, ignored quietly (verify finds nothing).
    emit("summary-wrong-fingerprint.zip",
         with_summary(b"t 7 0 0 - FP32 -\n", fingerprint="0" * 64), "tags --json", None,
         exit_code=0, stdout='"params": 1')


# ---- cost follows files, not names (issue 30) -------------------------------------------
#
# Archives valid by docs/FORMAT.md in which many names, tags or lines point at few files:
# every command's work must follow the distinct files. The first is committed; the other
# two are too large to commit (15 MB, 2.5 MB) and are written at test time by this same
# code (`make_hostile.py --shape NAME OUT`, tests/it/reference_amplification.rs).

def deflated_zeros_tensor(size, fill=0):
    """A UINT8 LoDTensor record of exactly `size` bytes: zeros but for its first data byte
    (`fill`), so that records made with different fills differ."""
    head = len(tensor(dtype=20, dims=(size,), data=b""))
    n = size - head
    assert len(tensor(dtype=20, dims=(n,), data=b"")) == head
    return tensor(dtype=20, dims=(n,), data=bytes([fill]) + bytes(n - 1))


def manifest_lists_one_entry_30000_times():
    # 16 MiB (the most a deflated entry may inflate to at any ratio), 16 KB deflated; a
    # sha256sums.txt listing it 30,000 times deflates to a few KB.
    t = deflated_zeros_tensor(16 << 20)
    params = b"w 0\n"
    h = hashlib.sha256(t).hexdigest().encode()
    sums = b"%s  params.txt\n" % hashlib.sha256(params).hexdigest().encode()
    sums += b"%s  params/0.lodtensor\n" % h * 30_000
    return build([E("tags.txt", b"t\n"), E("t/params.txt", params),
                  E("t/params/0.lodtensor", t, deflate=True),
                  E("t/sha256sums.txt", sums, deflate=True)])


def shared_graph(tags=60_000):
    """`tags` tags whose shared.txt all name the first tag's graph (a Paddle 3.3.1
    ProgramDesc from tests/fixtures) and whose params.txt all name its one tensor."""
    with open(os.path.join(HERE, "../fixtures/paddle/3.3.1/conv.pdmodel"), "rb") as f:
        graph = f.read()
    names = [b"t%d" % i for i in range(tags)]
    entries = [E("tags.txt", b"".join(n + b"\n" for n in names), deflate=True),
               E("t0/graph.pdmodel", graph, deflate=True), E("t0/params.txt", b"w 0\n"),
               E("t0/params/0.lodtensor", GOOD_TENSOR)]
    for n in names[1:]:
        entries += [E(n + b"/params.txt", b"w t0/0\n"),
                    E(n + b"/shared.txt", b"graph.pdmodel t0\n")]
    return build(entries, zip64={})


def shared_deflated_tensors(tags=6_000, files=32, size=1 << 20):
    """`tags` tags whose params.txt all name the first tag's `files` deflated tensors of
    `size` bytes (written so by another tool: modelzip stores tensors)."""
    own = b"".join(b"p%d %d\n" % (i, i) for i in range(files))
    ref = b"".join(b"p%d t0/%d\n" % (i, i) for i in range(files))
    entries = [E("tags.txt", b"".join(b"t%d\n" % i for i in range(tags)), deflate=True),
               E("t0/params.txt", own)]
    entries += [E("t0/params/%d.lodtensor" % i, deflated_zeros_tensor(size, i), deflate=True)
                for i in range(files)]
    entries += [E("t%d/params.txt" % i, ref) for i in range(1, tags)]
    return build(entries, zip64={} if 1 + files + tags > 0xFFFF else None)


SHAPES = {
    "tags-60000-share-one-graph.zip": shared_graph,
    "tags-6000-share-32-deflated-tensors.zip": shared_deflated_tensors,
}


def reference_attacks():
    emit("sha256sums-lists-one-16mib-entry-30000-times.zip",
         manifest_lists_one_entry_30000_times(), "verify",
         'lists "params/0.lodtensor" 30000 times (line 2, again on line 3 and 29998 more)', exit_code=1)


def main():
    import sys
    if sys.argv[1:2] == ["--shape"]:
        # One of the archives too large to commit, written where the test asks.
        name, out = sys.argv[2], sys.argv[3]
        with open(out, "wb") as f:
            f.write(SHAPES[name]())
        return
    for f in os.listdir(HERE):
        if f.endswith(".zip") or f.endswith(".journal"):
            os.remove(os.path.join(HERE, f))
    entry_name_attacks()
    container_attacks()
    bomb_attacks()
    tensor_attacks()
    text_attacks()
    extract_attacks()
    journal_cases()
    summary_attacks()
    reference_attacks()
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(MANIFEST)} hostile files in {HERE}")


if __name__ == "__main__":
    main()
