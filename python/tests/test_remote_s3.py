"""The S3 path end to end, against a real S3-compatible server on loopback (moto_server,
started here on a free port of 127.0.0.1 and stopped after the tests): the CLI's `cp` up,
`tags`/`show`/`cat`/`verify`/`extract` through s3://, `cp` down byte-identical, and two
concurrent uploads to one key, of which exactly one wins."""

from __future__ import annotations

import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import PADDLE_FIXTURES, cli_env, cli_path, moto_server, s3_env

BUCKET = "models"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 with one bucket; the environment the CLI reads. Its
    request recorder (off until a test starts it) writes to a file of this module's."""
    recording = tmp_path_factory.mktemp("moto") / "requests.jsonl"
    with moto_server({"MOTO_RECORDER_FILEPATH": str(recording)}) as port:
        endpoint = f"http://127.0.0.1:{port}"
        req = urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT")
        urllib.request.urlopen(req, timeout=30).close()
        env = s3_env(endpoint)
        yield env


cli = cli_env


def make_archive(env, path: Path, model: str) -> Path:
    cli(
        env,
        "import-paddle",
        path,
        "--tag",
        "fp32",
        PADDLE_FIXTURES / f"{model}.pdmodel",
        PADDLE_FIXTURES / f"{model}.pdiparams",
    )
    return path


def without_archive(doc):
    doc.pop("archive", None)
    return doc


def test_s3_round_trip(s3, tmp):
    import json

    local = make_archive(s3, tmp / "mlp.zip", "mlp")
    url = f"s3://{BUCKET}/round-trip/mlp.zip"
    cli(s3, "cp", local, url)
    for args in (["tags"], ["show"], ["verify"], ["cat", first_param(s3, local)]):
        remote = json.loads(cli(s3, args[0], url, *args[1:], "--json").stdout)
        here = json.loads(cli(s3, args[0], local, *args[1:], "--json").stdout)
        assert without_archive(remote) == without_archive(here), args
    cli(s3, "extract", url, "--out", tmp / "remote-x")
    cli(s3, "extract", local, "--out", tmp / "local-x")
    files = sorted(p.relative_to(tmp / "local-x") for p in (tmp / "local-x").rglob("*") if p.is_file())
    assert files
    for rel in files:
        assert (tmp / "remote-x" / rel).read_bytes() == (tmp / "local-x" / rel).read_bytes()
    down = tmp / "down.zip"
    cli(s3, "cp", url, down)
    assert down.read_bytes() == local.read_bytes()
    # Create-only: a second upload to the key is refused.
    again = cli(s3, "cp", local, url, check=False)
    assert again.returncode == 2
    assert "already exists" in again.stderr


def moto_api(env, action: str) -> bytes:
    """Calls moto's request recorder (`start-recording`, `stop-recording`,
    `reset-recording`, `download-recording`)."""
    method = "GET" if action == "download-recording" else "POST"
    req = urllib.request.Request(
        f"{env['AWS_ENDPOINT_URL']}/moto-api/recorder/{action}", method=method
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def lodtensor_fp32(values: bytes, n: int) -> bytes:
    """One Paddle LoDTensor record: FP32, dims [n], no LoD."""
    import struct

    desc = b"\x08\x05\x10" + varint(n)
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + values


def test_tags_through_s3_is_at_most_two_gets(s3, tmp):
    """`modelzip tags s3://...` of 10 tags x 10 tensors of 64 KiB (far larger than the
    256 KiB the first request reads) lists what the local file lists with at most 2 GETs,
    counted by moto's own request recorder; reading one tag's tensor costs more."""
    import json
    import random

    local = tmp / "ten.zip"
    rng = random.Random(7)
    for t in range(10):
        d = tmp / f"ten-{t}"
        d.mkdir()
        for p in range(10):
            (d / f"p{p}").write_bytes(lodtensor_fp32(rng.randbytes(65536), 16384))
        cli(s3, "pack", local, d, "--tag", f"tag-{t}", "-q")
    assert local.stat().st_size > 20 * (256 << 10)
    url = f"s3://{BUCKET}/count/ten.zip"
    cli(s3, "cp", local, url)
    key = "/count/ten.zip"

    def gets_of(args):
        moto_api(s3, "reset-recording")
        moto_api(s3, "start-recording")
        try:
            out = cli(s3, *args).stdout
        finally:
            moto_api(s3, "stop-recording")
        rows = [json.loads(line) for line in moto_api(s3, "download-recording").splitlines()]
        gets = [r for r in rows if r["method"] == "GET" and key in r["url"]]
        return out, gets, rows

    out, gets, rows = gets_of(["tags", url])
    assert out == cli(s3, "tags", local).stdout
    assert 1 <= len(gets) <= 2, rows
    assert all(r["method"] in ("GET", "HEAD") for r in rows), rows
    doc, _, _ = gets_of(["tags", url, "--json"])
    assert without_archive(json.loads(doc)) == without_archive(
        json.loads(cli(s3, "tags", local, "--json").stdout)
    )
    # The recorder counts for real: one tensor read is more than the listing.
    _, more, _ = gets_of(["cat", url, "p3", "--tag", "tag-4", "--json"])
    assert len(more) > len(gets), more


def first_param(env, local: Path) -> str:
    import json

    doc = json.loads(cli(env, "show", local, "--json").stdout)
    return doc["params"][0]["name"]


def test_two_concurrent_uploads_exactly_one_wins(s3, tmp):
    a = make_archive(s3, tmp / "a.zip", "mlp")
    b = make_archive(s3, tmp / "b.zip", "conv")
    url = f"s3://{BUCKET}/race/model.zip"
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda p: cli(s3, "cp", p, url, check=False), [a, b]))
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 2], [(r.returncode, r.stderr) for r in results]
    loser = next(r for r in results if r.returncode == 2)
    assert "already exists" in loser.stderr
    winner = a if results[0].returncode == 0 else b
    down = tmp / "down.zip"
    cli(s3, "cp", url, down)
    assert down.read_bytes() == winner.read_bytes()


def test_a_large_archive_goes_up_in_parts_create_only(s3, tmp):
    """Over 64 MiB: a multipart upload to a staging key, copied to the key only if none is
    there (S3's conditional CompleteMultipartUpload); the staging key is removed."""
    import json
    import struct

    n = 17_000_000  # FP32 elements: 68 MB
    desc = b"\x08\x05\x10" + varint(n)
    d = tmp / "big"
    d.mkdir()
    with open(d / "w", "wb") as f:
        f.write(struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc)
        chunk = bytes(range(256)) * 4096
        left = 4 * n
        while left:
            f.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
    local = tmp / "big.zip"
    cli(s3, "pack", local, d, "--tag", "t", "-q")
    assert local.stat().st_size > 64 << 20
    url = f"s3://{BUCKET}/large/big.zip"
    cli(s3, "cp", local, url)
    again = cli(s3, "cp", local, url, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    doc = json.loads(cli(s3, "tags", url, "--json").stdout)
    assert doc["tags"][0]["dtypes"] == ["FP32"]
    down = tmp / "down.zip"
    cli(s3, "cp", url, down)
    assert down.read_bytes() == local.read_bytes()
    listing = urllib.request.urlopen(
        f"{s3['AWS_ENDPOINT_URL']}/{BUCKET}?list-type=2&prefix=large/", timeout=30
    ).read()
    assert listing.count(b"<Key>") == 1, listing


def varint(v: int) -> bytes:
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def test_python_open_upload_download_through_s3(s3, tmp, monkeypatch):
    """modelzip.open("s3://...") reads what the local file holds (owned arrays), upload is
    create-only unless told, download is byte-identical, and writes to a URL are refused."""
    import numpy as np

    import modelzip

    for k, v in s3.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    local = tmp / "py.zip"
    w = np.arange(1000, dtype=np.float32).reshape(10, 100)
    modelzip.save(local, "fp32", {"fc.w": w, "fc.b": np.ones(10, np.float64)}, metadata={"k": 1})
    modelzip.save(local, "ft", {"fc.w": w + 1, "fc.b": np.ones(10, np.float64)})
    url = f"s3://{BUCKET}/python/py.zip"
    etag = modelzip.upload(local, url)
    with pytest.raises(modelzip.ModelzipError) as refused:
        modelzip.upload(local, url)  # create-only
    # Python's words for replacing, not the CLI's flag or the library's enum.
    said = str(refused.value)
    assert "already exists" in said and said.endswith("; pass force=True to replace it"), said
    assert "--force" not in said and "UploadMode" not in said and "Generic" not in said, said
    with modelzip.open(url) as ar, modelzip.open(local) as here:
        assert ar.tags == here.tags == ["fp32", "ft"]
        for tag in ar.tags:
            t, h = ar[tag], here[tag]
            assert t.keys() == h.keys()
            for name in t.keys():
                np.testing.assert_array_equal(t[name], h[name])
                assert t[name].dtype == h[name].dtype
            assert t.metadata == h.metadata
        assert ar["FP32"]["fc.w"].flags.writeable  # remote tensors are owned copies
        # Parts through S3 (ranged GETs of their bytes; counted in test_slices.py).
        part = ar["fp32"].get_slice("fc.w")
        assert part.get_shape() == [10, 100] and part.get_dtype() == "FP32"
        np.testing.assert_array_equal(part[2:5], w[2:5])
        np.testing.assert_array_equal(part[2:5, 10:20], w[2:5, 10:20])
        np.testing.assert_array_equal(part[-1, ...], w[-1])
        with pytest.raises(KeyError):
            ar["nope"]
    # Writes other than appends to s3:// (test_remote_append_s3.py) refuse a URL.
    with pytest.raises(modelzip.ModelzipError, match="upload"):
        modelzip.save(f"gs://{BUCKET}/python/py.zip", "x", {"w": np.ones(1)})
    down = tmp / "down.zip"
    modelzip.download(url, down)
    assert down.read_bytes() == local.read_bytes()
    # An existing file is replaced only with force=True (as `cp` without --force).
    down.write_bytes(b"mine")
    with pytest.raises(FileExistsError) as kept:
        modelzip.download(url, down)
    assert kept.value.filename == str(down) and kept.value.kind == "io", kept.value
    assert down.read_bytes() == b"mine"
    modelzip.download(url, down, force=True)
    assert down.read_bytes() == local.read_bytes()
    modelzip.save(local, "third", {"w": np.ones(3)})
    with pytest.raises(modelzip.ModelzipError) as stale:
        modelzip.upload(local, url, if_match='"stale"')
    said = str(stale.value)
    assert "nothing was replaced" in said, said
    assert said.endswith("; pass force=True instead of if_match to replace whatever is there"), said
    modelzip.upload(local, url, if_match=etag)  # replaces only the version we uploaded
    with modelzip.open(url) as ar:
        assert ar.tags == ["fp32", "ft", "third"]


def test_view_serves_an_s3_archive_and_sees_a_new_version_on_reload(s3, tmp):
    """`modelzip view s3://...`: the page's API lists the tags and gives the diff the CLI
    gives for the same URL; an upload of a new version (another tag) shows on the next
    request (docs/VIEW.md)."""
    import json
    import re

    local = make_archive(s3, tmp / "v.zip", "mlp")
    cli(s3, "quantize", local, "--from", "fp32", "--tag", "int8")
    url = f"s3://{BUCKET}/view/v.zip"
    cli(s3, "cp", local, url)
    proc = subprocess.Popen(
        [str(cli_path()), "view", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=s3,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        base = m.group(1)

        def get(path):
            with urllib.request.urlopen(base + path, timeout=60) as r:
                return json.loads(r.read())

        tags = json.loads(cli(s3, "tags", url, "--json").stdout)["tags"]
        assert [t["name"] for t in get("api/archive")["tags"]] == [t["name"] for t in tags]
        # `diff --json`'s document, with the lists' uncut lengths beside it.
        diff = get("api/diff?a=fp32&b=int8")
        assert diff.pop("truncated") is False and diff.pop("counts")["changed"] == 2
        assert diff == json.loads(cli(s3, "diff", url, "fp32", "int8", "--json").stdout)
        cli(s3, "cast", local, "--from", "fp32", "--tag", "fp16", "--dtype", "fp16")
        cli(s3, "cp", "--force", local, url)
        assert [t["name"] for t in get("api/archive")["tags"]] == ["fp32", "int8", "fp16"]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
