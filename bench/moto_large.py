#!/usr/bin/env python3
"""moto_server for objects of many GiB: `python bench/moto_large.py -H 127.0.0.1 -p PORT`.

moto 5.2 keeps an object's bytes in a spooled temporary file but reads all of them into
memory whenever it touches the object: a ranged GET reads the whole object and slices it,
an UploadPartCopy reads the whole source, and CompleteMultipartUpload concatenates the
parts in a bytearray, copies it (`bytes(total)`) and concatenates it once more for the
object's CRC64NVME checksum. For a 10 GiB object that is 20 to 30 GiB of memory for one
request. bench/remote_append_bench.py starts this launcher instead of `moto.server` when
the archive is larger than --mapped-above GiB (default 2). It changes how moto holds
bytes, not what the S3 protocol says:

- an object's bytes, once moto has spilled them to disk, are returned as a read-only
  memory map of that file (a ranged GET and a part copy slice the map; a GET's answer
  is copied out of it as bytes, as before);
- CompleteMultipartUpload writes the parts one after the other into a temporary file
  and hands moto a map of it; it computes the same multipart ETag (MD5 of the parts'
  MD5s, "-N") and skips the full-object checksum (the bench's client sends no checksum
  algorithm, so moto would only have computed its default CRC64NVME for the answer's
  `x-amz-checksum-*` header, which no modelzip request reads).

Everything the bench counts (requests, bytes up and down) is counted by its proxy in
front of this server, so the patches do not change the numbers, only moto's memory.
"""
import codecs
import mmap
import sys
import tempfile

from moto import server
from moto.s3 import models, responses
from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML

MAPPED_ABOVE = 64 << 20

_value = models.FakeKey.value


def _mapped_value(self):
    buf = self._value_buffer
    if getattr(buf, "_rolled", False) and self.contentsize >= MAPPED_ABOVE:
        with self.lock:
            buf.flush()
            return memoryview(mmap.mmap(buf.fileno(), 0, access=mmap.ACCESS_READ))
    return _value.fget(self)


models.FakeKey.value = property(_mapped_value, _value.fset)


def _complete(self, body):
    decode_hex = codecs.getdecoder("hex_codec")
    md5s = bytearray()
    out = tempfile.TemporaryFile()
    last = None
    count = 0
    for pn, etag in body:
        part = self.parts.get(pn)
        if part is None or part.etag.replace('"', "") != etag.replace('"', ""):
            raise InvalidPart()
        if last is not None and last.contentsize < models.S3_UPLOAD_PART_MIN_SIZE:
            raise EntityTooSmall()
        md5s.extend(decode_hex(part.etag.replace('"', ""))[0])
        out.write(part.value)
        last = part
        count += 1
    if count == 0:
        raise MalformedXML
    out.flush()
    full = models.md5_hash()
    full.update(bytes(md5s))
    if out.tell() == 0:
        return b"", f"{full.hexdigest()}-{count}", None
    value = memoryview(mmap.mmap(out.fileno(), 0, access=mmap.ACCESS_READ))
    out.close()
    return value, f"{full.hexdigest()}-{count}", None


models.FakeMultipart.complete = _complete

_key_response = responses.S3Response.key_response


def _key_response_bytes(self, request, full_url, headers):
    status, headers, content = _key_response(self, request, full_url, headers)
    if isinstance(content, memoryview):
        content = content.tobytes()
    return status, headers, content


responses.S3Response.key_response = _key_response_bytes

if __name__ == "__main__":
    server.main(sys.argv[1:])
