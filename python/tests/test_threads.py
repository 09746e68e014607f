"""Threads: the GIL is released while reading (a remote archive's requests included),
readers share one Archive, and a second writer meets the write lock as documented."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import numpy as np
import pytest

import modelzip


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one file by single byte ranges (what modelzip's HTTP reader asks for)."""

    data = b""

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        data = self.data
        spec = self.headers.get("Range", "")
        if not spec.startswith("bytes="):
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", '"v1"')
            self.end_headers()
            self.wfile.write(data)
            return
        a, b = spec[len("bytes="):].split("-")
        if a == "":
            start, end = max(0, len(data) - int(b)), len(data)
        else:
            start, end = int(a), len(data) if b == "" else min(int(b) + 1, len(data))
        self.send_response(206)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"v1"')
        self.send_header("Last-Modified", "Wed, 25 Nov 2026 12:00:00 GMT")
        self.end_headers()
        self.wfile.write(data[start:end])

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp: Path):
    """An archive with a tag of params, updater state and metadata, served over HTTP
    by a thread of this interpreter."""
    path = tmp / "m.zip"
    # 1 MiB tensors: larger than what opening fetches from the end of the object
    w = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
    params = {"w": w, "b": np.ones(4, np.int64)}
    modelzip.save(path, "t", params, updater={"w": [w + 1]}, metadata={"lr": 0.5})
    handler = type("Handler", (RangeHandler,), {"data": path.read_bytes()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/m.zip", params
    finally:
        server.shutdown()
        server.server_close()


def test_reads_release_the_gil_so_a_python_thread_can_serve_the_archive(served):
    # The server is a thread of this interpreter: every request a read makes while
    # holding the GIL would wait forever for it. Each read below must answer.
    url, params = served
    with modelzip.open(url) as ar:
        tag = ar["T"]
        assert tag.keys() == ["w", "b"]
        w = tag["w"]
        np.testing.assert_array_equal(w, params["w"])
        assert w.flags.writeable  # an owned copy (docs/PYTHON.md, Object storage)
        got = tag.to_dict()
        np.testing.assert_array_equal(got["b"], params["b"])
        np.testing.assert_array_equal(tag.updater("w")[0], params["w"] + 1)
        assert tag.lod("w") == []
        assert tag.metadata["lr"] == 0.5
        assert tag.graph_bytes() is None


def test_latest_releases_the_gil_while_it_fetches_the_tag(tmp: Path):
    # latest() of a remote archive reads the newest tag's tables from the server thread,
    # which could not answer if the GIL were held meanwhile (the read then timed out after
    # minutes). 3,000 parameters: a central directory past what the open fetches from the
    # end of the object, so the tables are a request of their own.
    path = tmp / "many.zip"
    modelzip.save(path, "t", {f"p{i}": np.full(1, i, np.float32) for i in range(3000)})
    requests = []

    class Counting(RangeHandler):
        data = path.read_bytes()

        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            requests.append(self.headers.get("Range"))
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with modelzip.open(f"http://127.0.0.1:{server.server_address[1]}/many.zip") as ar:
            opened = len(requests)
            t = ar.latest()
            assert len(requests) > opened  # the tables were fetched by latest()
            assert t.name == "t" and len(t) == 3000 and t["p2999"][0] == 2999
    finally:
        server.shutdown()
        server.server_close()


# Run in a child process: a call that blocks holding the GIL would hang it (the thread
# that would unblock it is a Python thread), and the timeout turns that into a failure.
GIL_WAITS = r"""
import fcntl, gc, sys, threading, time
import numpy as np, modelzip

path, case = sys.argv[1], sys.argv[2]
ck = modelzip.Checkpointer(path, wait=True)
ck.save(0, {"w": np.zeros(4, np.float32)})
lock = open(path + ".lock", "a")  # the archive's write lock, held here
held = threading.Event()


def hold_then_release():
    fcntl.flock(lock, fcntl.LOCK_EX)
    held.set()
    time.sleep(0.5)  # long enough for the main thread to block on the writer
    fcntl.flock(lock, fcntl.LOCK_UN)


releaser = threading.Thread(target=hold_then_release)
releaser.start()
held.wait()
if case == "removed_on_open":
    # A save, holding the checkpointer, waits for the lock; the getter waits for the save.
    saver = threading.Thread(target=ck.save, args=(1, {"w": np.ones(4, np.float32)}))
    saver.start()
    time.sleep(0.2)
    assert ck._native.removed_on_open == []
    saver.join()
else:
    # Dropping the checkpointer joins its asynchronous save, which waits for the lock.
    h = ck.save_async(1, {"w": np.ones(4, np.float32)})
    del ck
    gc.collect()
    assert h.wait()["tag"] == "step-000000001"
releaser.join()
print("ok")
"""


@pytest.mark.parametrize("case", ["removed_on_open", "drop"])
def test_waits_for_the_checkpointer_release_the_gil(tmp, case):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", GIL_WAITS, str(tmp / "run.zip"), case],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_threads_share_one_archive_while_another_closes_it(tmp):
    path = tmp / "m.zip"
    rng = np.random.default_rng(3)
    params = {f"p{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(16)}
    modelzip.save(path, "a", params)
    ar = modelzip.open(path)
    tag = ar["a"]
    start = threading.Barrier(5)
    errors: list[BaseException] = []
    kept: list[dict] = []

    def reader() -> None:
        try:
            start.wait()
            for _ in range(20):
                got = tag.to_dict()
                for name, want in params.items():
                    assert np.array_equal(got[name], want), name
                    assert np.array_equal(tag[name], want), name
            kept.append(got)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for th in threads:
        th.start()
    start.wait()
    ar.close()  # the Tag and the arrays keep their own hold on the map
    for th in threads:
        th.join()
    assert errors == []
    assert len(kept) == 4 and all(np.array_equal(k["p3"], params["p3"]) for k in kept)


@pytest.mark.parametrize("wait", [False, True])
def test_concurrent_saves_from_threads_each_commit_or_report_locked(tmp, wait):
    path = tmp / "m.zip"
    modelzip.save(path, "base", {"w": np.zeros(4, np.float32)})
    start = threading.Barrier(4)
    saved: list[str] = []
    locked: list[str] = []
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        tag = f"t{i}"
        big = np.full(1 << 20, i, np.float32)  # long enough for the saves to overlap
        start.wait()
        try:
            modelzip.save(path, tag, {"w": big}, wait=wait)
            saved.append(tag)
        except modelzip.ModelzipError as e:
            if e.kind != "locked":
                errors.append(e)
            locked.append(tag)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    if wait:
        assert locked == []
    with modelzip.open(path) as ar:
        assert sorted(ar.tags) == sorted(["base", *saved])
        for tag in saved:
            assert np.all(ar[tag]["w"] == int(tag[1:]))
        assert ar.verify() == []


def test_a_save_that_waited_appends_to_an_archive_created_meanwhile(tmp_path):
    """`save(wait=True)` of a new archive that waits for the write lock, while the lock's
    holder creates the archive: the waiting save appends its tag, the other's survives
    (it was replaced by a new archive of one tag)."""
    import fcntl
    import os
    import time

    path = tmp_path / "m.zip"
    side = tmp_path / "side.zip"
    modelzip.save(side, "a", {"w": np.ones(4, np.float32)})
    lock = open(str(path) + ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    errors = []

    def save() -> None:
        try:
            modelzip.save(path, "b", {"w": np.zeros(4, np.float32)}, wait=True)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=save)
    t.start()
    # Past its check that m.zip does not exist: blocked on the lock (/proc/locks lists a
    # waiter as "N: -> FLOCK ...").
    deadline = time.monotonic() + 30
    while not any(" -> FLOCK " in line and f" {os.getpid()} " in line
                  for line in open("/proc/locks")):
        assert time.monotonic() < deadline, "the save never waited for the lock"
        assert t.is_alive(), errors
        time.sleep(0.02)
    os.rename(side, path)
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()
    t.join(60)
    assert not errors, errors
    assert modelzip.open(path).tags == ["a", "b"]
