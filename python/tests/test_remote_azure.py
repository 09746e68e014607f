"""Archives in Azure Blob Storage (`az://container/key`, docs/REMOTE.md) against Azurite,
Microsoft's own emulator, on 127.0.0.1: reads by ranges (Azure serves no suffix range,
so the open asks the size first), and remote appends, removals and compaction put
together from blocks the store copies from the old version (`Put Block From URL`,
conditional on its ETag) and blocks uploaded from here, committed with `Put Block List`
only if the blob is still the version read (`If-Match`; `If-None-Match: *` for a new
one). Azurite enforces those conditions itself.

Azurite is installed by ./test.sh with npm into target/azurite ($MODELZIP_AZURITE names
another `azurite-blob`); it is started and stopped here. The container is made, and a
racing writer simulated, with Microsoft's Python SDK (azure-storage-blob)."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO, cli_env, local_server
from test_remote_append_s3 import tensor_dir

MIB = 1 << 20
CONTAINER = "models"
# Azurite's well-known development account (documented by Microsoft; not a secret).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_bin() -> Path:
    path = Path(
        os.environ.get("MODELZIP_AZURITE")
        or REPO / "target" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    )
    if not path.exists():
        pytest.fail(f"{path} is missing: ./test.sh installs Azurite with npm (or set MODELZIP_AZURITE)")
    return path


@pytest.fixture(scope="module")
def az(tmp_path_factory):
    """Azurite's blob service on a free port of 127.0.0.1 with one container; yields the
    environment that points the CLI (and this process's modelzip) at it, and a
    ContainerClient of the SDK."""
    from azure.storage.blob import BlobServiceClient

    data = tmp_path_factory.mktemp("azurite")
    argv = lambda port: [  # noqa: E731
        azurite_bin(), "--blobHost", "127.0.0.1", "--blobPort", port,
        "--location", data, "--silent", "--skipApiVersionCheck",
    ]
    with local_server("azurite", argv) as port:
        endpoint = f"http://127.0.0.1:{port}"
        service = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={endpoint}/{ACCOUNT};"
        )
        container = service.create_container(CONTAINER)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "AZURITE_"))}
        env.update(
            AZURE_STORAGE_USE_EMULATOR="true",
            AZURITE_BLOB_STORAGE_URL=endpoint,
        )
        yield env, container


@pytest.fixture
def tmp():
    d = Path(tempfile.mkdtemp(prefix="mz-az-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def cli(env, *args, check=True):
    return cli_env(env, *args, check=check)


def tags_of(env, url) -> list[str]:
    return [t["name"] for t in json.loads(cli(env, "tags", url, "--json").stdout)["tags"]]


def test_a_blob_archive_reads_by_ranges_and_downloads_identical(az, tmp):
    """Azure answers no suffix range: `tags`, `show`, `verify` and `cp` down work all the
    same (a HEAD, then ranges conditional on its ETag)."""
    env, _ = az
    d = tensor_dir(tmp, "read", {"w": 3 * MIB, "v": 4096}, seed=1)
    local = tmp / "m.zip"
    cli(env, "pack", local, d, "--tag", "base", "-q")
    url = f"az://{CONTAINER}/read/m.zip"
    cli(env, "cp", local, url)
    assert tags_of(env, url) == ["base"]
    cli(env, "verify", url)
    back = tmp / "back.zip"
    cli(env, "cp", url, back)
    assert back.read_bytes() == local.read_bytes()


def test_append_copies_the_old_bytes_in_the_store_and_uploads_the_new(az, tmp):
    """`pack az://...` onto a 12 MiB archive: the old bytes are copied by the store (none
    downloaded or uploaded), the new tag's bytes and tables go up, the blob verifies and
    lists both tags; a local copy of it equals an archive appended to locally tag by tag
    in what it holds."""
    env, container = az
    url = f"az://{CONTAINER}/append/m.zip"
    base = tensor_dir(tmp, "base", {"w": 8 * MIB, "u": 4 * MIB}, seed=2)
    created = json.loads(cli(env, "pack", url, base, "--tag", "base", "--json").stdout)
    assert created["created"] and created["bytes_copied"] == 0
    size = container.get_blob_client("append/m.zip").get_blob_properties().size
    new = tensor_dir(tmp, "new", {"x": 1 * MIB}, seed=3)
    r = json.loads(cli(env, "pack", url, new, "--tag", "new", "--json").stdout)
    assert not r["created"] and r["previous_version"] == created["version"]
    assert r["bytes_copied"] >= 12 * MIB and r["bytes_reread"] == 0
    assert 1 * MIB < r["bytes_uploaded"] <= 1 * MIB + 64 * 1024, r
    assert r["bytes_copied"] < size
    assert r["requests"] == 3, r  # copy, upload, commit
    assert tags_of(env, url) == ["base", "new"]
    cli(env, "verify", url)
    props = container.get_blob_client("append/m.zip").get_blob_properties()
    assert props.etag == r["version"]


def test_python_save_creates_then_appends_sharing_equal_arrays(az, tmp, monkeypatch):
    import numpy as np

    import modelzip

    env, _ = az
    for k, v in env.items():
        if k.startswith(("AZURE_", "AZURITE_")):
            monkeypatch.setenv(k, v)
    url = f"az://{CONTAINER}/python/ck.zip"
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 1536)).astype(np.float32)  # 6 MiB
    first = modelzip.save(url, "step-1", {"w": w})
    assert first["created"]
    new = rng.standard_normal((256, 256)).astype(np.float32)
    second = modelzip.save(url, "step-2", {"w": w, "new": new})
    assert second["shared"] == 1 and second["previous_version"] == first["version"]
    assert second["bytes_uploaded"] <= new.nbytes + 64 * 1024
    with modelzip.open(url) as ar:
        assert ar.tags == ["step-1", "step-2"]
        np.testing.assert_array_equal(ar["step-2"]["w"], w)
        np.testing.assert_array_equal(ar["step-2"]["new"], new)


def test_racing_appends_exactly_one_wins_each_time(az, tmp):
    """Two `pack`s of different tags to one blob at once: whenever both opened the same
    version, one commits and the other exits 2 with "changed since it was opened ...
    nothing was written" (Azurite refuses its `Put Block List` or its copies); the blob
    always verifies and holds the old tags and the winners'. Repeated until a race was
    seen (each round's copies of 16 MiB take long enough for both to open first)."""
    env, _ = az
    url = f"az://{CONTAINER}/race/m.zip"
    cli(env, "pack", url, tensor_dir(tmp, "r0", {"w": 16 * MIB}, seed=4), "--tag", "base", "-q")
    expected = ["base"]
    conflicts = 0
    for round_ in range(6):
        dirs = [tensor_dir(tmp, f"r{round_}-{i}", {"v": 64 << 10}, seed=10 * round_ + i) for i in (0, 1)]
        names = [f"t{round_}-{i}" for i in (0, 1)]
        with ThreadPoolExecutor(2) as pool:
            results = list(
                pool.map(lambda i: cli(env, "pack", url, dirs[i], "--tag", names[i], check=False), [0, 1])
            )
        for name, r in zip(names, results):
            if r.returncode == 0:
                expected.append(name)
            else:
                assert r.returncode == 2, r.stderr
                said = r.stderr.strip()
                assert len(said.splitlines()) == 1, said
                assert f"the archive at {url} changed since it was opened (version " in said, said
                assert "nothing was written" in said, said
                conflicts += 1
        got = tags_of(env, url)
        assert sorted(got) == sorted(expected), (got, expected)
        cli(env, "verify", url)
        if conflicts and round_ >= 1:
            break
    assert conflicts >= 1, "no two appends ever raced"


def test_rm_prune_and_compact_on_a_blob(az, tmp):
    env, container = az
    url = f"az://{CONTAINER}/maint/m.zip"
    for i in range(3):
        cli(env, "pack", url, tensor_dir(tmp, f"m{i}", {"w": 6 * MIB}, seed=20 + i), "--tag", f"s{i}", "-q")
    r = cli(env, "rm", url, "s0")
    assert "copied by the store" in r.stdout, r.stdout
    assert tags_of(env, url) == ["s1", "s2"]
    cli(env, "verify", url)
    before = container.get_blob_client("maint/m.zip").get_blob_properties().size
    cli(env, "compact", url)
    after = container.get_blob_client("maint/m.zip").get_blob_properties().size
    assert after < before - 5 * MIB, (before, after)
    assert tags_of(env, url) == ["s1", "s2"]
    cli(env, "verify", url)


def test_killed_appends_leave_the_old_or_the_new_version(az, tmp):
    """SIGKILL of `pack az://...` at random instants (12 runs): the blob always verifies
    and lists the old tags, or the old ones and the new tag."""
    env, _ = az
    url = f"az://{CONTAINER}/kill/m.zip"
    cli(env, "pack", url, tensor_dir(tmp, "k", {"w": 12 * MIB}, seed=30), "--tag", "base", "-q")
    exe = os.environ.get("MODELZIP_BIN") or str(REPO / "target" / "debug" / "modelzip")
    rng = random.Random(7)
    expected = ["base"]
    for i in range(12):
        d = tensor_dir(tmp, f"k{i}", {"v": 2 * MIB}, seed=40 + i)
        p = subprocess.Popen([exe, "pack", url, str(d), "--tag", f"k{i}", "-q"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        got = tags_of(env, url)
        assert got in (expected, expected + [f"k{i}"]), (got, expected)
        expected = got
        cli(env, "verify", url)


def test_bad_inputs_are_one_line_errors_and_write_nothing(az, tmp):
    env, container = az
    container.get_blob_client("bad/notzip.zip").upload_blob(b"hello" * 100)
    d = tensor_dir(tmp, "bad", {"w": 4096}, seed=8)
    for url, word in {
        f"az://{CONTAINER}/bad/notzip.zip": "zip",
        "az://no-such-container/m.zip": "container",
    }.items():
        r = cli(env, "pack", url, d, "--tag", "t", check=False)
        assert r.returncode == 2, (url, r.stderr)
        said = r.stderr.strip()
        assert len(said.splitlines()) == 1 and word in said.lower(), said
    assert container.get_blob_client("bad/notzip.zip").download_blob().readall() == b"hello" * 100


def test_a_checkpointer_saves_into_a_blob_and_keeps_by_policy(az, tmp, monkeypatch):
    """`modelzip.Checkpointer("az://...", keep_last=2)`: four saves leave the last two,
    each later save uploading about its own new bytes (plus the frozen array once it is
    re-homed from a removed tag), and `latest` restores equal arrays."""
    import numpy as np

    import modelzip

    env, _ = az
    for k, v in env.items():
        if k.startswith(("AZURE_", "AZURITE_")):
            monkeypatch.setenv(k, v)
    url = f"az://{CONTAINER}/ckpt/run.zip"
    ck = modelzip.Checkpointer(url, keep_last=2)
    rng = np.random.default_rng(9)
    frozen = rng.standard_normal((1024, 1536)).astype(np.float32)  # 6 MiB, never changes
    removed = []
    for step in (1, 2, 3, 4):
        w = rng.standard_normal((256, 1024)).astype(np.float32)  # 1 MiB new per save
        report = ck.save(step, {"frozen": frozen, "w": w})
        removed += report["removed"]
        if step > 1:
            # The new array and tables; from step 3 on retention removes the oldest
            # tag, and the frozen array it owned is re-homed into a kept tag (read and
            # uploaded once, as docs/REMOTE.md says of remote removals).
            bound = w.nbytes + 1 * MIB + (frozen.nbytes if step > 2 else 0)
            assert report["bytes_uploaded"] < bound, (step, report)
            assert report["bytes_copied"] >= w.nbytes, (step, report)
    assert ck.checkpoints() == ["step-000000003", "step-000000004"]
    assert removed == ["step-000000001", "step-000000002"]
    latest = ck.latest()
    assert latest.step == 4
    np.testing.assert_array_equal(latest.params["frozen"], frozen)
    np.testing.assert_array_equal(latest.params["w"], w)
    cli(env, "verify", url)


def test_four_processes_write_one_tag_of_a_blob_archive(az, tmp, monkeypatch):
    """A sharded save (docs/SHARDED.md, "Object stores") into an `az://` archive: 4
    spawned ranks write row shards of 20 tensors and their Adam moments; rank 0 composes
    the new version from the old blob and the ranks' staging blobs, copied by the store;
    the tag equals a single-process save of the same arrays, and no staging blob is left."""
    import multiprocessing

    import numpy as np

    import modelzip
    from test_sharded import collect, full, moments, names, single_save, start

    env, container = az
    for k, v in env.items():
        if k.startswith(("AZURE_", "AZURITE_")):
            monkeypatch.setenv(k, v)
    key = "sharded/m.zip"
    url = f"az://{CONTAINER}/{key}"
    local = tmp / "single.zip"
    single_save(local, "single", seed=1)
    cli(env, "cp", local, url)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    got = collect(out, start(ctx, out, url, "sharded", range(4), 4))
    for r in got.values():
        assert isinstance(r, dict), r
    assert got[0]["version"] == container.get_blob_client(key).get_blob_properties().etag
    with modelzip.open(url) as ar:
        assert ar.tags == ["single", "sharded"]
        t = ar.tag("sharded")
        for n in names():
            assert np.array_equal(t[n], full(n, 1)), n
            for got_m, want in zip(t.updater(n), moments(n, 1)):
                assert np.array_equal(got_m, want), n
    cli(env, "verify", url)
    assert [b.name for b in container.list_blobs(name_starts_with="sharded/")] == [key]


class AnswerDropper(http.server.ThreadingHTTPServer):
    """Forwards every request to Azurite; drops the answers of the next
    `lose_block_lists` `Put Block List`s (forwarded: the blob is committed, its writer
    never hears it), answers every block list 500 while `fail_block_lists` (forwarding
    the first `forward_failed` of them) and records each block list's status."""

    daemon_threads = True

    def __init__(self, upstream_port: int):
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream_port = upstream_port
        self.lose_block_lists = 0
        self.fail_block_lists = False
        self.forward_failed = 0
        self.block_lists: list[int] = []
        self.lock = threading.Lock()


@contextlib.contextmanager
def answer_dropper(env: dict):
    """An AnswerDropper in front of the test's Azurite, serving until the block ends;
    yields it and the environment that sends the CLI through it."""
    proxy = AnswerDropper(int(env["AZURITE_BLOB_STORAGE_URL"].rsplit(":", 1)[1]))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield proxy, {**env, "AZURITE_BLOB_STORAGE_URL": f"http://127.0.0.1:{proxy.server_address[1]}"}
    finally:
        proxy.shutdown()
        proxy.server_close()


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        server: AnswerDropper = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}

        def upstream():
            c = http.client.HTTPConnection("127.0.0.1", server.upstream_port, timeout=120)
            c.request(self.command, self.path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            c.close()
            return r, data

        if self.command == "PUT" and "comp=blocklist" in self.path and server.fail_block_lists:
            with server.lock:
                forward = server.forward_failed > 0
                server.forward_failed -= forward
            if forward:
                upstream()
            with server.lock:
                server.block_lists.append(500)
            data = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>InternalError</Code>'
                    b"<Message>Server encountered an internal error.</Message></Error>")
            self.send_response(500, "Internal Server Error")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        r, data = upstream()
        if self.command == "PUT" and "comp=blocklist" in self.path:
            with server.lock:
                server.block_lists.append(r.status)
                drop = server.lose_block_lists > 0
                server.lose_block_lists -= drop
            if drop:
                self.close_connection = True
                return
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                self.send_header(k, v)
        # A HEAD's length is the blob's, as the store said it (a HEAD has no body).
        head = self.command == "HEAD"
        self.send_header("Content-Length", r.getheader("content-length", "0") if head else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward


def test_a_block_list_whose_answer_is_lost_is_found_committed(az, tmp):
    """Azurite commits a `Put Block List` whose answer never reaches the writer: the
    retry is refused (the blob is no longer the version opened), the writer finds its own
    block ids in the blob's committed list and reports the append done with the new
    version (not a lost race, nothing written twice). The blob holds both tags and
    verifies."""
    env, container = az
    with answer_dropper(env) as (proxy, penv):
        url = f"az://{CONTAINER}/lost/m.zip"
        first = json.loads(
            cli(penv, "pack", url, tensor_dir(tmp, "l1", {"w": 4096}, seed=31), "--tag", "a", "--json").stdout
        )
        proxy.lose_block_lists = 1
        before = len(proxy.block_lists)
        r = json.loads(
            cli(penv, "pack", url, tensor_dir(tmp, "l2", {"w": 4096}, seed=32), "--tag", "b", "--json").stdout
        )
        now = container.get_blob_client("lost/m.zip").get_blob_properties().etag
        assert r["version"] == now != first["version"], (r, now, first)
        assert proxy.block_lists[before:] == [201, 412], proxy.block_lists
        assert tags_of(env, url) == ["a", "b"]
        cli(env, "verify", url)


@pytest.mark.parametrize("carried_out", [True, False])
def test_a_block_list_answered_500_throughout_is_settled_or_said_unknown(az, tmp, carried_out):
    """Every `Put Block List` answered 500 (retried, then given up). When the store
    carried out the first, the writer finds its block ids in the blob's committed list
    and reports the append done with the new version. When it carried out none, nothing
    fences a block list the store may still carry out (Azure has no upload to abort), so
    the append says, in one line (exit 2), that the outcome is not known, with the
    blob's version when opened and now."""
    env, container = az
    with answer_dropper(env) as (proxy, penv):
        url = f"az://{CONTAINER}/failing-{carried_out}/m.zip"
        first = json.loads(
            cli(penv, "pack", url, tensor_dir(tmp, "f1", {"w": 4096}, seed=33), "--tag", "a", "--json").stdout
        )
        proxy.fail_block_lists, proxy.forward_failed = True, int(carried_out)
        before = len(proxy.block_lists)
        r = cli(penv, "pack", url, tensor_dir(tmp, "f2", {"w": 4096}, seed=34), "--tag", "b", "--json",
                check=False)
        proxy.fail_block_lists = False
        assert proxy.block_lists[before:] == [500] * 4, proxy.block_lists  # a try, 3 retries
        now = container.get_blob_client(f"failing-{carried_out}/m.zip").get_blob_properties().etag
        if carried_out:
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["version"] == now != first["version"], (r.stdout, now)
            assert tags_of(env, url) == ["a", "b"]
            cli(env, "verify", url)
        else:
            said = r.stderr.strip()
            assert r.returncode == 2 and len(said.splitlines()) == 1, said
            assert "500" in said and "is not known" in said and first["version"] in said, said
            assert now == first["version"] and tags_of(env, url) == ["a"]
