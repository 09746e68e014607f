#!/usr/bin/env python3
"""Remote reads against a real S3 server on loopback (docs/BENCHMARKS.md, remote rows).

    python3 bench/remote_s3_bench.py                 # 2 GiB archive, 20 ms per request
    python3 bench/remote_s3_bench.py --tags 2        # 200 MiB, a quick check of the script

Starts moto_server (moto[server] must be importable by --moto-python, default this
python) on 127.0.0.1, and in this process a proxy in front of it that waits --latency-ms
before forwarding each request (a far-away store) and counts the requests and the body
bytes it returns. Builds an archive of --tags tags x 10 tensors of 10 MiB (distinct
random bytes, so nothing is shared) under --tmp with the release CLI
(target/release/modelzip, `cargo build --release`), uploads it straight to moto with
`modelzip cp`, then times through the proxy: `modelzip tags`, `extract` of one 100 MiB
tag, `cp` down (download and verify) and a plain GET of the whole object. Prints a
Markdown table and the machine's load average; deletes everything it made. Nothing here
asserts a duration; the one check is the issue's: one 100 MiB tag fetches <= 101 MiB.
"""
import argparse
import http.client
import http.server
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUCKET = "bench"
TENSORS = 10
TENSOR_BYTES = 10 << 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counter:
    """Requests seen by the proxy: [method, path, range, body bytes sent]. A request is
    counted when it arrives; its bytes as they are sent."""

    def __init__(self):
        self.cond = threading.Condition()
        self.requests = []
        self.active = 0

    def start(self, method, path, rng):
        with self.cond:
            self.requests.append([method, path, rng, 0])
            self.active += 1
            return len(self.requests) - 1

    def sent(self, i, n):
        with self.cond:
            self.requests[i][3] += n

    def done(self):
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    def snapshot(self):
        with self.cond:
            return len(self.requests)

    def since(self, i):
        """The requests from the `i`th on, once none is being answered."""
        with self.cond:
            self.cond.wait_for(lambda: self.active == 0, timeout=60)
            return [tuple(r) for r in self.requests[i:]]


def make_proxy(upstream_port, latency, counter):
    local = threading.local()

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self):
            i = counter.start(self.command, self.path, self.headers.get("Range"))
            try:
                self.relay(i)
            finally:
                counter.done()

        def relay(self, i):
            time.sleep(latency)
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", upstream_port)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
            except (http.client.HTTPException, OSError):
                local.conn = None
                self.send_error(502)
                return
            length = resp.getheader("Content-Length")
            data = None
            if length is None and self.command != "HEAD":
                data = resp.read()
                length = str(len(data))
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                if data is not None:
                    self.wfile.write(data)
                    counter.sent(i, len(data))
                else:
                    while chunk := resp.read(1 << 20):
                        self.wfile.write(chunk)
                        counter.sent(i, len(chunk))
            else:
                resp.read()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def tensor_record(data):
    """One Paddle LoDTensor record: UINT8, dims [len(data)], no LoD."""
    n = len(data)
    varint = b""
    v = n
    while True:
        b, v = v & 0x7F, v >> 7
        varint += bytes([b | 0x80]) if v else bytes([b])
        if not v:
            break
    desc = b"\x08\x14\x10" + varint
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tags", type=int, default=20, help="tags of 100 MiB (default 20: 2 GiB)")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--moto-python", default=sys.executable)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "modelzip"))
    args = ap.parse_args()
    cli = Path(args.bin)
    if not cli.is_file():
        sys.exit(f"{cli} is missing: cargo build --release")
    work = Path(tempfile.mkdtemp(prefix="modelzip-s3-bench-", dir=args.tmp))
    moto_port = free_port()
    moto = subprocess.Popen(
        [args.moto_python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    counter = Counter()
    proxy = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", moto_port), timeout=1).close()
                break
            except OSError:
                if moto.poll() is not None or time.monotonic() > deadline:
                    sys.exit("moto_server did not start")
                time.sleep(0.2)
        moto_url = f"http://127.0.0.1:{moto_port}"
        urllib.request.urlopen(
            urllib.request.Request(f"{moto_url}/{BUCKET}", method="PUT"), timeout=30
        ).close()
        proxy = make_proxy(moto_port, args.latency_ms / 1000, counter)
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
        base_env = dict(os.environ)
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
            base_env.pop(k, None)
        base_env.update(
            AWS_ALLOW_HTTP="true",
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
        )
        direct = dict(base_env, AWS_ENDPOINT_URL=moto_url)
        slow = dict(base_env, AWS_ENDPOINT_URL=proxy_url)

        archive = work / "big.zip"
        log(f"building {args.tags} x {TENSORS} x {TENSOR_BYTES >> 20} MiB under {work}")
        for t in range(args.tags):
            d = work / f"t{t}"
            d.mkdir()
            for p in range(TENSORS):
                (d / f"p{p}").write_bytes(tensor_record(os.urandom(TENSOR_BYTES)))
            subprocess.run(
                [cli, "pack", archive, d, "--tag", f"t{t}", "-q"], check=True, env=direct
            )
            shutil.rmtree(d)
        size = archive.stat().st_size
        url = f"s3://{BUCKET}/big.zip"
        log(f"uploading {size} bytes to moto")
        subprocess.run([cli, "cp", archive, url, "-q"], check=True, env=direct)
        archive.unlink()

        rows = []

        def measure(what, argv=None, fn=None):
            i = counter.snapshot()
            t0 = time.monotonic()
            if argv is not None:
                subprocess.run(argv, check=True, env=slow, stdout=subprocess.DEVNULL)
            else:
                fn()
            secs = time.monotonic() - t0
            seen = counter.since(i)
            rows.append((what, len(seen), sum(r[3] for r in seen), secs))
            for r in seen:
                log(f"  {what}: {r[0]} {r[1]} range={r[2]} -> {r[3]} bytes")
            return seen

        load_before = os.getloadavg()

        def one_byte():
            req = urllib.request.Request(
                f"{proxy_url}/{BUCKET}/big.zip", headers={"Range": "bytes=0-0"}
            )
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()

        measure("one 1-byte range GET (the server's own cost per request)", fn=one_byte)
        measure("`modelzip tags` (open + summary)", [cli, "tags", url])
        tag = f"t{args.tags // 2}"
        out = work / "extract"
        seen = measure(
            f"`modelzip extract --tag {tag}`: one 100 MiB tag",
            [cli, "extract", url, "--tag", tag, "--out", out, "-q"],
        )
        one_tag = sum(r[3] for r in seen)
        shutil.rmtree(out, ignore_errors=True)
        down = work / "down.zip"
        measure("`modelzip cp URL LOCAL` (download, verify)", [cli, "cp", url, down, "-q"])
        down.unlink()

        def plain_get():
            with urllib.request.urlopen(f"{proxy_url}/{BUCKET}/big.zip", timeout=600) as r:
                while r.read(1 << 20):
                    pass

        measure("plain GET of the whole object", fn=plain_get)
        load_after = os.getloadavg()

        print(
            f"archive: {args.tags} tags x {TENSORS} tensors of {TENSOR_BYTES >> 20} MiB = "
            f"{size:,} bytes in moto_server; {args.latency_ms:g} ms added per request\n"
        )
        print("| operation | requests | bytes fetched | time |")
        print("|---|---:|---:|---:|")
        for what, n, b, secs in rows:
            print(f"| {what} | {n} | {b:,} | {secs * 1000:,.0f} ms |")
        print(
            f"\nload average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} "
            f"{load_before[2]:.2f}; after: {load_after[0]:.2f} {load_after[1]:.2f} "
            f"{load_after[2]:.2f}; {os.cpu_count()} CPUs"
        )
        limit = 101 << 20
        verdict = "yes" if one_tag <= limit else "NO"
        print(f"one 100 MiB tag fetched {one_tag:,} bytes (<= 101 MiB = {limit:,}: {verdict})")
        return 0 if one_tag <= limit else 1
    finally:
        if proxy is not None:
            proxy.shutdown()
        moto.terminate()
        try:
            moto.wait(timeout=10)
        except subprocess.TimeoutExpired:
            moto.kill()
            moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
