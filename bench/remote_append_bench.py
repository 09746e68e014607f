#!/usr/bin/env python3
"""Remote appends against a real S3 server on loopback (docs/BENCHMARKS.md, "Remote
appends to S3"):

    target/venv/bin/python bench/remote_append_bench.py              # 1 GiB + 10 MiB
    target/venv/bin/python bench/remote_append_bench.py --gib 0.1    # a quick check

Starts moto_server on 127.0.0.1 and, in this process, the counting proxy of
python/tests/test_remote_append_s3.py in front of it (it also enforces If-Match on the
commit, which moto does not). Builds an archive of about --gib GiB (tensors of 10 MiB,
distinct random bytes) under --tmp with the CLI (--cli, default target/release/modelzip),
uploads it with `modelzip cp`, then, through the proxy, appends a tag of one new 10 MiB
tensor with `modelzip pack s3://... --tag new DIR` and uploads the same archive with the
tag added locally with `modelzip cp --force` (what a training loop does without remote
appends). Prints a Markdown table of requests, bytes uploaded, bytes read, bytes copied by
the store and wall time of each, and the machine's load average; deletes what it made.
Past 2 GiB (--mapped-above) moto runs through bench/moto_large.py, which serves objects
from memory maps instead of reading them whole into memory for every request (moto's own
way would need 20-30 GiB of memory for one 10 GiB request); the proxy counts the same.
The checks: the appended object lists both tags and `modelzip verify` passes on it; the
append uploads at most new + 6 MiB (the issue's bound).
"""
import argparse
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python" / "tests"))

from test_remote_append_s3 import AUTH, Proxy  # noqa: E402

BUCKET = "bench"
MIB = 1 << 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def lodtensor_u8(data):
    """One LoDTensor record: UINT8 (type 20), dims [len], no LoD."""
    desc = b"\x08\x14\x10" + varint(len(data))
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + data


def run(cli, env, *args):
    t = time.monotonic()
    p = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"modelzip {args} failed: {p.stderr}")
    return p.stdout, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    ap.add_argument("--cli", default=str(REPO / "target" / "release" / "modelzip"))
    ap.add_argument("--mapped-above", type=float, default=2.0,
                    help="archives larger than this many GiB run moto through "
                    "bench/moto_large.py, which keeps objects in memory maps (default 2)")
    a = ap.parse_args()
    cli = Path(a.cli)
    work = Path(tempfile.mkdtemp(prefix="mz-append-bench-", dir=a.tmp))
    port = free_port()
    server = ["-m", "moto.server"]
    if a.gib > a.mapped_above:
        server = [str(REPO / "bench" / "moto_large.py")]
    log(f"server: {' '.join(server)}")
    moto = subprocess.Popen(
        [sys.executable, *server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proxy = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("moto_server did not start")
                time.sleep(0.2)
        proxy = Proxy(port)
        assert proxy.upstream("PUT", f"/{BUCKET}", AUTH)[0] == 200
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
            AWS_ALLOW_HTTP="true",
        )
        direct = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        counted = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.server_address[1]}"}
        rng = random.Random(1)
        n = max(1, round(a.gib * 1024 / 10))
        base = work / "base"
        base.mkdir()
        for i in range(n):
            (base / f"p{i:04}").write_bytes(lodtensor_u8(rng.randbytes(10 * MIB)))
        local = work / "model.zip"
        run(cli, env, "pack", local, base, "--tag", "base", "-q")
        shutil.rmtree(base)
        size = local.stat().st_size
        url = f"s3://{BUCKET}/model.zip"
        run(cli, direct, "cp", local, url)
        new = work / "new"
        new.mkdir()
        (new / "fresh").write_bytes(lodtensor_u8(rng.randbytes(10 * MIB)))
        rows = []

        def measure(label, *args):
            before = len(proxy.log)
            out, secs = run(cli, counted, *args)
            with proxy.log_lock:
                reqs = proxy.log[before:]
            up = sum(r["sent"] for r in reqs if r["method"] in ("PUT", "POST") and not r["copy"])
            got = sum(r["received"] for r in reqs if r["method"] == "GET")
            rows.append((label, len(reqs), up, got, secs))
            slow = sorted(reqs, key=lambda r: -r["seconds"])[:3]
            log(f"{label}: slowest requests " + ", ".join(
                f"{r['method']} {r['query'][:24] or r['path']} {r['seconds'] * 1000:,.0f} ms"
                for r in slow))
            return out

        out = measure(f"`modelzip pack s3://… --tag new` (10 MiB tag onto {size / 2**30:.2f} GiB)",
                      "pack", url, new, "--tag", "new", "--json")
        done = json.loads(out)
        # The new version is a whole archive: every entry's CRC and every tensor checked.
        t = time.monotonic()
        tags, _ = run(cli, direct, "tags", url, "--json")
        names = [t["name"] for t in json.loads(tags)["tags"]]
        assert names == ["base", "new"], names
        run(cli, direct, "verify", url)
        log(f"the appended object lists {names} and verifies ({time.monotonic() - t:.0f} s)")
        run(cli, env, "pack", local, new, "--tag", "new", "-q")
        measure("`modelzip cp --force` of the same archive with the tag added locally",
                "cp", "--force", local, url + ".cp")
        print(f"archive: {size:,} bytes; new tag: one 10 MiB tensor ({10 * MIB + 30:,} bytes with its header)\n")
        print("| operation | requests | bytes uploaded | bytes read | time |")
        print("|---|---:|---:|---:|---:|")
        for label, nreq, up, got, secs in rows:
            print(f"| {label} | {nreq} | {up:,} | {got:,} | {secs * 1000:,.0f} ms |")
        print(f"\nappend: copied by the store {done['bytes_copied']:,} bytes, "
              f"uploaded {done['bytes_uploaded']:,}, commit requests {done['requests']}")
        print("load average:", os.getloadavg())
        assert done["bytes_uploaded"] <= 10 * MIB + 6 * MIB, done
    finally:
        if proxy is not None:
            proxy.shutdown()
            proxy.server_close()
        moto.terminate()
        moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
