#!/usr/bin/env python3
"""`modelzip view`'s first view on a large archive, in headless Chromium, in one run.

    python3 bench/view_bench.py [--reps 7] [--tags 100] [--params 1000]

Issue 26's goal: an archive of 100 tags x 1,000 params loads its first view in < 1 s.
Makes that archive once under --data (default /work/benchdata/view; 100 checkpoints of
1,000 small FP32 parameters saved by `modelzip.Checkpointer` with metrics loss, acc and lr
and keep_last=100 after 110 saves, so the retention record lists 10 removed ones), builds
the release `modelzip`, then, alternating in one run:

- **first view**: a fresh `modelzip view` server each time (the archive opened cold by
  the process), a fresh browser page: from `goto` to `body[data-ready]` (the timeline's 100
  rows, the charts and the default tag's 1,000 parameter rows drawn);
- **reload**: the same page reloaded on the same server;
- **the `--html` page**: the same page written by `modelzip view --html` (every answer
  embedded, no server: every tag's parameters and graph, the diffs of consecutive tags)
  opened in the same browser. Not a floor: it parses far more data than the first view
  asks for; it says what attaching the static report costs its reader;
- `/api/archive` on a fresh server (the open included), by urllib.

Prints medians and every run, and the load average. Chromium is Debian's (apt-get install chromium when missing, as root); the venv
(--venv, default /work/venvs/view) gets playwright, numpy and this checkout's ./python.
Nothing here asserts a duration.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], cwd=REPO, **kw)
    if r.returncode != 0:
        sys.exit(f"view_bench.py: {' '.join(map(str, cmd))} failed ({r.returncode})")
    return r


def ensure_venv(venv: Path) -> Path:
    py = venv / "bin/python"
    if not py.exists():
        log(f"creating {venv} ...")
        run([sys.executable, "-m", "venv", venv])
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "playwright", "numpy"])
    log(f"installing ./python into {venv} ...")
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--force-reinstall", "--no-deps", "./python"])
    return py


MAKE = """
import sys, numpy as np, modelzip
path, tags, params = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
saves = tags + tags // 10
ck = modelzip.Checkpointer(path, keep_last=tags)
rng = np.random.default_rng(0)
for i in range(saves):
    step = (i + 1) * 100
    ps = {f"layer{j:04d}.w": rng.standard_normal(16).astype(np.float32) for j in range(params)}
    ck.save(step, ps, metrics={"loss": 1.0 / (1 + i), "acc": i / saves, "lr": 1e-3})
print(len(ck.checkpoints()))
"""

# Runs in the venv: prints one line of seconds per measurement, alternating.
MEASURE = r"""
import json, re, subprocess, sys, time, urllib.request
from playwright.sync_api import sync_playwright
mz, archive, html, chromium, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

def serve():
    p = subprocess.Popen([mz, "view", archive], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = re.findall(r"(http://127\.0\.0\.1:\d+/)", p.stdout.readline())[-1]
    return p, url

def stop(p):
    p.kill(); p.wait(); p.stdout.close()

out = {"first": [], "reload": [], "static": [], "api": []}
with sync_playwright() as pw:
    b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
    for _ in range(reps):
        p, url = serve()
        t = time.perf_counter()
        with urllib.request.urlopen(url + "api/archive") as r:
            r.read()
        out["api"].append(time.perf_counter() - t)
        stop(p)

        p, url = serve()
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        t = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("body[data-ready]", state="attached")
        out["first"].append(time.perf_counter() - t)
        rows = page.locator('[data-testid="tag-row"]').count()
        params = page.locator('[data-testid="param-row"]').count()
        t = time.perf_counter()
        page.reload()
        page.wait_for_selector("body[data-ready]", state="attached")
        out["reload"].append(time.perf_counter() - t)
        page.close()
        stop(p)

        page = b.new_page(viewport={"width": 1400, "height": 1000})
        t = time.perf_counter()
        page.goto("file://" + html)
        page.wait_for_selector("body[data-ready]", state="attached")
        out["static"].append(time.perf_counter() - t)
        page.close()
    b.close()
out["rows"], out["param_rows"] = rows, params
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--tags", type=int, default=100)
    ap.add_argument("--params", type=int, default=1000)
    ap.add_argument("--data", type=Path, default=Path("/work/benchdata/view"))
    ap.add_argument("--venv", type=Path, default=Path("/work/venvs/view"))
    a = ap.parse_args()

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        log("installing Debian's chromium ...")
        run(["apt-get", "install", "-y", "-qq", "chromium"],
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        chromium = shutil.which("chromium")
    log("building the release modelzip ...")
    run(["cargo", "build", "--release", "--quiet", "--bin", "modelzip"])
    mz = REPO / "target/release/modelzip"
    py = ensure_venv(a.venv)

    a.data.mkdir(parents=True, exist_ok=True)
    archive = a.data / f"view-{a.tags}x{a.params}.zip"
    if not archive.exists():
        log(f"writing {archive} ...")
        tmp = archive.with_suffix(".tmp.zip")
        tmp.unlink(missing_ok=True)
        run([py, "-c", MAKE, tmp, a.tags, a.params], stdout=subprocess.DEVNULL)
        tmp.rename(archive)
    html = a.data / f"view-{a.tags}x{a.params}.html"
    run([mz, "view", archive, "--html", html], stdout=subprocess.DEVNULL)

    log(f"measuring, {a.reps} repetitions ...")
    r = run([py, "-c", MEASURE, mz, archive, html, chromium, a.reps],
            stdout=subprocess.PIPE, text=True)
    import json
    m = json.loads(r.stdout.strip().splitlines()[-1])
    med = statistics.median
    load = os.getloadavg()
    print(f"modelzip view, {archive.name} ({archive.stat().st_size / 2**20:.1f} MiB): "
          f"{m['rows']} tag rows, {m['param_rows']} parameter rows drawn; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, {os.cpu_count()} cores")
    print("| what | median | runs (s) | goal |")
    print("|---|---|---|---|")
    runs = lambda k: ", ".join(f"{x:.3f}" for x in m[k])
    print(f"| first view, fresh server: goto -> page drawn | {med(m['first']):.3f} s | "
          f"{runs('first')} | < 1 s: {'met' if med(m['first']) < 1 else 'NOT met'} |")
    print(f"| the same page reloaded | {med(m['reload']):.3f} s | {runs('reload')} | |")
    print(f"| the `--html` page (all data embedded, no server) | {med(m['static']):.3f} s | "
          f"{runs('static')} | |")
    print(f"| `/api/archive`, fresh server (open included) | {med(m['api']) * 1e3:.1f} ms | "
          f"{', '.join(f'{x * 1e3:.1f}' for x in m['api'])} ms | |")


if __name__ == "__main__":
    main()
