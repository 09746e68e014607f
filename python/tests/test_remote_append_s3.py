"""Remote appends (`modelzip pack s3://... --tag T DIR`, docs/REMOTE.md "Remote appends")
against moto_server on 127.0.0.1, behind a small proxy of this module's, also on
127.0.0.1, that

- counts every request (method, query, bytes sent, bytes answered), so the tests can say
  what an append uploads and reads, and
- enforces the conditions moto 5 does not: `If-Match` on CompleteMultipartUpload and
  `x-amz-copy-source-if-match` on UploadPartCopy (a HEAD of the key, under one lock with
  the forwarded commit, so check and commit are atomic); moto itself enforces
  `If-None-Match: *` on CompleteMultipartUpload. It can also hold commits until two
  have arrived, so that two appends are made to race for real, or replace the object
  just before a commit; and it refuses requests signed with the access key `refused`
  (moto checks no credentials).

Both servers are started and stopped here."""

from __future__ import annotations

import http.client
import http.server
import json
import random
import re
import struct
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import PADDLE_FIXTURES, cli_env, cli_path, moto_server, s3_env

BUCKET = "models"
MIB = 1 << 20
# moto answers anonymous requests 403 and does not check signatures: the proxy's and the
# tests' own requests carry this.
AUTH = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
}


def raw(env, method: str, path: str, body: bytes | None = None) -> tuple[int, dict, bytes]:
    """One request to the bucket (through the proxy), outside the CLI."""
    port = int(env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=body, headers=AUTH)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


class Proxy(http.server.ThreadingHTTPServer):
    """Forwards to moto; records requests; enforces If-Match on commits."""

    daemon_threads = True

    def __init__(self, upstream_port: int):
        super().__init__(("127.0.0.1", 0), Handler)
        self.upstream_port = upstream_port
        self.log: list[dict] = []
        self.log_lock = threading.Lock()
        self.commit_lock = threading.Lock()
        # Commits held until this many have arrived (0: none held).
        self.hold_commits = 0
        self.held = threading.Condition()
        self.arrived = 0
        # moto lists every multipart upload as initiated in 2010: the proxy lists the
        # time it saw each created instead (tests may backdate one).
        self.initiated: dict[str, float] = {}
        # Run (once) just before the next commit is checked and forwarded.
        self.before_commit = None
        # Answer every commit 500 without forwarding it (but forward the first
        # `forward_failed_commits` of them: the store commits, its answer is an error).
        self.fail_commits = False
        self.forward_failed_commits = 0
        # Forward this many commits, then close the connection without their answers
        # (the store committed; the writer never hears it).
        self.lose_commit_answers = 0
        # Requests being handled now.
        self.inflight = 0

    def upstream(self, method, path, headers=None, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=120)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        out = (r.status, r.reason, r.getheaders(), data)
        c.close()
        return out

    def with_initiated(self, m: re.Match) -> bytes:
        upload = m.group(0)
        found = re.search(rb"<UploadId>([^<]+)</UploadId>", upload)
        if not found:
            return upload
        # An upload the proxy has not yet seen created is one whose creation is still on
        # its way back to its writer (every request comes through here): it is new. Left
        # as moto's 2010, a racing writer's listing took it for a killed writer's upload
        # and aborted it under its writer (a test failed so, once in ~30 runs).
        when = self.initiated.setdefault(found.group(1).decode(), time.time())
        iso = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(when)).encode()
        return re.sub(rb"<Initiated>[^<]*</Initiated>", b"<Initiated>" + iso + b"</Initiated>", upload)

    def etag_of(self, path: str):
        status, _, headers, _ = self.upstream("HEAD", path, AUTH)
        if status == 404:
            return None
        return dict((k.lower(), v) for k, v in headers).get("etag")


def precondition_failed(what: str) -> bytes:
    return (
        "<?xml version='1.0' encoding='UTF-8'?><Error><Code>PreconditionFailed</Code>"
        f"<Message>At least one of the pre-conditions you specified did not hold ({what})"
        "</Message></Error>"
    ).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_one(self):
        server: Proxy = self.server
        started = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        headers = {k: v for k, v in self.headers.items()}
        is_commit = self.command == "POST" and "uploadId" in query
        is_copy = self.command == "PUT" and "partNumber" in query and any(
            k.lower() == "x-amz-copy-source" for k in headers
        )
        lower = {k.lower(): v for k, v in headers.items()}
        answer = None
        if is_commit and server.hold_commits:
            with server.held:
                server.arrived += 1
                server.held.notify_all()
                # Half the writers' request timeout (60 s): when one writer fails before
                # its commit, the other's is forwarded before its client gives up on it.
                server.held.wait_for(lambda: server.arrived >= server.hold_commits, timeout=30)
        lock = server.commit_lock if is_commit else None
        if lock:
            lock.acquire()
        try:
            if is_commit and server.before_commit is not None:
                hook, server.before_commit = server.before_commit, None
                hook()
            if is_commit and server.fail_commits:
                if server.forward_failed_commits > 0:
                    server.forward_failed_commits -= 1
                    server.upstream(self.command, self.path, headers, body)
                answer = (
                    500,
                    "Internal Server Error",
                    [],
                    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                    b"<Message>We encountered an internal error. Please try again.</Message></Error>",
                )
            if "Credential=refused/" in lower.get("authorization", ""):
                answer = (
                    403,
                    "Forbidden",
                    [],
                    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InvalidAccessKeyId</Code>"
                    b"<Message>The AWS Access Key Id you provided does not exist in our records."
                    b"</Message></Error>",
                )
            if answer is None and is_commit and "if-match" in lower:
                now = server.etag_of(parsed.path)
                if now != lower["if-match"]:
                    answer = (412, "Precondition Failed", [], precondition_failed("If-Match"))
            if answer is None and is_copy and "x-amz-copy-source-if-match" in lower:
                source = urllib.parse.unquote(lower["x-amz-copy-source"])
                now = server.etag_of(urllib.parse.quote(source))
                if now != lower["x-amz-copy-source-if-match"]:
                    answer = (
                        412,
                        "Precondition Failed",
                        [],
                        precondition_failed("x-amz-copy-source-If-Match"),
                    )
            if answer is None:
                answer = server.upstream(self.command, self.path, headers, body)
        finally:
            if lock:
                lock.release()
        status, reason, resp_headers, data = answer
        if self.command == "POST" and "uploads" in query and status == 200:
            m = re.search(rb"<UploadId>([^<]+)</UploadId>", data)
            if m:
                server.initiated[m.group(1).decode()] = time.time()
        if self.command == "GET" and "uploads" in query and status == 200:
            data = re.sub(rb"<Upload>.*?</Upload>", server.with_initiated, data, flags=re.S)
        with server.log_lock:
            server.log.append(
                {
                    "method": self.command,
                    "path": parsed.path,
                    "query": parsed.query,
                    "sent": len(body),
                    "received": len(data),
                    "status": status,
                    "range": lower.get("range"),
                    "copy_range": lower.get("x-amz-copy-source-range"),
                    "copy": is_copy,
                    "commit": is_commit,
                    "seconds": time.monotonic() - started,
                }
            )
        if is_commit and server.lose_commit_answers > 0:
            server.lose_commit_answers -= 1
            self.close_connection = True
            return
        self.send_response(status, reason)
        skip = {"content-length", "transfer-encoding", "connection", "server", "date"}
        for k, v in resp_headers:
            if k.lower() not in skip:
                self.send_header(k, v)
        if self.command == "HEAD":
            # The object's length, as the store said it (a HEAD has no body).
            length = next((v for k, v in resp_headers if k.lower() == "content-length"), "0")
            self.send_header("Content-Length", length)
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle_counted(self):
        """handle_one, counted in the proxy's `inflight` while it runs (a request whose
        client was killed still reaches the store: tests wait for it to land)."""
        server: Proxy = self.server
        with server.log_lock:
            server.inflight += 1
        try:
            self.handle_one()
        finally:
            with server.log_lock:
                server.inflight -= 1

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_counted


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto on 127.0.0.1 with one bucket, the proxy in front of it, and the environment
    that points the CLI at the proxy."""
    with moto_server() as port:
        proxy = Proxy(port)
        try:
            assert proxy.upstream("PUT", f"/{BUCKET}", AUTH)[0] == 200
            threading.Thread(target=proxy.serve_forever, daemon=True).start()
            yield s3_env(f"http://127.0.0.1:{proxy.server_address[1]}"), proxy
        finally:
            proxy.shutdown()
            proxy.server_close()


cli = cli_env


def python_env(env, monkeypatch):
    """Points this process's modelzip (the Python package) at the proxy, as `env` points
    the CLI, without the caller's own AWS settings."""
    for k, v in env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)


def varint(v: int) -> bytes:
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def lodtensor_fp32(values: bytes) -> bytes:
    """One Paddle LoDTensor record: FP32, dims [len/4], no LoD."""
    desc = b"\x08\x05\x10" + varint(len(values) // 4)
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + values


def tensor_dir(root: Path, name: str, sizes: dict[str, int], seed: int) -> Path:
    d = root / name
    d.mkdir()
    rng = random.Random(seed)
    for p, n in sizes.items():
        (d / p).write_bytes(lodtensor_fp32(rng.randbytes(n)))
    return d


def requests_to(proxy: Proxy, key: str, since: int) -> list[dict]:
    with proxy.log_lock:
        return [r for r in proxy.log[since:] if r["path"].endswith(key)]


def test_append_uploads_only_the_new_tag_and_reads_no_data(s3, tmp):
    """A 24 MiB archive in the bucket; `pack s3://... --tag t2` of a 10 MiB new tensor
    plus one equal to an old one: the proxy counts ≤ new + 6 MiB uploaded, the old bytes
    copied by the store, GETs of well under one tensor (no data); `verify` passes and
    `tags` lists both; a download is the archive the same packs make locally."""
    env, proxy = s3
    old = {"a": 8 * MIB, "b": 8 * MIB, "c": 8 * MIB}
    d1 = tensor_dir(tmp, "t1", old, seed=1)
    d2 = tmp / "t2"
    d2.mkdir()
    (d2 / "a").write_bytes((d1 / "a").read_bytes())  # equal to t1's: stored once
    (d2 / "new").write_bytes(lodtensor_fp32(random.Random(2).randbytes(10 * MIB)))
    local = tmp / "local.zip"
    cli(env, "pack", local, d1, "--tag", "t1", "-q")
    url = f"s3://{BUCKET}/append/model.zip"
    cli(env, "cp", local, url)
    key = "/append/model.zip"
    before = len(proxy.log)
    r = cli(env, "pack", url, d2, "--tag", "t2", "--json", check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    reqs = requests_to(proxy, key, before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    got = sum(r["received"] for r in reqs if r["method"] == "GET")
    new_bytes = 10 * MIB
    assert uploaded <= new_bytes + 6 * MIB, (uploaded, reqs)
    assert uploaded >= new_bytes  # the new tensor did go up
    assert got < 1 * MIB, [r for r in reqs if r["method"] == "GET"]
    assert any(r["copy"] for r in reqs), reqs
    assert out["mode"] == "remote_append" and not out["created"]
    assert out["shared"] == 1
    assert out["bytes_uploaded"] == uploaded
    assert out["bytes_copied"] >= 24 * MIB and out["bytes_reread"] == 0
    assert out["requests"] == sum(1 for r in reqs if r["method"] in ("PUT", "POST"))
    cli(env, "verify", url)
    tags = json.loads(cli(env, "tags", url, "--json").stdout)
    assert [t["name"] for t in tags["tags"]] == ["t1", "t2"]
    # What a local in-place append makes, byte for byte in every entry's content.
    cli(env, "pack", local, d2, "--tag", "t2", "-q")
    down = tmp / "down.zip"
    cli(env, "cp", url, down)
    for tag in ("t1", "t2"):
        for d in ("remote-x", "local-x"):
            src = down if d == "remote-x" else local
            cli(env, "extract", src, "--tag", tag, "--out", tmp / d / tag)
    files = sorted(p.relative_to(tmp / "local-x") for p in (tmp / "local-x").rglob("*") if p.is_file())
    assert len(files) >= 4
    for rel in files:
        assert (tmp / "remote-x" / rel).read_bytes() == (tmp / "local-x" / rel).read_bytes(), rel


def test_pack_to_a_new_key_creates_and_a_small_archive_is_reuploaded(s3, tmp):
    """No object at the URL: `pack` creates one (If-None-Match: *). Appending to an
    archive whose bytes before the central directory are under S3's 5 MiB part minimum
    re-uploads them (read once, conditionally): still ≤ new + 6 MiB."""
    env, proxy = s3
    url = f"s3://{BUCKET}/new/model.zip"
    d1 = tensor_dir(tmp, "s1", {"w": 64 << 10}, seed=3)
    first = json.loads(cli(env, "pack", url, d1, "--tag", "s1", "--json").stdout)
    assert first["created"] and first["mode"] == "new" and first["previous_version"] is None
    d2 = tensor_dir(tmp, "s2", {"w": 1 * MIB}, seed=4)
    before = len(proxy.log)
    out = json.loads(cli(env, "pack", url, d2, "--tag", "s2", "--json").stdout)
    reqs = requests_to(proxy, "/new/model.zip", before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT")
    assert not any(r["copy"] for r in reqs)
    assert 0 < out["bytes_reread"] < 5 * MIB
    assert uploaded == out["bytes_uploaded"] <= 1 * MIB + 6 * MIB
    assert out["previous_version"] == first["version"]
    cli(env, "verify", url)
    assert [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]] == [
        "s1",
        "s2",
    ]


def test_two_concurrent_appends_exactly_one_wins(s3, tmp):
    """Two `pack`s of different tags to one object, both opened before either commits
    (the proxy holds commits until both have arrived): one commits, the other exits 2
    with "changed since it was opened ... nothing was written", and the object holds the
    old tag and the winner's, verified; no multipart upload is left behind."""
    env, proxy = s3
    url = f"s3://{BUCKET}/race/model.zip"
    d0 = tensor_dir(tmp, "r0", {"w": 6 * MIB}, seed=5)
    cli(env, "pack", url, d0, "--tag", "base", "-q")
    dirs = [tensor_dir(tmp, f"r{i}", {"w": 1 * MIB, "v": 256 << 10}, seed=10 + i) for i in (1, 2)]
    proxy.hold_commits, proxy.arrived = 2, 0
    try:
        with ThreadPoolExecutor(2) as pool:
            results = list(
                pool.map(
                    lambda i: cli(env, "pack", url, dirs[i], "--tag", f"r{i + 1}", check=False),
                    [0, 1],
                )
            )
    finally:
        proxy.hold_commits = 0
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 2], [(r.returncode, r.stderr) for r in results]
    loser = next(r for r in results if r.returncode == 2)
    said = loser.stderr.strip()
    assert len(said.splitlines()) == 1, said
    assert f"the archive at {url} changed since it was opened (version " in said, said
    assert "nothing was written" in said, said
    winner = f"r{[r.returncode for r in results].index(0) + 1}"
    cli(env, "verify", url)
    tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
    assert tags == ["base", winner]
    status, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=race/")
    assert status == 200 and b"<Upload>" not in listing, listing


def test_bad_inputs_are_one_line_errors_and_write_nothing(s3, tmp):
    env, proxy = s3
    d = tensor_dir(tmp, "bad", {"w": 4096}, seed=6)
    # An object that is not an archive.
    assert raw(env, "PUT", f"/{BUCKET}/bad/notzip.zip", b"hello" * 100)[0] == 200
    cases = {
        f"s3://{BUCKET}/bad/notzip.zip": "zip",
        "s3://no-such-bucket/m.zip": "bucket",
    }
    for url, word in cases.items():
        before = len(proxy.log)
        r = cli(env, "pack", url, d, "--tag", "t", check=False)
        assert r.returncode == 2, (url, r.stderr)
        said = r.stderr.strip()
        assert len(said.splitlines()) == 1 and word in said.lower(), said
        with proxy.log_lock:
            writes = [x for x in proxy.log[before:] if x["method"] == "PUT" and not x["copy"]]
        assert not writes, writes
    assert raw(env, "GET", f"/{BUCKET}/bad/notzip.zip")[2] == b"hello" * 100
    # A tag that exists, and --rewrite: refused before anything is sent.
    url = f"s3://{BUCKET}/bad/model.zip"
    cli(env, "pack", url, d, "--tag", "t", "-q")
    version = json.loads(cli(env, "pack", url, d, "--tag", "t2", "--json").stdout)["version"]
    for args, word in (([], "exists"), (["--rewrite"], "--rewrite")):
        before = len(proxy.log)
        r = cli(env, "pack", url, d, "--tag", "T", *args, check=False)
        assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        with proxy.log_lock:
            assert not [x for x in proxy.log[before:] if x["method"] in ("PUT", "POST")]
    assert raw(env, "HEAD", f"/{BUCKET}/bad/model.zip")[1]["etag"] == version


def test_an_upload_left_by_a_killed_writer_is_aborted_by_the_next(s3, tmp):
    """A multipart upload under the key older than a day (as a writer killed mid-append
    leaves; backdated by the proxy) is aborted by the next append; a recent one (perhaps
    another writer's, still running) is left alone."""
    env, proxy = s3
    url = f"s3://{BUCKET}/stale/model.zip"
    d = tensor_dir(tmp, "st", {"w": 4096}, seed=8)
    cli(env, "pack", url, d, "--tag", "a", "-q")
    ids = []
    for _ in range(2):
        status, _, body = raw(env, "POST", f"/{BUCKET}/stale/model.zip?uploads=")
        assert status == 200, body
        ids.append(re.search(rb"<UploadId>([^<]+)</UploadId>", body).group(1).decode())
    proxy.initiated[ids[0]] -= 2 * 86400
    out = json.loads(cli(env, "pack", url, d, "--tag", "b", "--json").stdout)
    assert out["stale_uploads_aborted"] == 1
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=stale/")
    assert ids[0].encode() not in listing and ids[1].encode() in listing, listing
    assert raw(env, "DELETE", f"/{BUCKET}/stale/model.zip?uploadId={ids[1]}")[0] == 204
    cli(env, "verify", url)


def test_python_save_appends_to_s3(s3, tmp, monkeypatch):
    """modelzip.save("s3://...") creates the archive, then appends to it where it lies:
    only the new array goes up (the equal one is shared through the manifests), the
    result reports what was uploaded and copied, and the arrays read back equal."""
    import numpy as np

    import modelzip

    env, proxy = s3
    python_env(env, monkeypatch)
    url = f"s3://{BUCKET}/python/ck.zip"
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 1536)).astype(np.float32)  # 6 MiB
    first = modelzip.save(url, "step-1", {"w": w, "b": np.zeros(10, np.float32)})
    assert first["created"] and first["previous_version"] is None
    new = rng.standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB
    before = len(proxy.log)
    second = modelzip.save(url, "step-2", {"w": w, "new": new}, metadata={"step": 2})
    reqs = requests_to(proxy, "/python/ck.zip", before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    assert not second["created"] and second["previous_version"] == first["version"]
    assert second["shared"] == 1
    assert uploaded == second["bytes_uploaded"] <= new.nbytes + 6 * MIB
    assert second["bytes_copied"] >= w.nbytes and second["bytes_reread"] == 0
    assert sum(r["received"] for r in reqs if r["method"] == "GET") < 1 * MIB
    with modelzip.open(url) as ar:
        assert ar.tags == ["step-1", "step-2"]
        np.testing.assert_array_equal(ar["step-2"]["w"], w)
        np.testing.assert_array_equal(ar["step-2"]["new"], new)
        assert ar["step-2"].metadata["step"] == 2
    cli(env, "verify", url)
    # Other stores are refused with the pointer to uploads.
    with pytest.raises(modelzip.ModelzipError, match="upload"):
        modelzip.save("gs://bucket/ck.zip", "x", {"w": w})


def test_an_object_replaced_before_the_commit_is_left_as_replaced(s3, tmp):
    """The object replaced by a non-archive between the open and the commit: the commit
    is refused, the append says so in one line (exit 2), the upload is aborted and the
    object is the replacement, untouched."""
    env, proxy = s3
    url = f"s3://{BUCKET}/replaced/model.zip"
    path = f"/{BUCKET}/replaced/model.zip"
    d = tensor_dir(tmp, "rp", {"w": 6 * MIB}, seed=9)
    cli(env, "pack", url, d, "--tag", "a", "-q")
    proxy.before_commit = lambda: proxy.upstream("PUT", path, AUTH, b"not an archive")
    d2 = tensor_dir(tmp, "rp2", {"w": 4096}, seed=10)
    r = cli(env, "pack", url, d2, "--tag", "b", check=False)
    said = r.stderr.strip()
    assert r.returncode == 2 and len(said.splitlines()) == 1, said
    assert "changed since it was opened" in said and "nothing was written" in said, said
    assert raw(env, "GET", path)[2] == b"not an archive"
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=replaced/")
    assert b"<Upload>" not in listing, listing


def test_refused_credentials_are_one_line_and_write_nothing(s3, tmp):
    env, proxy = s3
    url = f"s3://{BUCKET}/creds/model.zip"
    d = tensor_dir(tmp, "cr", {"w": 4096}, seed=11)
    cli(env, "pack", url, d, "--tag", "a", "-q")
    before = len(proxy.log)
    r = cli({**env, "AWS_ACCESS_KEY_ID": "refused"}, "pack", url, d, "--tag", "b", check=False)
    said = r.stderr.strip()
    assert r.returncode == 2 and len(said.splitlines()) == 1, said
    assert "403" in said or "InvalidAccessKeyId" in said, said
    with proxy.log_lock:
        assert all(x["status"] == 403 for x in proxy.log[before:]), proxy.log[before:]
    tags = json.loads(cli(env, "tags", url, "--json").stdout)["tags"]
    assert [t["name"] for t in tags] == ["a"]


def test_a_commit_that_keeps_failing_is_settled_by_aborting_its_upload(s3, tmp):
    """Every CompleteMultipartUpload answered 500 (retried, then given up), none carried
    out: an answer lost may hide a commit, so the append asks the store by aborting its
    upload, which only an open upload survives: aborted, nothing was committed, and the
    append says so in one line (exit 2). The object is unchanged; no upload is left."""
    env, proxy = s3
    url = f"s3://{BUCKET}/unknown/model.zip"
    d = tensor_dir(tmp, "uk", {"w": 4096}, seed=12)
    version = json.loads(cli(env, "pack", url, d, "--tag", "a", "--json").stdout)["version"]
    before = len(proxy.log)
    proxy.fail_commits = True
    try:
        r = cli(env, "pack", url, d, "--tag", "b", check=False)
    finally:
        proxy.fail_commits = False
    said = r.stderr.strip()
    assert r.returncode == 2 and len(said.splitlines()) == 1, said
    assert "500" in said and "nothing was written" in said, said
    with proxy.log_lock:
        commits = [x for x in proxy.log[before:] if x["commit"]]
        aborts = [x for x in proxy.log[before:] if x["method"] == "DELETE"]
    assert len(commits) == 4, commits  # the first try and 3 retries
    assert aborts and aborts[0]["status"] == 204, aborts
    assert raw(env, "HEAD", f"/{BUCKET}/unknown/model.zip")[1]["etag"] == version
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=unknown/")
    assert b"<Upload>" not in listing, listing
    tags = json.loads(cli(env, "tags", url, "--json").stdout)["tags"]
    assert [t["name"] for t in tags] == ["a"]


def test_a_commit_carried_out_but_answered_500_is_found_committed(s3, tmp):
    """The store carries out the first CompleteMultipartUpload but answers it 500, and
    every retry 500 too: the abort that follows finds the upload gone (`NoSuchUpload`)
    and the object changed, so the commit happened: the append succeeds with the new
    version (it is not reported as a failure, nor as of unknown outcome)."""
    env, proxy = s3
    url = f"s3://{BUCKET}/failed-but-done/model.zip"
    d = tensor_dir(tmp, "fd", {"w": 4096}, seed=14)
    version = json.loads(cli(env, "pack", url, d, "--tag", "a", "--json").stdout)["version"]
    before = len(proxy.log)
    proxy.fail_commits, proxy.forward_failed_commits = True, 1
    try:
        r = cli(env, "pack", url, d, "--tag", "b", "--json")
    finally:
        proxy.fail_commits, proxy.forward_failed_commits = False, 0
    report = json.loads(r.stdout)
    now = raw(env, "HEAD", f"/{BUCKET}/failed-but-done/model.zip")[1]["etag"]
    assert report["version"] == now != version, (report, now, version)
    with proxy.log_lock:
        commits = [x for x in proxy.log[before:] if x["commit"]]
        aborts = [x for x in proxy.log[before:] if x["method"] == "DELETE"]
    assert [c["status"] for c in commits] == [500] * 4, commits
    assert aborts and aborts[0]["status"] == 404, aborts
    tags = json.loads(cli(env, "tags", url, "--json").stdout)["tags"]
    assert [t["name"] for t in tags] == ["a", "b"]
    cli(env, "verify", url)


def test_a_commit_whose_answer_is_lost_is_found_committed(s3, tmp):
    """The store commits the new version but its answer never arrives: the append tries
    the commit again, which the store refuses (the object is no longer the version the
    upload was conditioned on), and asks for its upload, which the commit consumed: the
    append reports success with the new version, as if the first answer had arrived
    (it is not a lost race, and nothing is written twice). The object holds both tags
    and verifies; no upload is left."""
    env, proxy = s3
    url = f"s3://{BUCKET}/lost/model.zip"
    d = tensor_dir(tmp, "lost", {"w": 4096}, seed=13)
    version = json.loads(cli(env, "pack", url, d, "--tag", "a", "--json").stdout)["version"]
    before = len(proxy.log)
    proxy.lose_commit_answers = 1
    try:
        r = cli(env, "pack", url, d, "--tag", "b", "--json")
    finally:
        proxy.lose_commit_answers = 0
    report = json.loads(r.stdout)
    now = raw(env, "HEAD", f"/{BUCKET}/lost/model.zip")[1]["etag"]
    assert report["version"] == now != version, (report, now, version)
    with proxy.log_lock:
        commits = [x for x in proxy.log[before:] if x["commit"]]
    assert [c["status"] for c in commits] == [200, 412], commits
    tags = json.loads(cli(env, "tags", url, "--json").stdout)["tags"]
    assert [t["name"] for t in tags] == ["a", "b"]
    cli(env, "verify", url)
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=lost/")
    assert b"<Upload>" not in listing, listing


def test_rm_and_prune_compose_a_version_without_the_removed_tags(s3, tmp):
    """`rm s3://... t1` where t2 shares t1's 8 MiB tensor `a`: the store copies the old
    bytes, `a` is re-homed into t2 (read once, uploaded once), the tables are rewritten;
    nothing else of the data is read or sent. The object then holds what the same removal
    makes locally (`rm --in-place`), entry for entry. `prune --keep 1` removes t2 with no
    data moved; a second prune has nothing to remove and sends nothing."""
    env, proxy = s3
    d1 = tensor_dir(tmp, "m1", {"a": 8 * MIB, "b": 6 * MIB}, seed=21)
    d2 = tmp / "m2"
    d2.mkdir()
    (d2 / "a").write_bytes((d1 / "a").read_bytes())  # stored once, in t1
    (d2 / "c").write_bytes(lodtensor_fp32(random.Random(22).randbytes(1 * MIB)))
    d3 = tensor_dir(tmp, "m3", {"d": 1 * MIB}, seed=23)
    local = tmp / "rm-local.zip"
    for tag, d in (("t1", d1), ("t2", d2), ("t3", d3)):
        cli(env, "pack", local, d, "--tag", tag, "-q")
    url = f"s3://{BUCKET}/rm/model.zip"
    cli(env, "cp", local, url)
    key = "/rm/model.zip"

    before = len(proxy.log)
    out = json.loads(cli(env, "rm", url, "T1", "--json").stdout)
    reqs = requests_to(proxy, key, before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    got = sum(r["received"] for r in reqs if r["method"] == "GET")
    assert out["removed"] == ["t1"] and out["kept"] == ["t2", "t3"] and out["rehomed"] == 1
    assert 8 * MIB <= uploaded <= 8 * MIB + 1 * MIB, uploaded  # `a` re-homed, plus tables
    assert out["bytes_uploaded"] == uploaded and out["bytes_reread"] == 0
    assert out["bytes_copied"] >= 16 * MIB and any(r["copy"] for r in reqs)
    assert 8 * MIB <= got < 9 * MIB, got  # `a` read once; `b`, `c`, `d` never
    assert out["previous_version"] and out["version"] != out["previous_version"]
    cli(env, "verify", url)
    assert [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]] == [
        "t2",
        "t3",
    ]
    cli(env, "rm", local, "t1", "--in-place", "-q")
    down = tmp / "rm-down.zip"
    cli(env, "cp", url, down)
    for tag in ("t2", "t3"):
        for name, src in (("remote-rm", down), ("local-rm", local)):
            cli(env, "extract", src, "--tag", tag, "--out", tmp / name / tag)
    files = sorted(p.relative_to(tmp / "local-rm") for p in (tmp / "local-rm").rglob("*") if p.is_file())
    assert {"t2/a", "t2/c", "t3/d"} <= {str(f) for f in files}, files
    for rel in files:
        assert (tmp / "remote-rm" / rel).read_bytes() == (tmp / "local-rm" / rel).read_bytes(), rel

    before = len(proxy.log)
    r = cli(env, "prune", url, "--keep", "1")
    assert r.stdout.startswith("removed 1 tag(s): t2;"), r.stdout
    assert "bytes uploaded" in r.stdout
    reqs = requests_to(proxy, key, before)
    assert sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"]) < 1 * MIB
    cli(env, "verify", url)
    assert [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]] == ["t3"]

    before = len(proxy.log)
    assert cli(env, "prune", url, "--keep", "1").stdout == "nothing to remove\n"
    assert not [r for r in requests_to(proxy, key, before) if r["method"] in ("PUT", "POST")]


def test_a_removal_racing_an_append_exactly_one_wins(s3, tmp):
    """`rm` and `pack` to one object, both opened before either commits: one commits,
    the other says the archive changed and wrote nothing; the object verifies and
    holds exactly the winner's change."""
    env, proxy = s3
    url = f"s3://{BUCKET}/rmrace/model.zip"
    cli(env, "pack", url, tensor_dir(tmp, "q0", {"w": 6 * MIB}, seed=31), "--tag", "old", "-q")
    cli(env, "pack", url, tensor_dir(tmp, "q1", {"w": 1 * MIB}, seed=32), "--tag", "mid", "-q")
    new = tensor_dir(tmp, "q2", {"w": 1 * MIB}, seed=33)
    proxy.hold_commits, proxy.arrived = 2, 0
    try:
        with ThreadPoolExecutor(2) as pool:
            rm = pool.submit(cli, env, "rm", url, "mid", check=False)
            pack = pool.submit(cli, env, "pack", url, new, "--tag", "new", check=False)
            results = {"rm": rm.result(), "pack": pack.result()}
    finally:
        proxy.hold_commits = 0
    codes = sorted(r.returncode for r in results.values())
    assert codes == [0, 2], {k: (r.returncode, r.stderr) for k, r in results.items()}
    loser = next(r for r in results.values() if r.returncode == 2)
    assert "changed since it was opened" in loser.stderr and "nothing was written" in loser.stderr
    cli(env, "verify", url)
    tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
    assert tags == (["old"] if results["rm"].returncode == 0 else ["old", "mid", "new"])


def test_a_checkpointer_saves_into_s3_keeps_by_policy_and_retries_a_lost_race(
    s3, tmp, monkeypatch
):
    """`modelzip.Checkpointer("s3://...", keep_last=2, keep_best=("loss", "min", 1))`:
    five saves leave the checkpoints the policy keeps, the frozen array stored once,
    each save uploading about its own new bytes; `latest` restores equal arrays. Another
    writer replaces the object just before a save's commit: that commit loses, the
    Checkpointer re-opens and saves again by itself, and the other writer's tag is kept."""
    import numpy as np

    import modelzip

    env, proxy = s3
    python_env(env, monkeypatch)
    url = f"s3://{BUCKET}/ckpt/run.zip"
    key = "/ckpt/run.zip"
    ck = modelzip.Checkpointer(url, keep_last=2, keep_best=("loss", "min", 1))
    rng = np.random.default_rng(7)
    frozen = rng.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB, never changes
    removed = []
    for step, loss in [(1, 0.5), (2, 0.1), (3, 0.4), (4, 0.3)]:
        w = rng.standard_normal((256, 1024)).astype(np.float32)  # 1 MiB new per save
        before = len(proxy.log)
        report = ck.save(step, {"frozen": frozen, "w": w}, metrics={"loss": loss})
        removed += report["removed"]
        reqs = requests_to(proxy, key, before)
        sent = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
        if step > 1:
            # The new array, tables, and (under S3's 5 MiB part minimum) the re-uploaded
            # head of a small archive, plus what retention rewrites: never the frozen one again.
            assert sent < 2 * (w.nbytes + 6 * MIB), (step, sent)
    assert ck.checkpoints() == ["step-000000002", "step-000000003", "step-000000004"]
    assert removed == ["step-000000001"]

    # Another writer: the object replaced (a tag added) just before the next commit.
    other = tmp / "other.zip"
    cli(env, "cp", url, other)
    cli(env, "pack", other, tensor_dir(tmp, "intruder", {"x": 4096}, seed=41), "--tag", "intruder", "-q")
    replacement = other.read_bytes()
    proxy.before_commit = lambda: proxy.upstream("PUT", f"/{BUCKET}{key}", AUTH, replacement)
    w5 = rng.standard_normal((256, 1024)).astype(np.float32)
    before = len(proxy.log)
    report = ck.save(5, {"frozen": frozen, "w": w5}, metrics={"loss": 0.2})
    commits = [r for r in requests_to(proxy, key, before) if r["method"] == "POST" and "uploadId" in r["query"]]
    assert len(commits) >= 2 and commits[0]["status"] == 412, commits
    assert proxy.before_commit is None  # the hook ran
    tags = ck.tags()
    assert "intruder" in tags and tags[-1] == "step-000000005", tags
    assert ck.checkpoints() == ["step-000000002", "step-000000004", "step-000000005"]
    latest = ck.latest()
    assert latest.step == 5
    np.testing.assert_array_equal(latest.params["w"], w5)
    np.testing.assert_array_equal(latest.params["frozen"], frozen)
    cli(env, "verify", url)
    doc = json.loads(cli(env, "tags", url, "--json").stdout)
    # The frozen array is stored once: every checkpoint after the first that holds it shares it.
    own = {t["name"]: t["own_bytes"] for t in doc["tags"]}
    assert all(own[t] < frozen.nbytes for t in ck.checkpoints()[1:]), own


def test_two_checkpointers_racing_both_end_up_in_the_object(s3, tmp, monkeypatch):
    """Two Checkpointers of one s3:// archive save different steps at once (the proxy
    holds both commits until both arrive, so one must lose): the loser re-opens and
    saves again by itself; both checkpoints are in the object, which verifies."""
    import numpy as np

    import modelzip

    env, proxy = s3
    python_env(env, monkeypatch)
    url = f"s3://{BUCKET}/ckrace/run.zip"
    first = modelzip.Checkpointer(url)
    first.save(1, {"w": np.zeros(1 << 20, np.float32)})  # 4 MiB: copied, not re-read
    a, b = modelzip.Checkpointer(url), modelzip.Checkpointer(url)
    rng = np.random.default_rng(3)
    wa, wb = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    proxy.hold_commits, proxy.arrived = 2, 0
    try:
        with ThreadPoolExecutor(2) as pool:
            ra = pool.submit(a.save, 2, {"w": wa})
            rb = pool.submit(b.save, 3, {"w": wb})
            reports = [ra.result(timeout=120), rb.result(timeout=120)]
    finally:
        proxy.hold_commits = 0
    assert sorted(r["tag"] for r in reports) == ["step-000000002", "step-000000003"]
    assert sorted(first.checkpoints()) == ["step-000000001", "step-000000002", "step-000000003"]
    np.testing.assert_array_equal(first.restore("step-000000002").params["w"], wa)
    np.testing.assert_array_equal(first.restore("step-000000003").params["w"], wb)
    cli(env, "verify", url)


def test_the_checkpoint_loop_example_on_s3_is_killed_and_resumes_bit_identical(s3, tmp):
    """examples/python/checkpoint_loop.py --archive s3://... (keep_last 3 + best): killed
    with SIGKILL mid-run, run again, it resumes from the object's newest checkpoint and
    ends with the parameters of an uninterrupted local run; each save line reports the
    bytes it uploaded; the object verifies, and an upload the kill may have left is
    aborted by the resumed run's first save."""
    import os
    import signal
    import subprocess
    import sys

    env, proxy = s3
    example = Path(__file__).resolve().parents[2] / "examples" / "python" / "checkpoint_loop.py"
    args = ["--steps", "60", "--every", "10"]

    def run(archive, *more):
        return subprocess.run([sys.executable, str(example), "--archive", str(archive), *args, *more],
                              capture_output=True, text=True, env=env, timeout=300)

    reference = run(tmp / "ref.zip")
    assert reference.returncode == 0, reference.stderr
    url = f"s3://{BUCKET}/loop/run.zip"
    proc = subprocess.Popen([sys.executable, str(example), "--archive", url, *args, "--sleep", "0.01"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    saved = []
    for line in proc.stdout:
        if " saved" in line:
            saved.append(line)
            if len(saved) == 3:
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    assert all(re.search(r" uploaded=\d+$", s.strip()) for s in saved), saved
    cli(env, "verify", url)
    # An upload the kill left (if it struck inside one) is a day old for the next writer,
    # which aborts it (STALE_UPLOAD_AGE; the proxy reports the times it saw).
    for upload in list(proxy.initiated):
        proxy.initiated[upload] -= 2 * 86400
    out = run(url)
    assert out.returncode == 0, out.stderr
    assert "resumed from step-" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == reference.stdout.strip().splitlines()[-1]
    tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
    assert tags[-1] == "step-000000060" and 3 <= len(tags) <= 4, tags
    cli(env, "verify", url)
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=loop/")
    assert b"<Upload>" not in listing, listing


def test_remote_appends_killed_at_random_instants_leave_the_old_or_the_new_version(s3, tmp):
    """20 `pack s3://...` runs, each killed with SIGKILL at a random instant of its run
    (the open, the staging, the part uploads or the commit): after every kill the object
    verifies and lists the old tags, or the old tags plus the new one, never anything
    else; the next writer aborts every upload the kills left (backdated a day by the
    proxy), and none is left after it."""
    import os
    import signal
    import subprocess

    env, proxy = s3
    url = f"s3://{BUCKET}/killed/model.zip"
    cli(env, "pack", url, tensor_dir(tmp, "k0", {"w": 6 * MIB}, seed=50), "--tag", "base", "-q")
    new = tensor_dir(tmp, "k1", {"w": 3 * MIB, "v": 1 * MIB}, seed=51)
    # How long an uninterrupted append takes here, to spread the kills over it.
    t = time.monotonic()
    cli(env, "pack", url, new, "--tag", "probe", "-q")
    whole = time.monotonic() - t
    cli(env, "rm", url, "probe", "-q")
    expected = ["base"]
    rng = random.Random(52)
    committed = 0
    for i in range(20):
        tag = f"k{i}"
        proc = subprocess.Popen([str(cli_path()), "pack", url, str(new), "--tag", tag, "-q"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, whole * 1.5))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # A request the process sent before it died (its commit, perhaps) still lands.
        deadline = time.monotonic() + 60
        while proxy.inflight and time.monotonic() < deadline:
            time.sleep(0.01)
        tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
        assert tags in (expected, expected + [tag]), (i, tags)
        if tags != expected:
            committed += 1
            expected = tags
        cli(env, "verify", url)
    for upload in list(proxy.initiated):
        proxy.initiated[upload] -= 2 * 86400
    cli(env, "pack", url, tensor_dir(tmp, "k2", {"w": 4096}, seed=53), "--tag", "after", "-q")
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=killed/")
    assert b"<Upload>" not in listing, listing
    assert [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]] == expected + ["after"]
    cli(env, "verify", url)
    # Not every kill came before the commit, nor after it (else the instants were not spread).
    assert 0 < committed < 20, committed


# Remote compaction (`modelzip compact s3://...`, docs/REMOTE.md "Remote compaction").

COMMIT_WRITTEN = ("tags.txt", "_summary.txt")


def entry_extents(data: bytes) -> dict[str, tuple[int, int]]:
    """Each entry's bytes in an archive (local header to data end), by name, read with
    the zip module and the local headers."""
    import io
    import zipfile

    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            h = info.header_offset
            assert data[h : h + 4] == b"PK\x03\x04"
            n, m = struct.unpack_from("<HH", data, h + 26)
            out[info.filename] = (h, h + 30 + n + m + info.compress_size)
    return out


def misaligned_tensors(data: bytes) -> list[str]:
    """Stored tensors whose first element is not at a multiple of 64 in the file."""
    import io
    import zipfile

    bad = []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            if not info.filename.endswith(".lodtensor") or info.compress_type != zipfile.ZIP_STORED:
                continue
            h = info.header_offset
            n, m = struct.unpack_from("<HH", data, h + 26)
            d = h + 30 + n + m
            version, lod_levels = struct.unpack_from("<IQ", data, d)
            assert lod_levels == 0, info.filename
            desc_len = struct.unpack_from("<i", data, d + 16)[0]
            if (d + 20 + desc_len) % 64:
                bad.append(info.filename)
    return bad


def compaction_fixture(env, tmp, key: str) -> tuple[str, Path]:
    """An archive in the bucket with dead bytes: tags t1 (6 MiB + 64 KiB), t2 (7 MiB + 1
    MiB, removed remotely), t3 (100 KiB) and t4 (12 MiB), packed locally one by one (old
    central directories left behind), uploaded, then `rm t2` on the object. Live runs
    both above and below 5 MiB. Returns the URL and a download of the object."""
    dirs = {
        "t1": tensor_dir(tmp, f"{key}-1", {"a": 6 * MIB, "b": 64 << 10}, seed=61),
        "t2": tensor_dir(tmp, f"{key}-2", {"c": 7 * MIB, "d": 1 * MIB}, seed=62),
        "t3": tensor_dir(tmp, f"{key}-3", {"e": 100 << 10}, seed=63),
        "t4": tensor_dir(tmp, f"{key}-4", {"f": 12 * MIB}, seed=64),
    }
    local = tmp / f"{key}-src.zip"
    for tag, d in dirs.items():
        cli(env, "pack", local, d, "--tag", tag, "-q")
    url = f"s3://{BUCKET}/{key}/model.zip"
    cli(env, "cp", local, url)
    cli(env, "rm", url, "t2", "-q")
    down = tmp / f"{key}-before.zip"
    cli(env, "cp", url, down)
    return url, down


def test_compact_composes_the_live_entries_only(s3, tmp):
    """`compact s3://...` of an archive with a removed tag and old central directories:
    the live runs of 5 MiB and more are copied by the store, the shorter ones read (ranged
    GETs of just their bytes, never a dead byte) and uploaded; no byte of a copied range is
    fetched but the local headers of entries followed by a gap (30 bytes and the name
    each); the result verifies, lists the same tags with the same files as a local
    `compact` of the same archive, keeps every stored tensor 64-byte aligned, and its dead
    bytes are the padding it reports (under 64 per gap); compacting it again writes
    nothing."""
    env, proxy = s3
    url, down = compaction_fixture(env, tmp, "compact")
    path = f"/{BUCKET}/compact/model.zip"
    old = down.read_bytes()
    live = []  # runs of adjacent live entries
    for s, e in sorted(ext for name, ext in entry_extents(old).items() if name not in COMMIT_WRITTEN):
        if live and live[-1][1] == s:
            live[-1] = (live[-1][0], e)
        else:
            live.append((s, e))
    assert not misaligned_tensors(old)

    before = len(proxy.log)
    out = json.loads(cli(env, "compact", url, "--json").stdout)
    reqs = requests_to(proxy, "/compact/model.zip", before)
    assert out["before_bytes"] == len(old) and out["after_bytes"] < len(old) - 8 * MIB
    uploads = [r for r in reqs if r["method"] == "PUT" and not r["copy"]]
    copies = [r for r in reqs if r["copy"]]
    assert out["bytes_uploaded"] == sum(r["sent"] for r in uploads)
    copied = []
    for r in copies:
        a, b = map(int, r["copy_range"].removeprefix("bytes=").split("-"))
        copied.append((a, b + 1))
    assert out["bytes_copied"] == sum(b - a for a, b in copied) >= 12 * MIB
    # Everything copied is live, but for the padding before a run (under 64 bytes).
    for a, b in copied:
        assert any(s - 64 < a and b <= e for s, e in live), (a, b, live)
    gets = [r for r in reqs if r["method"] == "GET"]
    bounded = []
    for r in gets:
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", r["range"] or "")
        if m:  # the open's tail read is a suffix range
            bounded.append((int(m.group(1)), int(m.group(2)) + 1))
    heads = [(a, b) for a, b in bounded if b - a <= 30 + 64]
    reread = [(a, b) for a, b in bounded if b - a > 30 + 64]
    assert len(heads) == out["headers_read"] > 0
    for a, b in bounded:
        # Never a dead byte.
        assert any(s <= a and b <= e for s, e in live), (a, b, live)
    for a, b in reread:
        # Never a byte the store copied.
        assert all(b <= ca or cb <= a for ca, cb in copied), (a, b, copied)
    assert out["bytes_reread"] == sum(b - a for a, b in reread) > 0
    assert 0 < out["bytes_reread"] < 6 * MIB
    assert out["requests"] == sum(1 for r in reqs if r["method"] in ("PUT", "POST")) + len(reread)
    assert out["previous_version"] and out["version"] != out["previous_version"]

    cli(env, "verify", url)
    tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
    assert tags == ["t1", "t3", "t4"]
    after = tmp / "compact-after.zip"
    cli(env, "cp", url, after)
    new = after.read_bytes()
    assert len(new) == out["after_bytes"]
    assert not misaligned_tensors(new)
    # The object's bytes: the entries, the padding between runs, the central directory.
    spans = sorted(entry_extents(new).values())
    gaps = spans[0][0] + sum(b[0] - a[1] for a, b in zip(spans, spans[1:]))
    assert gaps == out["padding_bytes"] < 64 * 4, (gaps, out["padding_bytes"])
    # What a local compaction of the same archive holds, file for file.
    cli(env, "compact", down, "-q")
    for tag in tags:
        for name, src in (("remote-c", after), ("local-c", down)):
            cli(env, "extract", src, "--tag", tag, "--out", tmp / name / tag)
    files = sorted(p.relative_to(tmp / "local-c") for p in (tmp / "local-c").rglob("*") if p.is_file())
    assert {"t1/a", "t1/b", "t3/e", "t4/f"} <= {str(f) for f in files}, files
    for rel in files:
        assert (tmp / "remote-c" / rel).read_bytes() == (tmp / "local-c" / rel).read_bytes(), rel
    assert raw(env, "HEAD", path)[1]["etag"] == out["version"]
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=compact/")
    assert b"<Upload>" not in listing, listing
    # Compacted: a second compaction finds no dead bytes and writes nothing.
    before = len(proxy.log)
    again = cli(env, "compact", url).stdout
    assert again.endswith("; no dead bytes, nothing written\n"), again
    again = json.loads(cli(env, "compact", url, "--json").stdout)
    assert again["before_bytes"] == again["after_bytes"] == out["after_bytes"] and "version" not in again
    assert not [r for r in requests_to(proxy, "/compact/model.zip", before) if r["method"] in ("PUT", "POST")]
    assert raw(env, "HEAD", path)[1]["etag"] == out["version"]


def test_a_compaction_racing_an_append_exactly_one_wins(s3, tmp):
    """`compact` and `pack` to one object, both opened before either commits (the proxy
    holds both commits until both arrive): one commits, the other exits 2 with "changed
    since it was opened ... nothing was written" in one line; the object verifies and
    holds exactly the winner's change; no upload is left."""
    env, proxy = s3
    url, down = compaction_fixture(env, tmp, "crace")
    size = len(down.read_bytes())
    new = tensor_dir(tmp, "crace-new", {"w": 1 * MIB}, seed=65)
    proxy.hold_commits, proxy.arrived = 2, 0
    try:
        with ThreadPoolExecutor(2) as pool:
            compact = pool.submit(cli, env, "compact", url, "--json", check=False)
            pack = pool.submit(cli, env, "pack", url, new, "--tag", "new", check=False)
            results = {"compact": compact.result(), "pack": pack.result()}
    finally:
        proxy.hold_commits = 0
    codes = sorted(r.returncode for r in results.values())
    assert codes == [0, 2], {k: (r.returncode, r.stderr) for k, r in results.items()}
    loser = next(r for r in results.values() if r.returncode == 2)
    said = loser.stderr.strip()
    assert len(said.splitlines()) == 1, said
    assert f"the archive at {url} changed since it was opened (version " in said, said
    assert "nothing was written" in said, said
    cli(env, "verify", url)
    tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
    status, headers, _ = raw(env, "HEAD", f"/{BUCKET}/crace/model.zip")
    if results["compact"].returncode == 0:
        assert tags == ["t1", "t3", "t4"]
        assert int(headers["content-length"]) == json.loads(results["compact"].stdout)["after_bytes"] < size
    else:
        assert tags == ["t1", "t3", "t4", "new"]
        assert int(headers["content-length"]) > size
    _, _, listing = raw(env, "GET", f"/{BUCKET}?uploads&prefix=crace/")
    assert b"<Upload>" not in listing, listing


def test_compact_of_a_bad_url_is_one_line_and_writes_nothing(s3, tmp):
    """An object that is not an archive, a bucket that does not exist, a store without
    the requests a compaction needs: one line, exit 2, nothing sent but reads."""
    env, proxy = s3
    assert raw(env, "PUT", f"/{BUCKET}/cbad/notzip.zip", b"hello" * 100)[0] == 200
    cases = {
        f"s3://{BUCKET}/cbad/notzip.zip": "zip",
        "s3://no-such-bucket/m.zip": "bucket",
        f"s3://{BUCKET}/cbad/missing.zip": "no object",
        "gs://bucket/m.zip": "not supported",
    }
    for url, word in cases.items():
        before = len(proxy.log)
        r = cli(env, "compact", url, check=False)
        said = r.stderr.strip()
        assert r.returncode == 2 and len(said.splitlines()) == 1, (url, said)
        assert said.startswith(f"modelzip: cannot compact {url}: ") and word in said.lower(), said
        with proxy.log_lock:
            assert not [x for x in proxy.log[before:] if x["method"] in ("PUT", "POST", "DELETE")]
    assert raw(env, "GET", f"/{BUCKET}/cbad/notzip.zip")[2] == b"hello" * 100


def test_python_compact_of_s3_and_local_equals_the_cli(s3, tmp, monkeypatch):
    """modelzip.compact(url) compacts the object where it lies, as `modelzip compact`
    does (the same entries, its costs reported); modelzip.compact(path) a local copy; an
    object that is not an archive raises, writing nothing."""
    import modelzip

    env, proxy = s3
    url, down = compaction_fixture(env, tmp, "pycompact")
    path = f"/{BUCKET}/pycompact/model.zip"
    python_env(env, monkeypatch)
    local = tmp / "pycompact-local.zip"
    local.write_bytes(down.read_bytes())
    r = modelzip.compact(url)
    assert r["after"] < r["before"] == down.stat().st_size, r
    # The store copied the long live runs; only the rest went up (not the whole archive).
    assert r["bytes_copied"] >= 12 * MIB and 0 < r["bytes_uploaded"] < r["after"] - 12 * MIB, r
    assert raw(env, "HEAD", path)[1]["etag"] == r["version"]
    lr = modelzip.compact(local)
    assert set(lr) == {"before", "after"} and lr["before"] == r["before"], lr
    assert lr["after"] == local.stat().st_size
    after = tmp / "pycompact-after.zip"
    cli(env, "cp", url, after)
    with modelzip.open(after) as a, modelzip.open(local) as b:
        assert a.tags == b.tags == ["t1", "t3", "t4"]
        for t in a.tags:
            assert list(a.tag(t)) == list(b.tag(t))
            for n in a.tag(t):
                assert a.tag(t)[n].tobytes() == b.tag(t)[n].tobytes(), (t, n)
    assert cli(env, "verify", url).returncode == 0
    # Nothing dead any more: a second compaction writes nothing.
    again = modelzip.compact(url)
    assert again["before"] == again["after"] == r["after"] and again["version"] is None, again
    assert raw(env, "PUT", f"/{BUCKET}/pycompact/notzip.zip", b"hello" * 100)[0] == 200
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.compact(f"s3://{BUCKET}/pycompact/notzip.zip")
    assert "zip" in str(e.value).lower(), e.value
    assert raw(env, "GET", f"/{BUCKET}/pycompact/notzip.zip")[2] == b"hello" * 100


# Tags derived from a tag of the s3:// archive itself (`quantize`, `cast`): the source read
# by ranges, the new tag a remote append.


def lodtensor_fp32_2d(values) -> bytes:
    """One Paddle LoDTensor record of a 2-D FP32 numpy array, no LoD."""
    rows, cols = values.shape
    desc = b"\x08\x05\x10" + varint(rows) + b"\x10" + varint(cols)
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + values.astype("<f4").tobytes()


def derived_fixture(env, tmp, key: str) -> tuple[str, Path, int]:
    """An archive in the bucket with a tag `other` (8 MiB, never read) and a tag `fp32`
    (a 6 MiB weight of rank 2, a 4 KiB bias of rank 1). Returns the URL, a local copy
    and the bytes of the fp32 tag's tensors."""
    import numpy as np

    rng = np.random.default_rng(71)
    other = tensor_dir(tmp, f"{key}-other", {"x": 8 * MIB}, seed=72)
    d = tmp / f"{key}-fp32"
    d.mkdir()
    w = rng.standard_normal((1024, 1536)).astype(np.float32)
    (d / "w").write_bytes(lodtensor_fp32_2d(w))
    (d / "b").write_bytes(lodtensor_fp32(rng.standard_normal(1024).astype("<f4").tobytes()))
    local = tmp / f"{key}-local.zip"
    cli(env, "pack", local, other, "--tag", "other", "-q")
    cli(env, "pack", local, d, "--tag", "fp32", "-q")
    url = f"s3://{BUCKET}/{key}/model.zip"
    cli(env, "cp", local, url)
    return url, local, sum(p.stat().st_size for p in d.iterdir())


def check_derived(env, proxy, tmp, key, url, local, source_bytes, args, new_tag):
    """Runs `modelzip ARGS` on the URL and on the local copy: the remote run reads the
    source tag's tensors and nothing of the other tag, uploads about the new tag's own
    bytes (its stored bytes + tables, < 1 MiB more), has the store copy the rest; the
    object verifies, lists the new tag last, and its files equal the local run's."""
    before = len(proxy.log)
    out = json.loads(cli(env, *args[:1], url, *args[1:], "--json").stdout)
    reqs = requests_to(proxy, f"/{key}/model.zip", before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    got = sum(r["received"] for r in reqs if r["method"] == "GET")
    assert out["tag"] == new_tag
    assert out["stored_bytes"] <= uploaded <= out["stored_bytes"] + 1 * MIB, (uploaded, out["stored_bytes"])
    # The report's costs are what went over the wire (counted by the proxy).
    assert out["bytes_uploaded"] == uploaded, (out, uploaded)
    assert out["bytes_copied"] > 0 and out["requests"] >= 3 and out["previous_version"], out
    assert any(r["copy"] for r in reqs)
    assert source_bytes <= got < source_bytes + 1 * MIB, (got, source_bytes)  # not `other`'s 8 MiB
    cli(env, "verify", url)
    tags = [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]
    assert tags == ["other", "fp32", new_tag]
    local_out = json.loads(cli(env, *args[:1], local, *args[1:], "--json").stdout)
    assert local_out["params"] == out["params"]
    down = tmp / f"{key}-down.zip"
    cli(env, "cp", url, down)
    for name, src in (("remote", down), ("local", local)):
        cli(env, "extract", src, "--tag", new_tag, "--out", tmp / f"{key}-{name}")
    files = sorted(p.relative_to(tmp / f"{key}-local") for p in (tmp / f"{key}-local").rglob("*") if p.is_file())
    assert len(files) >= 2
    for rel in files:
        assert (tmp / f"{key}-remote" / rel).read_bytes() == (tmp / f"{key}-local" / rel).read_bytes(), rel
    # The line says the costs too.
    again = list(args)
    again[again.index("--tag") + 1] = new_tag + "-text"
    line = cli(env, again[0], url, *again[1:]).stdout
    assert "bytes uploaded," in line and "copied by the store" in line, line
    return out


def test_quantize_appends_the_int8_tag_to_the_s3_archive(s3, tmp):
    """`quantize s3://... --from fp32 --tag int8`: the INT8 weight and its scales go up
    (about 1.5 MiB), the bias is shared, the rest is copied by the store."""
    env, proxy = s3
    url, local, source = derived_fixture(env, tmp, "quant")
    out = check_derived(env, proxy, tmp, "quant", url, local, source,
                        ["quantize", "--from", "fp32", "--tag", "int8"], "int8")
    assert out["changed"] == 1 and out["shared"] == 1


def test_cast_appends_the_fp16_tag_to_the_s3_archive(s3, tmp):
    """`cast s3://... --from fp32 --tag fp16 --dtype fp16`: the FP16 tensors go up (about
    3 MiB), the rest is copied by the store."""
    env, proxy = s3
    url, local, source = derived_fixture(env, tmp, "cast")
    out = check_derived(env, proxy, tmp, "cast", url, local, source,
                        ["cast", "--from", "fp32", "--tag", "fp16", "--dtype", "fp16"], "fp16")
    assert out["changed"] == 2


def safetensors_file(path: Path, tensors: dict) -> Path:
    """A .safetensors file of FP32 numpy arrays."""
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        b = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


def test_import_appends_a_tag_to_the_s3_archive_or_creates_it(s3, tmp):
    """`import s3://... --tag st model.safetensors`: only the imported tensors go up (no
    GET of the archive's data), the store copies the rest; the object verifies and holds
    what a local import of the same file gives. To a key with no object, the import
    creates it; `--rewrite` is refused before anything is sent."""
    import numpy as np

    env, proxy = s3
    rng = np.random.default_rng(81)
    new = rng.standard_normal((768, 1024)).astype(np.float32)  # 3 MiB
    st = safetensors_file(tmp / "model.safetensors", {"new.weight": new, "b": np.ones(16, np.float32)})
    local = tmp / "import-local.zip"
    cli(env, "pack", local, tensor_dir(tmp, "imp0", {"w": 6 * MIB}, seed=82), "--tag", "base", "-q")
    url = f"s3://{BUCKET}/import/model.zip"
    cli(env, "cp", local, url)
    before = len(proxy.log)
    out = json.loads(cli(env, "import", url, "--tag", "st", st, "--json").stdout)
    reqs = requests_to(proxy, "/import/model.zip", before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    got = sum(r["received"] for r in reqs if r["method"] == "GET")
    assert not out["created"] and out["tag"] == "st" and out["format"] == "safetensors"
    assert {p["name"]: p["dims"] for p in out["params"]} == {"new.weight": [768, 1024], "b": [16]}
    assert new.nbytes <= uploaded <= new.nbytes + 1 * MIB, uploaded
    assert out["bytes_uploaded"] == uploaded and out["bytes_copied"] > 0, (out, uploaded)
    assert got < 1 * MIB, got
    assert any(r["copy"] for r in reqs)
    cli(env, "verify", url)
    assert [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]] == ["base", "st"]
    cli(env, "import", local, "--tag", "st", st, "-q")
    down = tmp / "import-down.zip"
    cli(env, "cp", url, down)
    for name, src in (("imp-remote", down), ("imp-local", local)):
        cli(env, "extract", src, "--tag", "st", "--out", tmp / name)
    files = sorted(p.relative_to(tmp / "imp-local") for p in (tmp / "imp-local").rglob("*") if p.is_file())
    assert len(files) >= 2
    for rel in files:
        assert (tmp / "imp-remote" / rel).read_bytes() == (tmp / "imp-local" / rel).read_bytes(), rel

    fresh = f"s3://{BUCKET}/import/new.zip"
    out = json.loads(cli(env, "import", fresh, "--tag", "first", st, "--json").stdout)
    assert out["created"]
    cli(env, "verify", fresh)
    before = len(proxy.log)
    r = cli(env, "import", fresh, "--tag", "again", st, "--rewrite", check=False)
    said = r.stderr.strip()
    assert r.returncode == 2 and len(said.splitlines()) == 1 and "rewrite" in said, said
    with proxy.log_lock:
        assert not [x for x in proxy.log[before:] if x["method"] in ("PUT", "POST")]


def test_import_paddle_and_convert_change_the_s3_archive_where_it_lies(s3, tmp):
    """`import-paddle s3://...` adds a Paddle model as a tag by a remote append;
    `convert s3://... --to flatbuffers` then uploads the new graph.fb and the tag's
    tables only (< 1 MiB; the store copies the rest), and the object's graph.fb and
    tags equal those of the same commands run on a local copy; converting again writes
    nothing."""
    import io
    import zipfile

    env, proxy = s3
    model, params = PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams"
    local = tmp / "conv-local.zip"
    cli(env, "pack", local, tensor_dir(tmp, "conv0", {"w": 6 * MIB}, seed=91), "--tag", "big", "-q")
    url = f"s3://{BUCKET}/convert/model.zip"
    cli(env, "cp", local, url)
    out = json.loads(cli(env, "import-paddle", url, "--tag", "mlp", model, params, "--json").stdout)
    assert not out["created"] and out["tag"] == "mlp"
    cli(env, "import-paddle", local, "--tag", "mlp", model, params, "-q")
    before = len(proxy.log)
    out = json.loads(cli(env, "convert", url, "--tag", "MLP", "--to", "flatbuffers", "--json").stdout)
    reqs = requests_to(proxy, "/convert/model.zip", before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    assert out["changed"] and out["tag"] == "mlp" and out["to"] == "flatbuffers", out
    assert 0 < uploaded < 1 * MIB, uploaded
    assert out["bytes_uploaded"] == uploaded and out["bytes_copied"] > 0, (out, uploaded)
    assert any(r["copy"] for r in reqs)
    cli(env, "verify", url)
    cli(env, "convert", local, "--tag", "mlp", "--to", "flatbuffers", "-q")
    down = tmp / "conv-down.zip"
    cli(env, "cp", url, down)
    with zipfile.ZipFile(down) as r, zipfile.ZipFile(local) as l:
        assert r.read("mlp/graph.fb") == l.read("mlp/graph.fb")
        sums = [dict(line.split("  ")[::-1] for line in z.read("mlp/sha256sums.txt").decode().splitlines()) for z in (r, l)]
        assert sums[0]["graph.fb"] == sums[1]["graph.fb"] and "graph.pdmodel" not in sums[0], sums
        assert sums[0].keys() == sums[1].keys()
        assert "mlp/graph.pdmodel" not in r.namelist()
    tags = json.loads(cli(env, "tags", url, "--json").stdout)["tags"]
    assert [t["name"] for t in tags] == ["big", "mlp"]
    before = len(proxy.log)
    again = json.loads(cli(env, "convert", url, "--tag", "mlp", "--to", "flatbuffers", "--json").stdout)
    assert not again["changed"]
    with proxy.log_lock:
        assert not [x for x in proxy.log[before:] if x["method"] in ("PUT", "POST")]


def test_python_quantize_appends_to_s3(s3, tmp, monkeypatch):
    """`modelzip.quantize("s3://...", ...)` from Python: the INT8 tag lands by a remote
    append (about its own bytes uploaded), verifies, and reads back as the CLI's local
    run of the same quantization; a `gs://` archive is still refused."""
    import numpy as np

    import modelzip

    env, proxy = s3
    python_env(env, monkeypatch)
    url, local, _ = derived_fixture(env, tmp, "pyquant")
    before = len(proxy.log)
    report = modelzip.quantize(url, "fp32", "int8", per_channel=False)
    reqs = requests_to(proxy, "/pyquant/model.zip", before)
    uploaded = sum(r["sent"] for r in reqs if r["method"] == "PUT" and not r["copy"])
    assert report["tag"] == "int8"
    assert 1536 * 1024 <= uploaded <= 1536 * 1024 + 1 * MIB, uploaded
    assert report["bytes_uploaded"] == uploaded and report["bytes_copied"] > 0, report
    cli(env, "verify", url)
    cli(env, "quantize", local, "--from", "fp32", "--tag", "int8", "-q")
    with modelzip.open(url) as remote, modelzip.open(local) as here:
        assert remote.tags == ["other", "fp32", "int8"]
        for name in ("w", "w@scale", "b"):
            np.testing.assert_array_equal(remote["int8"][name], here["int8"][name])
    with pytest.raises(modelzip.ModelzipError, match="upload"):
        modelzip.quantize("gs://bucket/m.zip", "fp32", "int8")


def test_the_rust_appender_appends_to_an_s3_url(s3, tmp):
    """examples/append_to_s3.rs (built by `cargo test`): `Appender::open("s3://...")`
    appends remotely, the old bytes copied by the store and no data read."""
    env, proxy = s3
    example = Path(__file__).resolve().parents[2] / "target" / "debug" / "examples" / "append_to_s3"
    if not example.is_file():
        pytest.fail(f"{example} is missing: `cargo test` (or `cargo build --examples`) builds it")
    d1 = tensor_dir(tmp, "t1", {"a": 8 * MIB}, seed=5)
    local = tmp / "local.zip"
    cli(env, "pack", local, d1, "--tag", "t1", "-q")
    url = f"s3://{BUCKET}/appender/model.zip"
    cli(env, "cp", local, url)
    before = len(proxy.log)
    r = subprocess.run([str(example), url, "t2"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["t1", "t2"], r.stdout
    reqs = requests_to(proxy, "/appender/model.zip", before)
    assert any(q["copy"] for q in reqs), reqs
    assert sum(q["received"] for q in reqs if q["method"] == "GET") < MIB
    assert sum(q["sent"] for q in reqs if q["method"] == "PUT" and not q["copy"]) < MIB
    cli(env, "verify", url)
    # Other URLs are refused before any request.
    r = subprocess.run([str(example), "gs://b/m.zip", "t2"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "is not supported" in r.stderr, r.stderr
