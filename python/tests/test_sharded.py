"""Sharded saves (issue 25): processes (``multiprocessing``, spawned, no framework) each
write row shards of 20 tensors and their Adam moments into one tag with
``modelzip.sharded.save``; the committed tag equals a single-process save of the same
arrays (`verify`, `diff`, `export-paddle` byte for byte); a rank killed before its
marker, rank 0 killed after staging, two groups on one archive and ranks that disagree
leave the archive as it was, with errors naming the ranks. The loading side (3
processes loading the 4-way save reading only their rows) is in test_slices.py.
"""

from __future__ import annotations

import filecmp
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import modelzip
import modelzip.sharded as zs
from conftest import PADDLE_FIXTURES, run_cli

TENSORS = 20


def full(name: str, seed: int = 0) -> np.ndarray:
    """Tensor `name` (`layerNN.w`): rows of mixed sizes, float32 and float16."""
    i = int(name[5:7])
    shape = (37 + 5 * i, 16) if i % 2 == 0 else (29 + 3 * i, 24)
    dt = np.float32 if i % 2 == 0 else np.float16
    return np.random.default_rng(1000 * seed + i).standard_normal(shape).astype(dt)


def names() -> list:
    return [f"layer{i:02d}.w" for i in range(TENSORS)]


def moments(name: str, seed: int) -> list:
    w = full(name, seed)
    return [(w * 0.1).astype(np.float32), (w * w).astype(np.float32)]


def rank_main(path: str, tag: str, rank: int, world: int, seed: int, timeout: float, out, shape_of=None, stall=None) -> None:
    """One rank: its rows of every tensor and of its two moments; puts its report or its
    error message (``"error: ..."``) on `out`. Rank `stall` sleeps first (to be killed)."""
    if rank == stall:
        time.sleep(600)
    try:
        shards, updater = {}, {}
        for n in names():
            w = full(n, seed)
            if shape_of is not None and rank == 1:
                w = np.concatenate([w, w[:1]])  # rank 1 was told another shape
            a, b = zs.row_range(len(w), rank, world)
            shards[n] = (w[a:b], a, w.shape)
            updater[n] = [(m[a:b], a, m.shape) for m in moments(n, seed)]
        meta = {"step": seed} if rank == 0 else None
        r = zs.save(path, tag, rank, world, shards, updater, meta, timeout=timeout, fsync=False)
        out.put((rank, r))
    except modelzip.ModelzipError as e:
        out.put((rank, f"error: {e}"))


def start(ctx, out, path: Path, tag: str, ranks, world: int, seed: int = 1, timeout: float = 60, **kw) -> dict:
    procs = {}
    for r in ranks:
        p = ctx.Process(target=rank_main, args=(str(path), tag, r, world, seed, timeout, out), kwargs=kw)
        p.start()
        procs[r] = p
    return procs


def collect(out, procs: dict) -> dict:
    got = {}
    for _ in procs:
        rank, r = out.get(timeout=300)
        got[rank] = r
    for p in procs.values():
        p.join(timeout=60)
    return got


def single_save(path: Path, tag: str, seed: int) -> None:
    modelzip.save(
        path,
        tag,
        {n: full(n, seed) for n in names()},
        {n: moments(n, seed) for n in names()},
        {"step": seed},
    )


def contents(path: Path) -> dict:
    """What any reader sees of an archive (Python's zipfile here): every entry's bytes. A
    rolled-back sharded save leaves this as it was, not the file's bytes: a staging that
    readers may hold is not cut; its extension's blocks are freed instead."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def allocated(path: Path) -> int:
    """Bytes the file occupies on disk (holes not counted)."""
    return os.stat(path).st_blocks * 512


def leftovers(path: Path) -> list:
    """Files beside the archive other than it, its lock and lease."""
    keep = {path.name, path.name + ".lock", path.name + ".sharded-lease"}
    return sorted(p.name for p in path.parent.iterdir() if p.name not in keep)


@pytest.fixture(scope="module")
def ctx():
    return multiprocessing.get_context("spawn")


@pytest.mark.parametrize("world", [4, 8])
def test_processes_write_one_tag_equal_to_a_single_process_save(tmp, ctx, world):
    path = tmp / "run.zip"
    single_save(path, "single", seed=1)
    out = ctx.Queue()
    got = collect(out, start(ctx, out, path, "sharded", range(world), world))
    for rank, r in got.items():
        assert isinstance(r, dict), r
        assert r["shards"] == 3 * TENSORS and r["world_size"] == world
    assert len({r["plan"] for r in got.values()}) == 1
    with modelzip.open(path) as ar:
        assert ar.tags == ["single", "sharded"]
        t = ar.tag("sharded")
        for n in names():
            assert np.array_equal(t[n], full(n, 1)), n
            for got_m, want in zip(t.updater(n), moments(n, 1)):
                assert np.array_equal(got_m, want), n
        assert t.metadata["sharded"]["world_size"] == world
        assert t.metadata["step"] == 1
    assert run_cli("verify", path).returncode == 0
    shown = run_cli("show", path, "--tag", "sharded")
    assert f"sharded: written by {world} ranks in one save" in shown.stdout, shown.stdout
    import json
    doc = json.loads(run_cli("show", path, "--tag", "sharded", "--json").stdout)
    assert doc["sharded"]["world_size"] == world
    assert json.loads(run_cli("show", path, "--tag", "single", "--json").stdout)["sharded"] is None
    # `tags` marks the sharded tag with its ranks (a column only when a tag is sharded).
    rows = json.loads(run_cli("tags", path, "--json").stdout)["tags"]
    assert [(r["name"], r["sharded"]) for r in rows] == [("single", None), ("sharded", {"world_size": world})]
    table = run_cli("tags", path).stdout.splitlines()
    assert table[0].split()[-1] == "ranks", table
    assert table[1].split()[-1] == "-" and table[2].split()[-1] == str(world), table
    # The same tensors as the single-process save: diff finds nothing changed.
    d = run_cli("diff", path, "single", "sharded", "--json", "--exit-code")
    assert d.returncode == 0, d.stdout
    assert leftovers(path) == []


def wait_for(p: Path, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not p.exists():
        assert time.monotonic() < end, f"{p} never appeared"
        time.sleep(0.01)


def test_a_rank_killed_before_its_marker_times_out_naming_it_and_changes_nothing(tmp, ctx):
    path = tmp / "run.zip"
    single_save(path, "single", seed=1)
    before = contents(path)
    out = ctx.Queue()
    procs = start(ctx, out, path, "step-2", range(4), 4, seed=2, timeout=4, stall=2)
    # Killed after rank 0 staged the save, before it wrote anything.
    wait_for(Path(f"{path}.sharded-step-2"))
    os.kill(procs[2].pid, signal.SIGKILL)
    procs[2].join()
    del procs[2]
    got = collect(out, procs)
    assert "waiting for rank 2 of 4" in got[0] and "nothing was committed" in got[0], got[0]
    for r in (1, 3):
        assert "was not committed" in got[r], got[r]
    assert contents(path) == before
    assert leftovers(path) == []
    # A later save by all four succeeds.
    got = collect(out, start(ctx, out, path, "step-2", range(4), 4, seed=2))
    assert all(isinstance(r, dict) for r in got.values()), got
    assert run_cli("verify", path).returncode == 0


def test_rank_0_killed_after_staging_leaves_the_archive_readable_and_the_next_writer_rolls_it_back(tmp, ctx):
    path = tmp / "run.zip"
    single_save(path, "single", seed=1)
    before = contents(path)
    before_blocks = allocated(path)
    out = ctx.Queue()
    procs = start(ctx, out, path, "step-2", range(3), 3, seed=2, timeout=3)
    wait_for(Path(f"{path}.sharded-step-2"))
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].join()
    del procs[0]
    got = collect(out, procs)
    for r in (1, 2):
        assert "error:" in got[r] and "not committed" in got[r] or "ended before" in got[r], got[r]
    # Staged but never committed: the archive reads as before and verifies.
    with modelzip.open(path) as ar:
        assert ar.tags == ["single"]
    assert run_cli("verify", path).returncode == 0
    # The next writer rolls the staging back first (the extension's blocks freed), then
    # adds its tag.
    modelzip.save(path, "next", {"x": np.arange(3, dtype=np.float32)})
    with modelzip.open(path) as ar:
        assert ar.tags == ["single", "next"]
    after = contents(path)
    assert {n: b for n, b in after.items() if not n.startswith("next/")} | {
        "tags.txt": before["tags.txt"], "_summary.txt": before["_summary.txt"]
    } == before
    if sys.platform == "linux":
        assert allocated(path) < before_blocks + 256 * 1024, (before_blocks, allocated(path))
    assert run_cli("verify", path).returncode == 0
    assert leftovers(path) == []


def test_rank_0_killed_while_staging_the_next_reader_rolls_the_staging_back(tmp, ctx):
    path = tmp / "run.zip"
    single_save(path, "single", seed=1)
    before = contents(path)
    size = path.stat().st_size
    out = ctx.Queue()
    procs = start(ctx, out, path, "step-2", [0], 3, seed=2, timeout=60)
    wait_for(Path(f"{path}.sharded-step-2"))
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].join()
    # What a kill during the staging leaves: the undo record, and the staged file cut
    # short (here inside the extension): not an archive to any reader.
    with open(path, "r+b") as f:
        f.truncate(size + 8192)
    # A reader finds the dead staging and rolls it back to the old bytes: it reads.
    with modelzip.open(path) as ar:
        assert ar.tags == ["single"]
    assert contents(path) == before
    assert path.stat().st_size == size
    assert not Path(f"{path}.sharded-undo").exists()
    assert run_cli("verify", path).returncode == 0
    assert leftovers(path) == []


def test_two_groups_on_one_archive_one_commits_the_other_fails_cleanly(tmp, ctx):
    path = tmp / "run.zip"
    single_save(path, "single", seed=1)
    out = ctx.Queue()
    # Group A's rank 0 stages and holds the archive's write lock, waiting for its rank 1.
    a0 = start(ctx, out, path, "a", [0], 2, seed=2, timeout=60)
    wait_for(Path(f"{path}.sharded-a"))
    # Group B cannot take the lock: its rank 0 fails at once, its rank 1 times out.
    got_b = collect(out, start(ctx, out, path, "b", [0, 1], 2, seed=3, timeout=3))
    assert "being written by another" in got_b[0] or "locked" in got_b[0].lower(), got_b[0]
    assert "did not start" in got_b[1], got_b[1]
    # A's rank 1 arrives: A commits.
    got_a = collect(out, {**a0, **start(ctx, out, path, "a", [1], 2, seed=2, timeout=60)})
    assert all(isinstance(r, dict) for r in got_a.values()), got_a
    with modelzip.open(path) as ar:
        assert ar.tags == ["single", "a"]
        assert np.array_equal(ar.tag("a")["layer03.w"], full("layer03.w", 2))
    assert run_cli("verify", path).returncode == 0


def test_ranks_given_different_descriptions_are_refused_naming_them(tmp, ctx):
    path = tmp / "run.zip"
    single_save(path, "single", seed=1)
    before = contents(path)
    out = ctx.Queue()
    got = collect(out, start(ctx, out, path, "s", range(2), 2, seed=2, timeout=3, shape_of=True))
    assert "differs from rank 0's" in got[1], got[1]
    assert "waiting for rank 1 of 2" in got[0], got[0]
    assert contents(path) == before


def test_bad_arguments_are_refused_before_anything_is_written(tmp):
    path = tmp / "run.zip"
    w = np.zeros((4, 2), np.float32)
    with pytest.raises(modelzip.ModelzipError, match="rank 2 is not below the world size 2"):
        zs.save(path, "t", 2, 2, {"w": (w, 0, w.shape)})
    with pytest.raises(modelzip.ModelzipError, match=r"must be \(rows, first_row, global_shape\)"):
        zs.save(path, "t", 0, 1, {"w": w})
    with pytest.raises(modelzip.ModelzipError, match=r"spans 2..6 of dimension 0, past the global shape \[4, 2\]"):
        zs.save(path, "t", 0, 1, {"w": (w, 2, w.shape)}, timeout=1)
    with pytest.raises(modelzip.ModelzipError, match="does not match the 2 dimensions"):
        zs.save(path, "t", 0, 1, {"w": (w, (0,), w.shape)}, timeout=1)
    with pytest.raises(modelzip.ModelzipError, match=r"spans 1..3 of dimension 1"):
        zs.save(path, "t", 0, 1, {"w": (w, (0, 1), w.shape)}, timeout=1)
    # A world size past the limit is refused before rank 0 sizes anything by it.
    many = tmp / "many.zip"
    with pytest.raises(modelzip.ModelzipError, match="more than modelzip's limit of 131072"):
        zs.save(many, "t", 0, 2**32 - 1, {"w": (w, 0, w.shape)})
    assert not many.exists()
    # Integers are never truncated, and each bad one is named (first_row=1.5 was row 1, a
    # negative rank pyo3's OverflowError naming nothing, a negative first_row a TypeError).
    never = tmp / "never.zip"
    for args, kw, named in [
        ((0, 1, {"w": (w, 1.5, w.shape)}), {}, "shard of 'w': first_row=1.5 is invalid"),
        ((0, 1, {"w": (w, -1, w.shape)}), {}, "shard of 'w': first_row=-1 is invalid: it must be an integer >= 0"),
        ((0, 1, {"w": (w, (0, 0.5), w.shape)}), {}, "shard of 'w': offsets[1]=0.5 is invalid"),
        ((0, 1, {"w": (w, 0, (4.9, 2))}), {}, "shard of 'w': global_shape[0]=4.9 is invalid"),
        ((0, 1, {"w": (w, 0, 4)}), {}, "shard of 'w': global_shape=4 is invalid"),
        ((-1, 1, {"w": (w, 0, w.shape)}), {}, "rank=-1 is invalid: it must be an integer >= 0"),
        ((0.0, 1, {"w": (w, 0, w.shape)}), {}, "rank=0.0 is invalid"),
        ((0, -2, {"w": (w, 0, w.shape)}), {}, "world_size=-2 is invalid: it must be an integer >= 1"),
        ((0, 1.0, {"w": (w, 0, w.shape)}), {}, "world_size=1.0 is invalid"),
        ((0, 2**32, {"w": (w, 0, w.shape)}), {},
         "world_size=4294967296 is invalid: it must be below 2**32 (a u32; modelzip allows at most 131072 ranks)"),
        ((0, 1, {"w": (w, 0, w.shape)}), {"timeout": "1"}, "timeout='1' is invalid"),
        ((0, 1, {"w": (w, 0, w.shape)}), {"timeout": -1}, "timeout=-1 is invalid"),
    ]:
        with pytest.raises(modelzip.ModelzipValueError) as e:
            zs.save(never, "t", *args, **kw)
        assert e.value.kind == "invalid_input" and named in str(e.value), str(e.value)
    assert not never.exists()
    # numpy integers are integers
    r = zs.save(tmp / "np.zip", "t", np.int64(0), np.uint32(1), {"w": (w, np.int32(0), (np.int64(4), 2))}, fsync=False)
    assert r["tag"] == "t"
    # A timeout past what the clock counts is "forever", not a panic.
    r = zs.save(tmp / "long.zip", "t", 0, 1, {"w": (w, 0, w.shape)}, timeout=1e20, fsync=False)
    assert r["tag"] == "t"
    # s3:// is written (test_sharded_s3.py); other stores are refused before any request.
    with pytest.raises(modelzip.ModelzipError, match="cannot save a sharded tag to gs://b/k"):
        zs.save("gs://b/k", "t", 0, 1, {"w": (w, 0, w.shape)})
    assert zs.row_range(10, 3, 4) == (8, 10) and zs.row_range(10, 0, 4) == (0, 3)
    # A group id is part of the plan: the same save by another group has another digest.
    plans = [zs.save(tmp / f"g{i}.zip", "t", 0, 1, {"w": (w, 0, w.shape)}, group=g, fsync=False)["plan"]
             for i, g in enumerate([None, "job-1", "job-1", "job-2"])]
    assert plans[1] == plans[2] and len({plans[0], plans[1], plans[3]}) == 3, plans
    # The one-rank save that failed rolled back: no tag, the archive (created) verifies.
    with modelzip.open(path) as ar:
        assert ar.tags == []


def paddle_rank(path: str, rank: int, world: int, params: dict, graph: bytes, out) -> None:
    try:
        shards = {}
        for n, w in params.items():
            a, b = zs.row_range(len(w) if w.ndim else 1, rank, world)
            shards[n] = (w[a:b] if w.ndim else (w if rank == 0 else None), a, w.shape) + (() if w.ndim or rank == 0 else (w.dtype,))
        g = ("programdesc", graph) if rank == 0 else None
        out.put((rank, zs.save(path, "sharded", rank, world, shards, graph=g, timeout=60, fsync=False)))
    except modelzip.ModelzipError as e:
        out.put((rank, f"error: {e}"))


def test_a_sharded_paddle_model_exports_as_paddle_wrote_it_and_paddle_runs_it(tmp, ctx):
    """The mlp fixture's parameters (written by Paddle) saved by 3 processes with the
    fixture's graph: export-paddle gives Paddle's own files byte for byte, and Paddle
    runs the export with the original's outputs, bit for bit, in one process."""
    pdmodel, pdiparams = PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams"
    path = tmp / "m.zip"
    modelzip.import_paddle(path, "imported", pdmodel, pdiparams)
    with modelzip.open(path) as ar:
        params = {n: np.array(a) for n, a in ar.tag("imported").items()}
    assert params
    out = ctx.Queue()
    procs = {}
    for r in range(3):
        p = ctx.Process(target=paddle_rank, args=(str(path), r, 3, params, pdmodel.read_bytes(), out))
        p.start()
        procs[r] = p
    got = collect(out, procs)
    assert all(isinstance(r, dict) for r in got.values()), got
    (tmp / "out").mkdir()
    run_cli("export-paddle", path, "--tag", "sharded", "--out", tmp / "out" / "mlp")
    assert (tmp / "out" / "mlp.pdmodel").read_bytes() == pdmodel.read_bytes()
    assert (tmp / "out" / "mlp.pdiparams").read_bytes() == pdiparams.read_bytes()
    try:
        import paddle  # noqa: F401
    except ImportError:
        if os.environ.get("MODELZIP_REQUIRE_PADDLE") == "1":
            raise
        pytest.skip("paddlepaddle is not installed (./test.sh installs it)")
    script = (
        "import os, sys, numpy as np\n"
        "os.environ['FLAGS_enable_pir_api'] = '0'\n"
        "import paddle\n"
        "paddle.enable_static()\n"
        "exe = paddle.static.Executor(paddle.CPUPlace())\n"
        "x = np.load(sys.argv[3])\n"
        "def run(prefix):\n"
        "    prog, feeds, fetches = paddle.static.load_inference_model(prefix, exe)\n"
        "    return exe.run(prog, feed={feeds[0]: x}, fetch_list=fetches)[0]\n"
        "want, got = run(sys.argv[1]), run(sys.argv[2])\n"
        "assert got.tobytes() == want.tobytes(), np.abs(got - want).max()\n"
        "print('ok', got.shape)\n"
    )
    env = dict(os.environ, FLAGS_enable_pir_api="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(PADDLE_FIXTURES / "mlp"), str(tmp / "out" / "mlp"),
         str(PADDLE_FIXTURES / "mlp.input.npy")],
        capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("ok"), proc.stdout


def ckpt_rank(path: str, rank: int, world: int, steps: list, out) -> None:
    """A sharded training loop's rank: a checkpointer with keep_last=2, one save a step;
    the embedding never changes (stored once), `w` does."""
    try:
        # A group id (the job's), the same on every rank: part of each save's plan.
        ck = modelzip.Checkpointer(path, keep_last=2, rank=rank, world_size=world, timeout=60, group="job-7")
        reports = []
        for step in steps:
            shards = {}
            for n, seed in (("layer00.w", 0), ("layer01.w", step)):
                w = full(n, seed)
                a, b = zs.row_range(len(w), rank, world)
                shards[n] = (w[a:b], a, w.shape)
            m = moments("layer01.w", step)
            a, b = zs.row_range(len(m[0]), rank, world)
            upd = {"layer01.w": [(x[a:b], a, x.shape) for x in m]}
            reports.append(ck.save(step, shards, upd, {"loss": 1.0 / (step + 1)}))
        out.put((rank, reports))
    except modelzip.ModelzipError as e:
        out.put((rank, f"error: {e}"))


def test_a_sharded_checkpointer_records_metrics_keeps_the_last_two_and_stores_frozen_tensors_once(tmp, ctx):
    path = tmp / "run.zip"
    out = ctx.Queue()
    procs = {}
    for r in range(3):
        p = ctx.Process(target=ckpt_rank, args=(str(path), r, 3, [1, 2, 3, 4], out))
        p.start()
        procs[r] = p
    got = collect(out, procs)
    assert all(isinstance(v, list) for v in got.values()), "\n".join(map(str, got.items()))
    assert [r["tag"] for r in got[0]] == [f"step-00000000{s}" for s in (1, 2, 3, 4)]
    assert [r["removed"] for r in got[0]] == [[], [], ["step-000000001"], ["step-000000002"]]
    assert all(r["removed"] == [] for r in got[1])
    ck = modelzip.Checkpointer(path)
    assert ck.checkpoints() == ["step-000000003", "step-000000004"]
    c = ck.latest()
    assert c.step == 4 and c.metrics == {"loss": 0.2}
    assert np.array_equal(c.params["layer01.w"], full("layer01.w", 4))
    assert np.array_equal(c.params["layer00.w"], full("layer00.w", 0))
    with modelzip.open(path) as ar:
        assert ar.tag("step-000000004").metadata["retention"]["keep_last"] == 2
        params = ar.tag("step-000000004").items()
        assert len(dict(params)) == 2
    # The frozen tensor is one file, re-homed as older checkpoints went.
    names = zipfile_names(path)
    frozen = [n for n in names if n.endswith(".lodtensor")]
    assert len(frozen) == 1 + 2 * 3, frozen  # layer00 once; layer01 + 2 moments per checkpoint
    assert run_cli("verify", path).returncode == 0


def zipfile_names(path: Path) -> list:
    import zipfile

    with zipfile.ZipFile(path) as z:
        return z.namelist()


# Tensor parallelism: shards that split a dimension past the first (blocks).

TP = {"mlp.w1": (64, 96), "mlp.w2": (96, 64), "attn.qkv": (40, 48)}


def tp_full(name: str, seed: int) -> np.ndarray:
    i = sorted(TP).index(name)
    return np.random.default_rng(77 * seed + i).standard_normal(TP[name]).astype(np.float32)


def tp_block(name: str, rank: int, world: int):
    """Rank `rank`'s block of `name` as (row range, column range): w1 column-parallel
    (split on dim 1), w2 row-parallel (dim 0), qkv a 2 x 2 mesh."""
    rows, cols = TP[name]
    if name == "mlp.w1":
        a, b = zs.row_range(cols, rank, world)
        return (0, rows), (a, b)
    if name == "mlp.w2":
        return zs.row_range(rows, rank, world), (0, cols)
    i, j = divmod(rank, 2)
    return zs.row_range(rows, i, 2), zs.row_range(cols, j, 2)


def tp_rank(path: str, rank: int, world: int, out) -> None:
    try:
        shards, updater = {}, {}
        for n in TP:
            w = tp_full(n, 1)
            (r0, r1), (c0, c1) = tp_block(n, rank, world)
            shards[n] = (w[r0:r1, c0:c1], (r0, c0), w.shape)
            updater[n] = [((w * k)[r0:r1, c0:c1], (r0, c0), w.shape) for k in (0.5, 2.0)]
        out.put((rank, zs.save(path, "tp", rank, world, shards, updater, fsync=False, timeout=60)))
    except modelzip.ModelzipError as e:
        out.put((rank, f"error: {e}"))


def test_tensor_parallel_blocks_commit_the_global_tensors_and_equal_a_single_save(tmp, ctx):
    import zipfile

    path = tmp / "run.zip"
    out = ctx.Queue()
    procs = {}
    for r in range(4):
        procs[r] = ctx.Process(target=tp_rank, args=(str(path), r, 4, out))
        procs[r].start()
    got = collect(out, procs)
    for r in got.values():
        assert isinstance(r, dict), r
    with modelzip.open(path) as ar:
        t = ar.tag("tp")
        for n in TP:
            assert np.array_equal(t[n], tp_full(n, 1)), n
            # A column-parallel reader of another world size reads its columns.
            assert np.array_equal(t.get_slice(n)[:, 5:17], tp_full(n, 1)[:, 5:17]), n
    # Python's zipfile checks each entry's CRC-32 (combined by rank 0 from the ranks'
    # positioned CRCs, no byte read again).
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        shards_txt = z.read("tp/shards.txt").decode()
    assert " box=0:64,0:24\n" in shards_txt, shards_txt
    assert run_cli("verify", path).returncode == 0
    # One process saving the same arrays: the same tensors (diff finds nothing changed).
    modelzip.save(
        path,
        "single",
        {n: tp_full(n, 1) for n in TP},
        {n: [tp_full(n, 1) * 0.5, tp_full(n, 1) * 2.0] for n in TP},
    )
    d = run_cli("diff", path, "tp", "single", "--json", "--exit-code")
    assert d.returncode == 0, d.stdout
    assert leftovers(path) == []


def test_blocks_that_overlap_are_refused_naming_the_ranks_and_element(tmp, ctx):
    path = tmp / "run.zip"
    modelzip.save(path, "init", {"x": np.zeros(2, np.float32)})
    before = contents(path)
    w = np.ones((4, 6), np.float32)
    # Rank 1's block starts a column early: both write column 2.
    blocks = {0: (w[:, :3], (0, 0)), 1: (w[:, 2:], (0, 2))}
    errors = {}
    import threading

    def one(r):
        try:
            zs.save(path, "s", r, 2, {"w": (blocks[r][0], blocks[r][1], w.shape)}, timeout=20, fsync=False)
        except modelzip.ModelzipError as e:
            errors[r] = str(e)

    ts = [threading.Thread(target=one, args=(r,)) for r in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert "ranks 0 and 1 both wrote element [0, 2]" in errors[0], errors
    assert contents(path) == before


def test_a_checkpointer_rank_of_another_group_is_refused(tmp):
    """The Checkpointer's `group` reaches the plan: rank 1 of job "b" finds job "a"'s save
    of the same step and is refused; job "a"'s rank 0 then times out waiting for its own
    rank 1, and nothing is committed."""
    import threading

    path = tmp / "run.zip"
    modelzip.save(path, "init", {"x": np.zeros(2, np.float32)})
    w = np.ones((4, 3), np.float32)
    errors = {}

    def one(rank, group):
        ck = modelzip.Checkpointer(path, rank=rank, world_size=2, timeout=3, group=group)
        a, b = zs.row_range(4, rank, 2)
        try:
            ck.save(1, {"w": (w[a:b], a, w.shape)})
        except modelzip.ModelzipError as e:
            errors[rank] = str(e)

    t0 = threading.Thread(target=one, args=(0, "a"))
    t0.start()
    deadline = time.time() + 30
    while not any(p.name.startswith("run.zip.sharded-step") for p in tmp.iterdir()) and time.time() < deadline:
        time.sleep(0.01)
    one(1, "b")
    t0.join()
    assert "group ids differ" in errors.get(1, ""), errors
    assert "waiting for rank 1 of 2" in errors.get(0, ""), errors
    with modelzip.open(path) as ar:
        assert ar.tags == ["init"]
