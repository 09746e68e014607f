#!/usr/bin/env python3
"""modelzip against its peers and floors, on the same data, in one run.

    python3 bench/compare.py --quick     # ~1/16-size data, a few minutes
    python3 bench/compare.py --full      # the sizes of docs/BENCHMARKS.md

Prints issue 27's table first (what | now | floor | ratio | goal | met?): P4 `modelzip pack`
onto a just-written-and-synced 2 GiB archive against `cat DIR/* >> big.zip && sync big.zip`
(medians of 9, alternated); P5 `modelzip tags` against `zipinfo -1` (best of 7 each,
alternated) on 100 tags x 1,000 params written by Python's zipfile (no `_summary.txt`) and
again after one `modelzip pack` (summary written); P2 per 1,000 tensors; Py1 Python open +
a numpy view of every tensor of a 1 GiB tag of 1,024 tensors against
`safetensors.numpy.load_file`; P6 against Paddle's `load_combine` (when the Paddle venv
exists); PY2 `modelzip.save` of 1 GiB against `safetensors.numpy.save_file` + fsync + SHA-256
of the file (pairs alternated, medians of 11); the remote row: nginx started here on
127.0.0.1 (installed with apt-get when missing) serving L, `curl -o` against `modelzip cp
http://...` and every tensor through `Archive::open_url` (`--no-remote` skips it). Then the
older rows (P1, P3, P7, ...).
`zipinfo` (Debian's `unzip`) is installed with apt-get when missing and this runs as root;
otherwise the P5 rows say it is missing. The load average is printed with the figures.

Builds the release `modelzip` binary and the `peer` bench binary (benches/peer.rs), makes
the data sets under --data (default /work/benchdata, outside the repository), creates a
Python venv with safetensors + numpy if missing (--venv, default /work/venvs/bench), runs
every measurement and prints one table of figures, peer figures and ratios. P6 needs a
venv with `paddlepaddle` + numpy: --paddle-venv (default $MODELZIP_PADDLE_VENV or
/work/venvs/paddle3); --with-paddle creates it; without Paddle, P6 is reported as skipped. Figures are
medians of --reps repetitions, modelzip and its peer alternating within one process where
possible, so a ratio comes from one run on the same data. Nothing here asserts a duration.

Data sets (full / quick):
  L    200 FP32 tensors, 1 GiB / 64 MiB          L16  the same 200 tensors at 1/16 the bytes
  M    100 / 10 tags x 1,000 small params        P    Paddle .pdiparams of 256 / 32 MiB
  B    a 2 GiB / 128 MiB archive, to which a 100 MiB / 6.25 MiB checkpoint C is appended
  C4   4 tensors of 25 MiB / 1.56 MiB: the checkpoint `modelzip pack` appends to B (P4)
  K    1,024 FP32 tensors of 1 MiB / 64 KiB (1 GiB / 64 MiB): Py1 and PY2

The PY rows run bench/python_bench.py in the venv (with this checkout's ./python installed):
the Python package against safetensors' Python API on K.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PADDLE_VENV = Path("/work/venvs/paddle3")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, capture=True):
    r = subprocess.run([str(c) for c in cmd], cwd=REPO, env=env, text=True,
                       stdout=subprocess.PIPE if capture else None)
    if r.returncode != 0:
        sys.exit(f"compare.py: {' '.join(map(str, cmd))} failed with exit code {r.returncode}")
    return r.stdout


def json_lines(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def one(out):
    return json_lines(out)[-1]


def rusage_run(cmd, env=None, capture=False):
    """Runs cmd as a child; returns (wall seconds, peak RSS in bytes, stdout or None).
    Its output goes to /dev/null unless `capture`: reading it here would add this
    process's work to the child's wall time (100,000 lines of `zipinfo -1` through a pipe
    into Python took as long as zipinfo itself, flattering the P5 ratios of runs up to 17)."""
    t = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], cwd=REPO, env=env, text=True,
                         stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    out = p.stdout.read() if capture else None
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(map(str, cmd))} failed ({p.returncode})")
    return wall, ru.ru_maxrss * 1024, out


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def build():
    log("building release binary and peer bench ...")
    run(["cargo", "build", "--release", "--quiet"], capture=False)
    out = run(["cargo", "bench", "--bench", "peer", "--no-run", "--message-format=json",
               "--quiet"])
    exe = None
    for l in out.splitlines():
        try:
            m = json.loads(l)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "peer" \
                and m.get("executable"):
            exe = m["executable"]
    if not exe:
        sys.exit("compare.py: could not find the peer bench executable")
    return REPO / "target/release/modelzip", Path(exe)


def paddle_ok(py):
    return py.exists() and subprocess.run(
        [py, "-c", "import paddle"], capture_output=True,
        env=dict(os.environ, FLAGS_enable_pir_api="0")).returncode == 0


def ensure_venv(venv):
    py = venv / "bin/python"
    ok = py.exists() and subprocess.run(
        [py, "-c", "import safetensors, numpy"], capture_output=True).returncode == 0
    if not ok:
        log(f"creating {venv} with safetensors + numpy ...")
        run([sys.executable, "-m", "venv", venv])
        run([py, "-m", "pip", "install", "-q", "safetensors", "numpy"], capture=False)
    # The Python package of this checkout (the PY rows), rebuilt from ./python every run.
    log(f"installing ./python into {venv} ...")
    run([py, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", "./python"],
        capture=False)
    return py


PY_ST_LOAD = """
import json, sys, time
from safetensors.numpy import load_file
secs = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); d = load_file(sys.argv[1]); secs.append(time.perf_counter() - t)
    del d
print(json.dumps({"secs": secs}))
"""

PY_ST_SAVE = """
import json, os, sys, time
from safetensors.numpy import load_file, save_file
d = load_file(sys.argv[1]); out = sys.argv[2]; fsync = sys.argv[4] == "1"
secs = []
for _ in range(int(sys.argv[3])):
    os.system("sync")
    t = time.perf_counter()
    save_file(d, out)
    if fsync:
        fd = os.open(out, os.O_RDONLY); os.fsync(fd); os.close(fd)
        fd = os.open(os.path.dirname(out), os.O_RDONLY); os.fsync(fd); os.close(fd)
    secs.append(time.perf_counter() - t)
    os.remove(out)
print(json.dumps({"secs": secs}))
"""

PY_ZIP_NAMES = "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).namelist()"

PY_ZIP_INPROC = """
import json, sys, time, zipfile
secs = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); n = len(zipfile.ZipFile(sys.argv[1]).namelist())
    secs.append(time.perf_counter() - t)
print(json.dumps({"secs": secs, "names": n}))
"""

PY_ZIP_READ = """
import json, sys, time, zipfile
secs = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    z = zipfile.ZipFile(sys.argv[1])
    d = {n: z.read(n) for n in z.namelist() if n.endswith(".lodtensor")}
    secs.append(time.perf_counter() - t)
    del d
print(json.dumps({"secs": secs}))
"""

# A copy of a modelzip archive written entry by entry by Python's zipfile, without the
# summary (`_summary.txt`): an archive from another writer, as a user would make one.
PY_ZIPFILE_COPY = """
import sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
    for info in zi.infolist():
        if info.filename == "_summary.txt":
            continue
        out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
        out.compress_type = info.compress_type
        out.external_attr = info.external_attr
        zo.writestr(out, zi.read(info))
"""


def loadavg():
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def ensure_zipinfo():
    """Info-ZIP's zipinfo (Debian package `unzip`): installed with apt-get when missing
    and this runs as root. Returns None, or why it is missing."""
    if shutil.which("zipinfo"):
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("zipinfo missing: apt-get install unzip ...")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "install", "-y", "-q", "unzip"],
                    ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "unzip"]):
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
            if shutil.which("zipinfo"):
                return None
    return ("zipinfo not found and could not be installed (install Debian's `unzip`: "
            "apt-get install unzip)")


def alternated(cmds, reps, before=None):
    """Whole-process wall times of each named command, alternating (the first command
    of a repetition changes every repetition); `before()` runs before every command."""
    out = {k: [] for k in cmds}
    names = list(cmds)
    for i in range(reps):
        order = names if i % 2 == 0 else names[::-1]
        for k in order:
            if before:
                before()
            out[k].append(rusage_run(cmds[k])[0])
    return out


def p4_pack_floor(mz_bin, peer, base, set_name, data, reps):
    """Issue 27's P4: `modelzip pack BASE --tag t DIR` (DIR: 4 tensors of 25 MiB) onto
    BASE just written and synced, against `cat DIR/* >> BASE && sync BASE` (the same bytes
    appended, nothing else) and a fresh `pack` of DIR; medians, alternated. BASE's tail is
    put back and fsynced before every command."""
    ckpt, cdir, fresh = data / "C4.mz", data / "C4.dir", data / "fresh-c4.mz"
    run([peer, "gen-archive", set_name, ckpt, "--tag", "ckpt", "--salt", "9"])
    shutil.rmtree(cdir, ignore_errors=True)
    run([mz_bin, "extract", ckpt, "--out", cdir, "-q"])
    ckpt.unlink()
    files = sorted(cdir.iterdir())
    if not files or not all(p.is_file() for p in files):
        sys.exit(f"compare.py: {cdir} should hold only tensor files")
    orig_len = base.stat().st_size
    tail_at = max(0, orig_len - (1 << 20))
    with open(base, "rb") as fh:
        fh.seek(tail_at)
        tail = fh.read()

    def restore():
        if fresh.exists():
            fresh.unlink()
        with open(base, "r+b") as fh:
            fh.seek(tail_at)
            fh.write(tail)
            fh.truncate(orig_len)
            os.fsync(fh.fileno())

    restore()
    cmds = {
        "pack": [mz_bin, "pack", base, "--tag", "ckpt", cdir, "-q"],
        "cat": ["sh", "-c", 'cat "$1"/* >> "$2" && sync "$2"', "sh", cdir, base],
        "fresh": [mz_bin, "pack", fresh, "--tag", "ckpt", cdir, "-q"],
    }
    out = alternated(cmds, reps, before=restore)
    restore()
    out["bytes"] = sum(p.stat().st_size for p in files)
    out["files"] = len(files)
    out["base_bytes"] = orig_len
    shutil.rmtree(cdir, ignore_errors=True)
    return out


def p5_foreign(mz_bin, peer, m, data, best_of=7):
    """Issue 27's P5: `modelzip tags` against `zipinfo -1`, best of 7 whole processes each,
    alternated, on M rewritten by Python's zipfile (no summary), then on the same file
    after one `modelzip pack` (a small tag; the pack writes the summary)."""
    missing = ensure_zipinfo()
    if missing:
        return {"missing": missing}
    mzip = data / "M-zipfile.mz"
    if mzip.exists():
        mzip.unlink()
    run([sys.executable, "-c", PY_ZIPFILE_COPY, m, mzip])
    names = run(["zipinfo", "-1", mzip]).splitlines()
    if "_summary.txt" in names:
        sys.exit("compare.py: the zipfile copy of M still has a summary")
    out = {"entries": len(names)}
    cmds = {"tags": [mz_bin, "tags", mzip], "zipinfo": ["zipinfo", "-1", mzip]}
    for c in cmds.values():
        rusage_run(c)  # warm
    out["nosum"] = alternated(cmds, best_of)
    # What listing without a summary must read beyond zipinfo's directory: every local
    # header and the first 64 bytes of each entry's data (a record's dtype), in-process.
    out["heads_floor"] = one(run([peer, "heads-floor", mzip, "--reps", best_of]))
    small, sdir = data / "small.mz", data / "small.dir"
    run([peer, "gen-m", small, 1, 10])
    shutil.rmtree(sdir, ignore_errors=True)
    run([mz_bin, "extract", small, "--out", sdir, "-q"])
    run([mz_bin, "pack", mzip, "--tag", "extra", sdir, "-q"])
    if "_summary.txt" not in run(["zipinfo", "-1", mzip]).splitlines():
        sys.exit("compare.py: `modelzip pack` wrote no summary into the zipfile copy of M")
    for c in cmds.values():
        rusage_run(c)
    out["sum"] = alternated(cmds, best_of)
    shutil.rmtree(sdir, ignore_errors=True)
    small.unlink()
    mzip.unlink()
    return out



def ensure_nginx():
    """Debian's nginx: installed with apt-get when missing and this runs as root.
    Returns its path, or None."""
    for cand in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if cand and os.path.exists(cand):
            return cand
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("nginx missing: apt-get install nginx ...")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "install", "-y", "-q", "nginx"], ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "nginx"]):
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
            if os.path.exists("/usr/sbin/nginx"):
                return "/usr/sbin/nginx"
    return None


NGINX_CONF = """
{user}
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


def read_floor(path, reps):
    """P6's floors: the file's bytes copied from the page cache on both cores (two
    threads, each `preadv` of its half), into a buffer allocated and touched before (the
    kernel's copy alone), and into fresh memory (an anonymous map each time: the page
    faults and zeroing that memory a load owns costs, as it costs the load)."""
    import mmap
    import threading
    size = path.stat().st_size
    touched = bytearray(size)
    half = size // 2
    out = {"reused": [], "fresh": []}
    fd = os.open(path, os.O_RDONLY)

    def both_cores(view):
        def part(lo, hi):
            got = 0
            while lo + got < hi:
                n = os.preadv(fd, [view[lo + got:hi]], lo + got)
                if n <= 0:
                    raise OSError(f"short read of {path}")
                got += n
        ts = [threading.Thread(target=part, args=(0, half)),
              threading.Thread(target=part, args=(half, size))]
        t = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        return time.perf_counter() - t

    try:
        for _ in range(max(reps, 3)):
            out["reused"].append(both_cores(memoryview(touched)))
            fresh = mmap.mmap(-1, size)
            view = memoryview(fresh)
            out["fresh"].append(both_cores(view))
            view.release()
            fresh.close()
    finally:
        os.close(fd)
    return out


def remote_http(mz_bin, peer, archive, data, reps):
    """The remote row: nginx (started here on 127.0.0.1 with a generated config in a temp
    directory, stopped after) serving ARCHIVE; `curl -o` of it against `modelzip cp URL`
    and against reading every tensor through `Archive::open_url` (`peer read-url`),
    alternated, whole processes, with their peak RSS."""
    import socket
    import tempfile
    nginx = ensure_nginx()
    if not nginx:
        return {"missing": "nginx not found and could not be installed (apt-get install nginx)"}
    if not shutil.which("curl"):
        return {"missing": "curl not found (apt-get install curl)"}
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="mz-nginx-"))
    conf = tmp / "nginx.conf"
    # As root, nginx's workers would run as nobody, who may not read --data.
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(NGINX_CONF.format(user=user, tmp=tmp, port=port, root=archive.parent))
    srv = subprocess.Popen([nginx, "-c", conf, "-p", tmp], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/{archive.name}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            return {"missing": f"nginx did not listen on 127.0.0.1:{port} (see {tmp}/error.log)"}
        out_c, out_m = data / "remote-curl.bin", data / "remote-cp.mz"
        env = dict(os.environ, AWS_ALLOW_HTTP="true")
        cmds = {"curl": ["curl", "-s", "-f", "-o", out_c, url],
                "cp": [mz_bin, "cp", url, out_m],
                "read": [peer, "read-url", url]}
        R = {k: [] for k in cmds}
        rss = {k: 0 for k in cmds}
        read_info = None

        def clean():
            for f in (out_c, out_m):
                if f.exists():
                    f.unlink()

        for i in range(reps):
            for k in (list(cmds) if i % 2 == 0 else list(cmds)[::-1]):
                clean()
                wall, peak, out = rusage_run(cmds[k], env=env, capture=True)
                R[k].append(wall)
                rss[k] = max(rss[k], peak)
                if k == "read":
                    read_info = one(out)
        clean()
        return {"secs": R, "rss": rss, "read": read_info, "bytes": archive.stat().st_size}
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="small data (default)")
    g.add_argument("--full", action="store_true", help="the documented sizes")
    ap.add_argument("--data", default="/work/benchdata", type=Path)
    ap.add_argument("--venv", default="/work/venvs/bench", type=Path)
    ap.add_argument("--reps", type=int, default=0, help="repetitions (default 3 full, 5 quick)")
    ap.add_argument("--paddle-venv", type=Path,
                    default=Path(os.environ.get("MODELZIP_PADDLE_VENV", DEFAULT_PADDLE_VENV)),
                    help="venv with paddlepaddle + numpy for P6 (default $MODELZIP_PADDLE_VENV "
                         f"or {DEFAULT_PADDLE_VENV}); P6 is skipped when it has no Paddle")
    ap.add_argument("--with-paddle", action="store_true",
                    help="create --paddle-venv (pip install paddlepaddle numpy) if missing")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--no-remote", action="store_true",
                    help="skip the remote row (nginx on 127.0.0.1 serving L)")
    ap.add_argument("--json", type=Path, help="also write every raw figure here")
    a = ap.parse_args()
    full = a.full
    reps = a.reps or (3 if full else 5)
    div = "" if full else "/16"
    sizes = dict(L="L" + div, L16="L16" + div, C="C100" + div, B="B2G" + div,
                 C4="C4x25" + div, K="K1024" + div,
                 m_tags=100 if full else 10, p_mib=256 if full else 32)

    data = a.data
    data.mkdir(parents=True, exist_ok=True)
    need = (9 if full else 1) << 30
    free = shutil.disk_usage(data).free
    if free < need * 1.5:
        sys.exit(f"compare.py: {data} has {free >> 20} MiB free, needs {need * 1.5 / 2**20:.0f}")
    mz_bin, peer = build()
    py = ensure_venv(a.venv)
    R = {"mode": "full" if full else "quick", "reps": reps, "load_start": loadavg(),
         "m_tags": sizes["m_tags"]}

    def f(name):
        return data / name

    log("making data sets ...")
    run([peer, "gen-archive", sizes["L"], f("L.mz")])
    run([peer, "gen-st", sizes["L"], f("L.safetensors")])
    run([peer, "gen-st", sizes["K"], f("K.safetensors")])
    run([peer, "gen-archive", sizes["L16"], f("L16.mz")])
    run([peer, "gen-m", f("M.mz"), sizes["m_tags"], 1000])
    run([peer, "gen-archive", sizes["B"], f("B.mz"), "--tag", "base", "--salt", "5"])
    PADDLE_PY = a.paddle_venv / "bin/python"
    have_paddle = paddle_ok(PADDLE_PY)
    if not have_paddle and a.with_paddle:
        log(f"creating {a.paddle_venv} with paddlepaddle + numpy ...")
        run([sys.executable, "-m", "venv", a.paddle_venv])
        run([PADDLE_PY, "-m", "pip", "install", "-q", "paddlepaddle", "numpy"], capture=False)
        have_paddle = paddle_ok(PADDLE_PY)
    if not have_paddle:
        log(f"P6 skipped: {PADDLE_PY} cannot import paddle (pass --with-paddle to create it)")
    penv = dict(os.environ, FLAGS_enable_pir_api="0", GLOG_minloglevel="2")
    if have_paddle:
        run([PADDLE_PY, "bench/paddle_params.py", "make", f("P"), sizes["p_mib"]], env=penv)

    log("physical limits ...")
    R["physical"] = one(run([peer, "physical", f("L.mz")]))

    log("P1 load a tag into owned memory ...")
    R["load"] = one(run([peer, "load", f("L.mz"), f("L.safetensors"), "--reps", reps]))
    R["py_st_load"] = one(run([py, "-c", PY_ST_LOAD, f("L.safetensors"), reps]))
    R["py_zip_read"] = one(run([py, "-c", PY_ZIP_READ, f("L.mz"), reps]))

    log("P2 open + view ...")
    vreps = str(max(20, reps))
    R["view_L"] = one(run([peer, "view", f("L.mz"), "--reps", vreps]))
    R["view_L16"] = one(run([peer, "view", f("L16.mz"), "--reps", vreps]))
    R["view_M"] = one(run([peer, "view", f("M.mz"), "--reps", vreps]))

    log("P3 save ...")
    R["save"] = one(run([peer, "save", sizes["L"], data, "--reps", reps]))
    R["save_fsync"] = one(run([peer, "save", sizes["L"], data, "--reps", reps, "--fsync"]))
    R["py_st_save"] = one(run([py, "-c", PY_ST_SAVE, f("L.safetensors"),
                               f("py.safetensors"), reps, "0"]))

    log("PY Python package vs safetensors' Python API (K: 1,024 tensors) ...")
    R["load_py"] = loadavg()
    R["py"] = one(run([py, "bench/python_bench.py", "--st", f("K.safetensors"), "--dir", data,
                       "--reps", max(11, reps)]))  # fsynced 1 GiB saves are bimodal
    f("K.safetensors").unlink()

    log("P4 append ...")
    R["append"] = one(run([peer, "append", f("B.mz"), sizes["C"], data, "--reps", reps]))
    R["append_fsync"] = one(run([peer, "append", f("B.mz"), sizes["C"], data, "--reps", reps,
                                 "--fsync"]))

    log("P4 append through the CLI ...")
    R["append_cli"] = cli_append(mz_bin, peer, f("B.mz"), sizes["C"], data, reps)
    log("P4 pack 4 x 25 MiB onto B against cat >> + sync ...")
    R["load_p4"] = loadavg()
    R["p4"] = p4_pack_floor(mz_bin, peer, f("B.mz"), sizes["C4"], data, 9 if full else reps)

    log("P5 tags on M written by Python's zipfile, against zipinfo -1 ...")
    R["load_p5"] = loadavg()
    R["p5"] = p5_foreign(mz_bin, peer, f("M.mz"), data)

    log("P5 tags on M ...")
    tags_cmd = [mz_bin, "tags", f("M.mz")]
    has_tags = subprocess.run([mz_bin, "tags", "--help"], capture_output=True).returncode == 0
    R["tags_is_standin"] = not has_tags
    if not has_tags:
        tags_cmd = [peer, "tags-standin", f("M.mz")]
    preps = max(10, reps)
    rusage_run(tags_cmd)  # warm
    R["tags_proc"] = [rusage_run(tags_cmd)[0] for _ in range(preps)]
    R["py_zip_proc"] = [rusage_run([sys.executable, "-c", PY_ZIP_NAMES, f("M.mz")])[0]
                        for _ in range(preps)]
    R["py_zip_inproc"] = one(run([sys.executable, "-c", PY_ZIP_INPROC, f("M.mz"), preps]))
    # Info-ZIP's zipinfo -1 (names only) is the C peer: best of 7 whole-process runs each,
    # alternating.
    if shutil.which("zipinfo"):
        zi_cmd = ["zipinfo", "-1", f("M.mz")]
        rusage_run(zi_cmd)  # warm
        R["tags_best"], R["zipinfo_best"] = [], []
        for _ in range(7):
            R["tags_best"].append(rusage_run(tags_cmd)[0])
            R["zipinfo_best"].append(rusage_run(zi_cmd)[0])
    R["m_entries"] = R["view_M"]["entries"]

    if have_paddle:
        log("P6 Paddle .pdiparams ...")
        R["pd_mz"] = one(run([peer, "read-pdiparams", f("P.pdiparams"), "--reps", reps]))
        R["pd_paddle"] = one(run([PADDLE_PY, "bench/paddle_params.py", "load", f("P"), reps],
                                 env=penv))
        # In a process of its own: the floor's 2 x 256 MiB would stay in this process's
        # high-water RSS, which every child started after inherits in its ru_maxrss
        # (a child of a Python holding 512 MiB reports >= 525 MiB whatever it does: the
        # 532 MiB of the remote read in runs 16 and 17).
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            R["pd_floor"] = pool.apply(read_floor, (Path(f("P.pdiparams")), reps))

    log("P7 peak RSS ...")
    rss = {}
    for k, cmd in {
        "save_mz": [peer, "save", sizes["L"], data, "--only", "mz"],
        "save_st": [peer, "save", sizes["L"], data, "--only", "st"],
        "load_mz": [peer, "load", f("L.mz"), f("L.safetensors"), "--only", "mz"],
        "load_st": [peer, "load", f("L.mz"), f("L.safetensors"), "--only", "st"],
    }.items():
        rss[k] = rusage_run(cmd)[1]
    R["rss"] = rss
    R["tensor_bytes"] = R["load"]["bytes"]

    if not a.no_remote:
        log("remote: nginx on 127.0.0.1 serving L; curl -o, modelzip cp, Archive::open_url ...")
        R["load_remote"] = loadavg()
        R["remote"] = remote_http(mz_bin, peer, f("L.mz"), data, reps)
    R["load_end"] = loadavg()
    report_issue27(R)
    report(R)
    if a.json:
        a.json.write_text(json.dumps(R, indent=1))
    if not a.keep:
        shutil.rmtree(data, ignore_errors=True)


def cli_append(mz_bin, peer, base, set_name, data, reps):
    """P4 through the CLI: `modelzip pack BASE --tag ckpt DIR` (in place) against the same
    DIR packed into a fresh archive, alternating; BASE's tail is put back after each
    append (as the in-process bench does)."""
    ckpt, cdir, fresh = data / "C.mz", data / "C.dir", data / "fresh-cli.mz"
    run([peer, "gen-archive", set_name, ckpt, "--tag", "ckpt", "--salt", "7"])
    shutil.rmtree(cdir, ignore_errors=True)
    run([mz_bin, "extract", ckpt, "--out", cdir, "-q"])
    ckpt.unlink()
    orig_len = base.stat().st_size
    tail_at = max(0, orig_len - (1 << 20))
    with open(base, "rb") as fh:
        fh.seek(tail_at)
        tail = fh.read()
    out = {"append": [], "fresh": [], "bytes": sum(p.stat().st_size for p in cdir.rglob("*")
                                                   if p.is_file()),
           "base_bytes": orig_len}
    for _ in range(reps):
        out["fresh"].append(rusage_run([mz_bin, "pack", fresh, "--tag", "ckpt", cdir, "-q"])[0])
        fresh.unlink()
        out["append"].append(rusage_run([mz_bin, "pack", base, "--tag", "ckpt", cdir, "-q"])[0])
        with open(base, "r+b") as fh:
            fh.seek(tail_at)
            fh.write(tail)
            fh.truncate(orig_len)
    shutil.rmtree(cdir, ignore_errors=True)
    return out


def report_issue27(R):
    """Issue 27's table: what | now | floor | ratio | goal | met?"""
    rows = []

    def ms(x):
        return f"{x * 1e3:.1f} ms" if x < 10 else f"{x:.2f} s"

    def row(what, now, floor, ratio, goal, ok):
        rows.append((what, now, floor, ratio, goal, "n/a" if ok is None else
                     ("yes" if ok else "NO")))

    p4 = R["p4"]
    a_, c_, f_ = med(p4["pack"]), med(p4["cat"]), med(p4["fresh"])
    row(f"P4 `modelzip pack big.zip --tag t DIR`: {p4['files']} tensors, "
        f"{p4['bytes'] / 2**20:.0f} MiB onto a {p4['base_bytes'] / 2**30:.2f} GiB archive "
        f"just written and synced, median of {len(p4['pack'])}", ms(a_),
        f"`cat DIR/* >> big.zip && sync big.zip` {ms(c_)}", f"{a_ / c_:.2f}x", "<= 1.15x",
        a_ <= 1.15 * c_)
    row("  (fresh `pack` of the same DIR, for scale)", ms(f_), f"the same cat + sync {ms(c_)}",
        f"{f_ / c_:.2f}x", "", None)

    p5 = R["p5"]
    if "missing" in p5:
        row("P5 `modelzip tags` (both rows)", "not measured", p5["missing"], "", "", None)
    else:
        for key, what, goal, ok in (
                ("nosum", f"P5 `modelzip tags`, {R['m_tags']} tags x 1,000 params written by "
                          f"Python's zipfile ({p5['entries']:,} entries, no `_summary.txt`), "
                          "best of 7",
                 "<= 0.3x", lambda t, z: t <= 0.3 * z),
                ("sum", "P5 the same after one `modelzip pack` (summary written), best of 7",
                 "<= 0.15x and < 25 ms", lambda t, z: t <= 0.15 * z and t < 0.025)):
            t, z = min(p5[key]["tags"]), min(p5[key]["zipinfo"])
            row(what, ms(t), f"`zipinfo -1` {ms(z)}", f"{t / z:.2f}x", goal, ok(t, z))
            hf = p5.get("heads_floor")
            if key == "sum" and hf and "zip_crate_open" in hf:
                f = min(hf["zip_crate_open"])
                row("  (for scale: the zip crate's `ZipArchive::new` of the same file, "
                    "in-process, best)", ms(f), f"`zipinfo -1` {ms(z)}", f"{f / z:.2f}x",
                    "", None)
            if key == "nosum" and hf:
                for k, how in (("mapped", "through a map"),
                               ("two_threads", "one `pread` each, on two threads")):
                    f = min(hf[k])
                    row(f"  (floor: every local header and record header read {how}, "
                        "in-process, best)", ms(f), f"`zipinfo -1` {ms(z)}",
                        f"{f / z:.2f}x", "", None)

    v = R["view_L"]
    per_k = med(v["secs"]) / v["tensors"] * 1000
    if "floor_reads" in v:
        fl_k = med(v["floor_reads"]) / v["tensors"] * 1000
        row(f"P2 open + latest + views, per 1,000 tensors (L: {v['tensors']} tensors)",
            ms(per_k), f"the open's reads alone (the directory, one `pread` a local header) "
            f"{ms(fl_k)}", f"{per_k / fl_k:.2f}x", "< 0.5 ms", per_k < 0.5e-3)
    else:
        row(f"P2 open + latest + views, per 1,000 tensors (L: {v['tensors']} tensors)",
            ms(per_k), "—", "", "< 0.5 ms", per_k < 0.5e-3)

    if "py" in R:
        P = R["py"]
        n = P["tensors"]
        mzv, stl = P["mz_views"], P["st_load"]
        worst = max(m / s for m, s in zip(P["raw"]["mz_views"], P["raw"]["st_load"]))
        row(f"Py1 Python: open + a numpy view of every tensor of a "
            f"{P['bytes'] / 2**30:.2f} GiB tag of {n:,} tensors + close, median of "
            f"{len(P['raw']['mz_views'])} (worst pair {worst:.4f}x)",
            f"{ms(mzv)} ({mzv / n * 1e6:.2f} µs a tensor)",
            f"`safetensors.numpy.load_file` {ms(stl)}", f"{mzv / stl:.4f}x",
            "<= 0.01x (<= 2 µs a tensor)", mzv <= 0.01 * stl and mzv / n <= 2e-6)
        ms_, ss = P["mz_save"], P["st_save_sha"]
        pr = P["save_pair_ratios"]
        row(f"PY2 `modelzip.save` of {P['bytes'] / 2**30:.2f} GiB (SHA-256 manifest, fsync), "
            f"median of {len(pr)} alternated pairs (pair ratios {min(pr):.2f}–{max(pr):.2f}x)",
            ms(ms_), f"`save_file` + fsync + SHA-256 of the file {ms(ss)}",
            f"{statistics.median(pr):.2f}x", "<= 1.0x", statistics.median(pr) <= 1.0)

    if "pd_mz" in R:
        pd = med(R["pd_paddle"]["secs"])
        mo = med(R["pd_mz"]["owned"])
        row(f"P6 `.pdiparams` ({R['pd_mz']['records']} records) into owned memory "
            "(`TensorFile::records_owned`)", ms(mo), f"Paddle `load_combine` {ms(pd)}",
            f"{mo / pd:.2f}x", "<= 0.4x", mo <= 0.4 * pd)
        fl = med(R["pd_floor"]["reused"])
        ff = med(R["pd_floor"]["fresh"])
        row("  (floor: the file read from the page cache on both cores into memory already "
            "touched)", ms(fl), f"Paddle `load_combine` {ms(pd)}", f"{fl / pd:.2f}x", "", None)
        row("  (floor: the same into fresh memory, an anonymous map)", ms(ff),
            f"Paddle `load_combine` {ms(pd)}", f"{ff / pd:.2f}x", "", None)
    else:
        row("P6 `.pdiparams` into owned memory", "skipped: no Paddle venv (--with-paddle)",
            "Paddle `load_combine`", "", "<= 0.4x", None)

    if "remote" in R:
        rm = R["remote"]
        if "missing" in rm:
            row("Remote read throughput (nginx on 127.0.0.1)", "not measured", rm["missing"],
                "", "", None)
        else:
            c, p_, r_ = (med(rm["secs"][k]) for k in ("curl", "cp", "read"))
            gib = rm["bytes"] / 2**30
            row(f"Remote: `modelzip cp http://127.0.0.1:PORT/L.mz local` ({gib:.2f} GiB, "
                f"nginx), median of {len(rm['secs']['cp'])}, peak RSS "
                f"{rm['rss']['cp'] / 2**20:.0f} MiB", ms(p_), f"`curl -o` {ms(c)}",
                f"{p_ / c:.2f}x", "<= 1.0x", p_ <= c)
            largest = rm["read"]["largest"]
            limit = largest + (64 << 20)
            row(f"Remote: every tensor ({rm['read']['tensors']}) through `Archive::open_url`,"
                f" peak RSS {rm['rss']['read'] / 2**20:.0f} MiB (largest tensor "
                f"{largest / 2**20:.1f} MiB)", ms(r_), f"`curl -o` {ms(c)}",
                f"{r_ / c:.2f}x", "<= 1.0x and RSS <= largest + 64 MiB",
                r_ <= c and rm["rss"]["read"] <= limit)

    print(f"\nissue 27's table ({R['mode']}); load average (1/5/15 min) at start "
          f"{R['load_start']}, P4 {R.get('load_p4')}, P5 {R.get('load_p5')}, PY "
          f"{R.get('load_py')}, remote {R.get('load_remote')}, end {R['load_end']}\n")
    head = ("what", "now", "floor", "ratio", "goal", "met?")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print(f"\nP4 repetitions (s): pack {fmt_list(p4['pack'])}; cat + sync "
          f"{fmt_list(p4['cat'])}; fresh pack {fmt_list(p4['fresh'])}")
    if "missing" not in p5:
        for key in ("nosum", "sum"):
            print(f"P5 {key} (s): tags {fmt_list(p5[key]['tags'])}; zipinfo "
                  f"{fmt_list(p5[key]['zipinfo'])}")
    if "py" in R:
        P = R["py"]
        print(f"PY2 pairs (s, modelzip.save / save_file + fsync + SHA-256): " + ", ".join(
            f"{m:.3f}/{s:.3f}" for m, s in zip(P["raw"]["mz_save"], P["raw"]["st_save_sha"])))
        print(f"Py1 repetitions (ms): views {fmt_list(P['raw']['mz_views'], 1e3, 2)}; "
              f"load_file {fmt_list(P['raw']['st_load'], 1e3, 1)}")


def fmt_list(xs, scale=1.0, digits=3):
    return ", ".join(f"{x * scale:.{digits}f}" for x in xs)


def report(R):
    rows = []  # (id, what, modelzip, peer name, peer, ratio, target, met)

    def ms(s):
        return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s"

    def row(pid, what, mz, peer_name, peer, target, ok, ratio=None):
        if ratio is None and isinstance(mz, float) and isinstance(peer, float) and peer:
            ratio = f"{mz / peer:.2f}x"
        rows.append((pid, what, ms(mz) if isinstance(mz, float) else mz, peer_name,
                     ms(peer) if isinstance(peer, float) else peer, ratio or "", target,
                     "yes" if ok else "NO"))

    gib = R["tensor_bytes"] / 2**30
    ld = R["load"]
    mz, st = med(ld["mz"]), med(ld["st"])
    row("P1", f"load tag ({gib:.2f} GiB, 200 tensors) to owned memory", mz,
        "safetensors crate (fs::read+deserialize)", st, "<= 0.8x", mz <= 0.8 * st)
    row("", "", "", "Python safetensors.numpy.load_file", med(R["py_st_load"]["secs"]), "", True,
        f"{mz / med(R['py_st_load']['secs']):.2f}x")
    row("", "", "", "Python zipfile read of every tensor", med(R["py_zip_read"]["secs"]), "",
        True, f"{mz / med(R['py_zip_read']['secs']):.2f}x")

    vl, v16, vm = (med(R[k]["secs"]) for k in ("view_L", "view_L16", "view_M"))
    nl, nm = R["view_L"]["tensors"], R["view_M"]["tensors"]
    row("P2", f"open + view {nl} tensors, L vs L/16", vl, "same on L/16", v16, "< 2x",
        vl / v16 < 2)
    per_k = vl / nl * 1000
    row("P2", "  per 1,000 tensors (L)", per_k, "", "", "< 1 ms", per_k < 1e-3, "")
    row("P2", "  per 1,000 tensors (L), issue 16's target", per_k, "", "", "< 2 ms",
        per_k < 2e-3, "")
    if "views" in R["view_L"]:
        o, v, c = (med(R["view_L"][k]) for k in ("open", "views", "close"))
        rows.append(("", f"  L phases: open+latest {ms(o)}, views {ms(v)} "
                     f"({v / nl * 1e6:.3f} ms per 1,000), close {ms(c)}", "", "", "", "", "",
                     "(info)"))
    row("P2", f"  open M ({R['m_entries']} entries) + view one tag of {nm}", vm, "", "",
        "< 1 ms per 1,000 entries", vm / R["m_entries"] * 1000 < 1e-3,
        f"{vm / R['m_entries'] * 1e6:.2f} ms/1k entries")

    for k, label in (("save", "no fsync"), ("save_fsync", "fsync")):
        s = R[k]
        mz, st = med(s["mz"]), med(s["st"])
        row("P3", f"save tag + SHA-256 manifest ({label})", mz,
            f"safetensors serialize_to_file ({label})", st, "<= 1.6x", mz <= 1.6 * st)
        if s.get("st_sha256"):
            ss = med(s["st_sha256"])
            row("P3", f"  the same against the SHA-256 floor ({label})", mz,
                f"serialize_to_file + SHA-256 of the file ({label})", ss, "<= 1.0x",
                mz <= ss)
    pys = med(R["py_st_save"]["secs"])
    row("", "", "", "Python safetensors save_file (no fsync)", pys, "", True,
        f"{med(R['save']['mz']) / pys:.2f}x")

    if "py" in R:
        P = R["py"]
        row("PY1", f"Python: open + all {P['tensors']} tensors as numpy arrays (views) + close",
            P["mz_views"], "safetensors.numpy.load_file", P["st_load"], "<= 0.01x",
            P["mz_views"] <= 0.01 * P["st_load"])
        row("", "", "", "safe_open(framework='np') + get_tensor loop", P["st_open"], "", True,
            f"{P['mz_views'] / P['st_open']:.4f}x")
        row("PY1", "  the same, then arr.sum() of every array", P["mz_views_sum"],
            "load_file, then arr.sum()", P["st_load_sum"], "<= 1.0x",
            P["mz_views_sum"] <= P["st_load_sum"])
        row("", "", "", "safe_open loop, then arr.sum()", P["st_open_sum"], "", True,
            f"{P['mz_views_sum'] / P['st_open_sum']:.2f}x")
        rust = med(R["save_fsync"]["mz"])
        row("PY2", f"Python modelzip.save of the same {P['bytes'] / 2**30:.2f} GiB (fsync)",
            P["mz_save"], "the Rust library's save (peer, fsync)", rust, "<= 1.1x",
            P["mz_save"] <= 1.1 * rust)
        row("", "", "", "safetensors.numpy.save_file + fsync", P["st_save"], "", True,
            f"{P['mz_save'] / P['st_save']:.2f}x")

    for k, label in (("append", "no fsync"), ("append_fsync", "fsync")):
        s = R[k]
        a_, f_ = med(s["append"]), med(s["fresh"])
        row("P4", f"append {s['bytes'] / 2**20:.0f} MiB in place to "
            f"{s['base_bytes'] / 2**30:.2f} GiB ({label})", a_, "same to a fresh archive", f_,
            "<= 1.3x", a_ <= 1.3 * f_)

    if "append_cli" in R:
        s = R["append_cli"]
        a_, f_ = med(s["append"]), med(s["fresh"])
        row("P4", f"CLI: modelzip pack BIG --tag ckpt DIR ({s['bytes'] / 2**20:.0f} MiB) onto "
            f"{s['base_bytes'] / 2**30:.2f} GiB", a_, "same DIR packed into a fresh archive", f_,
            "<= 1.1x", a_ <= 1.1 * f_)

    if "zipinfo_best" in R:
        t, z = min(R["tags_best"]), min(R["zipinfo_best"])
        row("P5", "modelzip tags on M, whole process, best of 7", t,
            "zipinfo -1 (Info-ZIP), whole process, best of 7", z, "<= 0.5x and < 60 ms",
            t <= 0.5 * z and t < 0.06)

    t, p = med(R["tags_proc"]), med(R["py_zip_proc"])
    name = "peer tags-standin (stand-in)" if R["tags_is_standin"] else "modelzip tags"
    row("P5", f"{name} on M, whole process", t, "python3 zipfile namelist, whole process", p,
        "< 100 ms and <= 0.2x", t < 0.1 and t <= 0.2 * p)
    row("", "", "", "  zipfile namelist in-process only", med(R["py_zip_inproc"]["secs"]), "",
        True, f"{t / med(R['py_zip_inproc']['secs']):.2f}x")

    if "pd_mz" in R:
        pd = med(R["pd_paddle"]["secs"])
        n = R["pd_mz"]["records"]
        mz, mo = med(R["pd_mz"]["read"]), med(R["pd_mz"]["owned"])
        mm = med(R["pd_mz"]["mapped"])
        if "touched" in R["pd_mz"]:
            # The library's reading path (TensorFile: mmap + decode), with every 4 KiB page
            # of every record's data then read, so all bytes are resident and readable.
            mt = med(R["pd_mz"]["touched"])
            row("P6", f"read .pdiparams ({n} records): TensorFile + decode + read every page",
                mt, "paddle.static.load_inference_model", pd, "<= 0.5x", mt <= 0.5 * pd)
        row("P6" if "touched" not in R["pd_mz"] else "",
            "  into owned tensors: TensorFile::records_owned (pread)", mo,
            "" if "touched" in R["pd_mz"] else "paddle.static.load_inference_model",
            "" if "touched" in R["pd_mz"] else pd, "<= 0.5x", mo <= 0.5 * pd, f"{mo / pd:.2f}x")
        row("", "  fs::read + decode (borrowed views of the buffer)", mz, "", "", "",
            mz <= 0.5 * pd, f"{mz / pd:.2f}x")
        row("", "  TensorFile + decode, data not touched", mm, "", "", "", True,
            f"{mm / pd:.4f}x")
    else:
        rows.append(("P6", "skipped: no Paddle (see --paddle-venv / --with-paddle)", "", "",
                     "", "", "<= 0.5x", "n/a"))

    tb = R["tensor_bytes"]
    lim = tb + (64 << 20)
    for k, label in (("save", "save"), ("load", "load")):
        m, s = R["rss"][k + "_mz"], R["rss"][k + "_st"]
        row("P7", f"peak RSS of {label} (tensors {tb / 2**20:.0f} MiB)", f"{m / 2**20:.0f} MiB",
            "safetensors crate", f"{s / 2**20:.0f} MiB", f"<= {lim / 2**20:.0f} MiB", m <= lim,
            f"{m / s:.2f}x")

    ph = R["physical"]
    head = ("", "figure", "modelzip", "peer", "peer figure", "ratio", "target", "met")
    print(f"\nmode: {R['mode']}, medians of {R['reps']} reps; machine: {platform.node()}, "
          f"{os.cpu_count()} CPUs; memcpy {ph['memcpy_gbps']} GB/s, "
          f"page-cache read {ph['read_gbps']} GB/s, SHA-256 (sha2, SHA-NI) {ph['sha256_gbps']} "
          f"GB/s, CRC-32 {ph['crc32_gbps']} GB/s\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    L = tb
    print(f"\nphysical floor for L: memcpy {L / (float(ph['memcpy_gbps']) * 1e9) * 1e3:.0f} ms, "
          f"page-cache read {L / (float(ph['read_gbps']) * 1e9) * 1e3:.0f} ms, "
          f"SHA-256 of every byte {L / (float(ph['sha256_gbps']) * 1e9) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
