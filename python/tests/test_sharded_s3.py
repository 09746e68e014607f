"""Sharded saves into an ``s3://`` archive (issue 25, docs/SHARDED.md "Object stores"):
4 and 8 processes (``multiprocessing``, spawned) write row shards of 20 tensors and their
Adam moments into one tag of an archive in moto (behind the counting, condition-enforcing
proxy of test_remote_append_s3.py, both on 127.0.0.1, started here); the committed tag
equals a single-process save of the same arrays (and a Paddle model exports byte for byte as
Paddle wrote it); large runs are copied by the store,
not uploaded again; a rank that never writes leaves the archive object as it was and no
object behind; tensor-parallel blocks commit too.
"""

from __future__ import annotations

import multiprocessing
import urllib.parse

import numpy as np
import pytest

import modelzip
import modelzip.sharded as zs
from conftest import cli_env, run_cli
from test_remote_append_s3 import BUCKET, Proxy, python_env, raw, s3  # noqa: F401 (fixture)
from test_sharded import (
    TENSORS,
    collect,
    full,
    moments,
    names,
    single_save,
    start,
    tp_full,
    tp_rank,
    TP,
)

MIB = 1 << 20


@pytest.fixture(scope="module")
def ctx():
    return multiprocessing.get_context("spawn")


def objects(env) -> list:
    """Every key of the bucket."""
    status, _, body = raw(env, "GET", f"/{BUCKET}?list-type=2")
    assert status == 200, body
    import re

    return sorted(urllib.parse.unquote(k) for k in re.findall(r"<Key>([^<]+)</Key>", body.decode()))


def etag(env, key: str):
    status, headers, _ = raw(env, "HEAD", f"/{BUCKET}/{key}")
    return headers.get("etag") if status == 200 else None


@pytest.mark.parametrize("world", [4, 8])
def test_processes_write_one_tag_of_an_s3_archive_equal_to_a_single_process_save(s3, ctx, tmp, monkeypatch, world):
    env, proxy = s3
    python_env(env, monkeypatch)
    key = f"sharded-{world}.zip"
    url = f"s3://{BUCKET}/{key}"
    local = tmp / "single.zip"
    single_save(local, "single", seed=1)
    cli_env(env, "cp", local, url)
    before = etag(env, key)
    out = ctx.Queue()
    got = collect(out, start(ctx, out, url, "sharded", range(world), world))
    for rank, r in got.items():
        assert isinstance(r, dict), r
        assert r["shards"] == 3 * TENSORS and r["world_size"] == world
    assert len({r["plan"] for r in got.values()}) == 1
    # Rank 0 reports its commit: the archive's version before and after.
    assert got[0]["previous_version"] == before and got[0]["version"] == etag(env, key)
    assert "bytes_uploaded" not in got[1]
    with modelzip.open(url) as ar:
        assert ar.tags == ["single", "sharded"]
        t = ar.tag("sharded")
        for n in names():
            assert np.array_equal(t[n], full(n, 1)), n
            for got_m, want in zip(t.updater(n), moments(n, 1)):
                assert np.array_equal(got_m, want), n
        assert t.metadata["sharded"]["world_size"] == world
    down = tmp / "down.zip"
    cli_env(env, "cp", url, down)
    assert run_cli("verify", down).returncode == 0
    d = run_cli("diff", down, "single", "sharded", "--json", "--exit-code")
    assert d.returncode == 0, d.stdout
    import zipfile

    with zipfile.ZipFile(down) as z:
        assert z.testzip() is None
    # Nothing of the save is left beside the archive.
    assert [k for k in objects(env) if k.startswith(key)] == [key]


def big_rank(url: str, rank: int, world: int, out) -> None:
    try:
        shards = {}
        for i in range(2):
            w = np.arange(1536 * 8192, dtype=np.float32).reshape(1536, 8192) + i
            a, b = zs.row_range(len(w), rank, world)
            shards[f"big{i}"] = (w[a:b], a, w.shape)
        out.put((rank, zs.save(url, "big", rank, world, shards, timeout=120, fsync=False)))
    except modelzip.ModelzipError as e:
        out.put((rank, f"error: {e}"))


def test_large_shards_are_copied_by_the_store_not_uploaded_again(s3, ctx, tmp, monkeypatch):
    env, proxy = s3
    python_env(env, monkeypatch)
    url = f"s3://{BUCKET}/big.zip"
    out = ctx.Queue()
    procs = {}
    for r in range(4):
        p = ctx.Process(target=big_rank, args=(url, r, 4, out))
        p.start()
        procs[r] = p
    got = collect(out, procs)
    for r in got.values():
        assert isinstance(r, dict), r
    data = 2 * 1536 * 8192 * 4
    assert sum(r["bytes_written"] for r in got.values()) == data
    c = got[0]
    assert c["previous_version"] is None  # created
    # Each rank's 12 MiB of each tensor is one staging range: copied by the store, but
    # for what tops the first part up to S3's 5 MiB minimum (headers before it).
    assert c["bytes_copied"] >= data - 12 * MIB, c
    assert c["bytes_uploaded"] < 12 * MIB, c
    with modelzip.open(url) as ar:
        for i in range(2):
            w = ar.latest()[f"big{i}"]
            assert w.shape == (1536, 8192)
            assert w[1000, 17] == 1000 * 8192 + 17 + i
    down = tmp / "big.zip"
    cli_env(env, "cp", url, down)
    assert run_cli("verify", down).returncode == 0


def test_a_rank_that_never_writes_times_out_and_leaves_the_object_as_it_was(s3, ctx, tmp, monkeypatch):
    env, proxy = s3
    python_env(env, monkeypatch)
    key = "stall.zip"
    url = f"s3://{BUCKET}/{key}"
    local = tmp / "single.zip"
    single_save(local, "single", seed=1)
    cli_env(env, "cp", local, url)
    before = etag(env, key)
    out = ctx.Queue()
    procs = start(ctx, out, url, "sharded", [0, 1, 2], 4, timeout=8)
    got = collect(out, procs)
    assert "timed out" in got[0] and "rank 3 of 4" in got[0], got[0]
    assert "nothing was committed" in got[0]
    for r in (1, 2):
        assert "was not committed" in got[r], got[r]
    assert etag(env, key) == before
    assert [k for k in objects(env) if k.startswith(key)] == [key]
    # A later save succeeds.
    got = collect(out, start(ctx, out, url, "sharded", range(2), 2))
    assert all(isinstance(r, dict) for r in got.values()), got
    with modelzip.open(url) as ar:
        assert ar.tags == ["single", "sharded"]


def test_tensor_parallel_blocks_commit_to_s3(s3, ctx, tmp, monkeypatch):
    env, proxy = s3
    python_env(env, monkeypatch)
    url = f"s3://{BUCKET}/tp.zip"
    out = ctx.Queue()
    procs = {}
    for r in range(4):
        p = ctx.Process(target=tp_rank, args=(url, r, 4, out))
        p.start()
        procs[r] = p
    got = collect(out, procs)
    assert all(isinstance(r, dict) for r in got.values()), got
    with modelzip.open(url) as ar:
        t = ar.latest()
        for n in TP:
            assert np.array_equal(t[n], tp_full(n, 1)), n
    down = tmp / "tp.zip"
    cli_env(env, "cp", url, down)
    assert run_cli("verify", down).returncode == 0


def test_a_sharded_tag_that_exists_is_refused_before_anything_is_written(s3, ctx, tmp, monkeypatch):
    env, proxy = s3
    python_env(env, monkeypatch)
    key = "exists.zip"
    url = f"s3://{BUCKET}/{key}"
    local = tmp / "single.zip"
    single_save(local, "single", seed=1)
    cli_env(env, "cp", local, url)
    with pytest.raises(modelzip.ModelzipError) as e:
        zs.save(url, "single", 0, 1, {"w": (np.zeros((2, 2), np.float32), 0, (2, 2))}, timeout=5)
    assert e.value.kind == "tag_exists", e.value
    assert [k for k in objects(env) if k.startswith(key)] == [key]


def test_a_sharded_checkpointer_on_s3_saves_keeps_the_last_two_and_restores(s3, ctx, tmp, monkeypatch):
    from test_sharded import ckpt_rank

    env, proxy = s3
    python_env(env, monkeypatch)
    key = "ckpt.zip"
    url = f"s3://{BUCKET}/{key}"
    out = ctx.Queue()
    procs = {}
    for r in range(3):
        p = ctx.Process(target=ckpt_rank, args=(url, r, 3, [1, 2, 3, 4], out))
        p.start()
        procs[r] = p
    got = collect(out, procs)
    assert all(isinstance(v, list) for v in got.values()), "\n".join(map(str, got.items()))
    assert [r["tag"] for r in got[0]] == [f"step-00000000{s}" for s in (1, 2, 3, 4)]
    assert [r["removed"] for r in got[0]] == [[], [], ["step-000000001"], ["step-000000002"]]
    # Rank 0's reports say what each save cost; nothing else is left beside the archive.
    assert all(r["bytes_uploaded"] > 0 for r in got[0])
    assert [k for k in objects(env) if k.startswith(key)] == [key]
    ck = modelzip.Checkpointer(url)
    assert ck.checkpoints() == ["step-000000003", "step-000000004"]
    c = ck.latest()
    assert c.step == 4 and c.metrics == {"loss": 0.2}
    assert np.array_equal(c.params["layer01.w"], full("layer01.w", 4))
    assert np.array_equal(c.params["layer00.w"], full("layer00.w", 0))
    down = tmp / "ckpt.zip"
    cli_env(env, "cp", url, down)
    assert run_cli("verify", down).returncode == 0
    # The frozen tensor is stored once, also after its first home was removed (the next
    # saves compare it by the SHA-256 its new home's manifest records).
    from test_sharded import zipfile_names

    files = [n for n in zipfile_names(down) if n.endswith(".lodtensor")]
    assert len(files) == 1 + 2 * 3, files  # layer00 once; layer01 + 2 moments per checkpoint


def test_two_groups_committing_to_one_s3_archive_one_wins_the_other_fails_cleanly(s3, ctx, tmp, monkeypatch):
    env, proxy = s3
    python_env(env, monkeypatch)
    key = "race.zip"
    url = f"s3://{BUCKET}/{key}"
    local = tmp / "single.zip"
    single_save(local, "single", seed=1)
    cli_env(env, "cp", local, url)
    out_a, out_b = ctx.Queue(), ctx.Queue()
    # Both rank 0s read the same version; their commits are held until both arrived.
    proxy.hold_commits, proxy.arrived = 2, 0
    try:
        procs_a = start(ctx, out_a, url, "group-a", range(2), 2, seed=2)
        procs_b = start(ctx, out_b, url, "group-b", range(2), 2, seed=3)
        got_a, got_b = collect(out_a, procs_a), collect(out_b, procs_b)
    finally:
        proxy.hold_commits = 0
    won = [g for g, got in (("group-a", got_a), ("group-b", got_b)) if isinstance(got[0], dict)]
    assert len(won) == 1, (got_a, got_b)
    lost = got_b if won == ["group-a"] else got_a
    assert "changed since it was opened" in lost[0] and "nothing was written" in lost[0], lost[0]
    assert "was not committed" in lost[1], lost[1]
    with modelzip.open(url) as ar:
        assert ar.tags == ["single", won[0]]
        seed = 2 if won == ["group-a"] else 3
        assert np.array_equal(ar.tag(won[0])[names()[0]], full(names()[0], seed))
    assert [k for k in objects(env) if k.startswith(key)] == [key]


def test_rank_0_killed_mid_save_leaves_the_object_and_its_objects_go_with_the_next_save(s3, ctx, tmp, monkeypatch):
    import json
    import os
    import signal
    import time

    env, proxy = s3
    python_env(env, monkeypatch)
    key = "killed.zip"
    url = f"s3://{BUCKET}/{key}"
    local = tmp / "single.zip"
    single_save(local, "single", seed=1)
    cli_env(env, "cp", local, url)
    before = etag(env, key)
    out = ctx.Queue()
    # Rank 3 never comes: rank 0 waits for its marker and is killed meanwhile.
    procs = start(ctx, out, url, "sharded", [0, 1, 2], 4, timeout=8)
    deadline = time.monotonic() + 60
    markers = [f"{key}.sharded-sharded.rank-{r}." for r in (1, 2)]
    while not all(any(k.startswith(m) and k.endswith(".done") for k in objects(env)) for m in markers):
        assert time.monotonic() < deadline, objects(env)
        time.sleep(0.05)
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].join()
    del procs[0]
    got = collect(out, procs)
    for r in (1, 2):
        assert "was not committed" in got[r], got[r]
    assert etag(env, key) == before
    group = f"{key}.sharded-sharded"
    assert group in objects(env)
    # The same tag is refused while the dead attempt's group object is there ...
    with pytest.raises(modelzip.ModelzipError, match="is under way"):
        zs.save(url, "sharded", 0, 1, {"w": (np.zeros((2, 2), np.float32), 0, (2, 2))}, timeout=5)
    # ... another tag is not.
    zs.save(url, "other", 0, 1, {"w": (np.ones((2, 2), np.float32), 0, (2, 2))}, timeout=5)
    # Once the attempt's time is over (here: its group object says so), the next save of
    # the tag deletes what the dead attempt left and commits.
    status, _, body = raw(env, "GET", f"/{BUCKET}/{group}")
    g = json.loads(body)
    g["until"] = 0
    assert raw(env, "PUT", f"/{BUCKET}/{group}", json.dumps(g).encode())[0] == 200
    zs.save(url, "sharded", 0, 1, {"w": (np.zeros((2, 2), np.float32), 0, (2, 2))}, timeout=5)
    with modelzip.open(url) as ar:
        assert ar.tags == ["single", "other", "sharded"]
    assert [k for k in objects(env) if k.startswith(key)] == [key]


def test_a_sharded_paddle_model_saved_to_s3_exports_as_paddle_wrote_it(s3, ctx, tmp, monkeypatch):
    """The mlp fixture's parameters (written by Paddle) saved by 3 processes into an
    s3:// archive: `export-paddle` of the URL gives Paddle's own files byte for byte (the
    files test_sharded.py has Paddle run)."""
    from conftest import PADDLE_FIXTURES
    from test_sharded import paddle_rank

    env, proxy = s3
    python_env(env, monkeypatch)
    pdmodel, pdiparams = PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams"
    local = tmp / "m.zip"
    modelzip.import_paddle(local, "imported", pdmodel, pdiparams)
    with modelzip.open(local) as ar:
        params = {n: np.array(a) for n, a in ar.tag("imported").items()}
    url = f"s3://{BUCKET}/paddle.zip"
    out = ctx.Queue()
    procs = {}
    for r in range(3):
        p = ctx.Process(target=paddle_rank, args=(url, r, 3, params, pdmodel.read_bytes(), out))
        p.start()
        procs[r] = p
    got = collect(out, procs)
    assert all(isinstance(r, dict) for r in got.values()), got
    (tmp / "out").mkdir()
    cli_env(env, "export-paddle", url, "--tag", "sharded", "--out", tmp / "out" / "mlp")
    assert (tmp / "out" / "mlp.pdmodel").read_bytes() == pdmodel.read_bytes()
    assert (tmp / "out" / "mlp.pdiparams").read_bytes() == pdiparams.read_bytes()
