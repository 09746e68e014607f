"""Shared fixtures: the repository, the `modelzip` binary, a scratch directory."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PADDLE_FIXTURES = REPO / "tests" / "fixtures" / "paddle" / "3.3.1"
HOSTILE = REPO / "tests" / "hostile"


def cli_path() -> Path:
    """The CLI binary: $MODELZIP_BIN, else target/debug/modelzip (built by `cargo test`)."""
    env = os.environ.get("MODELZIP_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "modelzip"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it with `cargo build` or set MODELZIP_BIN")
    return path


def run_cli(*args: object, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(cli_path()), *map(str, args)], capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"modelzip {args} exited {proc.returncode}: {proc.stderr}")
    return proc


def cli_json(*args: object):
    return json.loads(run_cli(*args, "--json").stdout)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_server(name: str, argv, env: dict | None = None):
    """A server started here on a free port of 127.0.0.1 (`argv(port)` its command line)
    and stopped on leaving; yields the port once it accepts connections (60 s at most,
    else the test fails saying so)."""
    port = free_port()
    proc = subprocess.Popen(
        [str(a) for a in argv(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{name} did not start (exit {proc.poll()})")
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def moto_server(env: dict | None = None):
    """moto_server (the S3-compatible server of the remote tests) on a free port of
    127.0.0.1, started here and stopped on leaving; yields its port."""
    argv = lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port]  # noqa: E731
    with local_server("moto_server", argv, env) as port:
        yield port


def s3_env(endpoint: str) -> dict:
    """This process's environment pointed at an S3 endpoint with test credentials."""
    env = dict(os.environ)
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ALLOW_HTTP="true",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
    )
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        env.pop(k, None)
    return env


def cli_env(env, *args, check=True):
    """The CLI run with `env`; fails the test on a non-zero exit when `check`."""
    proc = subprocess.run(
        [str(cli_path()), *map(str, args)], capture_output=True, text=True, env=env, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"modelzip {args} exited {proc.returncode}: {proc.stderr}")
    return proc


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that answers `Range: bytes=a-b` (Python's own does not), as
    HTTP object stores and nginx do."""

    def log_message(self, *args):
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        if not m:
            self.send_error(416)
            return None
        a, b = m.groups()
        if a == "":
            start, end = max(0, size - int(b)), size - 1
        else:
            start, end = int(a), min(int(b) if b else size - 1, size - 1)
        if start > end:
            self.send_error(416)
            return None
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        self.send_header("ETag", f'"{int(os.path.getmtime(path) * 1e6)}-{size}"')
        self.end_headers()
        self.range_left = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = getattr(self, "range_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)
