"""The Checkpointer: retention, async saves, resume, restore."""

from __future__ import annotations

import numpy as np
import pytest

import modelzip

RNG = np.random.default_rng(3)


def state(step: int):
    params = {"w": np.full((4, 4), step, np.float32), "frozen": np.arange(16, dtype=np.float32)}
    updater = {"w": [np.full((4, 4), step * 0.1, np.float32), np.full((4, 4), 2.0, np.float32)]}
    return params, updater


def test_keep_last_and_keep_best_and_resume(tmp):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path, keep_last=2, keep_best=("loss", "min", 1))
    losses = {10: 0.9, 20: 0.1, 30: 0.5, 40: 0.7, 50: 0.6}
    for step, loss in losses.items():
        params, updater = state(step)
        r = ck.save(step, params, updater, metrics={"loss": loss})
        assert r["tag"] == f"step-{step:09}"
    # the best (step 20) and the last two
    assert ck.checkpoints() == ["step-000000020", "step-000000040", "step-000000050"]
    assert r["removed"] == ["step-000000030"] and r["compacted"] in (True, False)
    assert r["shared"] >= 1  # "frozen" is stored once
    c = modelzip.Checkpointer(path).latest()
    assert c.step == 50 and c.tag == "step-000000050" and c.metrics == {"loss": 0.6}
    np.testing.assert_array_equal(c.params["w"], np.full((4, 4), 50, np.float32))
    m, v = c.updater["w"]
    np.testing.assert_array_equal(m, np.full((4, 4), 5.0, np.float32))
    c.params["w"][0, 0] = -1  # restored arrays are the caller's own
    best = ck.restore("STEP-000000020")
    assert best.step == 20 and best.tag == "step-000000020"


def test_latest_is_none_before_the_first_save(tmp):
    ck = modelzip.Checkpointer(tmp / "new.zip")
    assert ck.latest() is None and ck.checkpoints() == [] and ck.tags() == []
    assert ck.wait() is None


def test_save_async_snapshots_the_arrays(tmp):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path, keep_last=3)
    w = np.zeros(1 << 20, np.float32)
    handles = []
    for step in range(1, 6):
        w[:] = step
        h = ck.save_async(step, {"w": w}, metrics={"loss": 1.0 / step})
        w[:] = -1  # changing the array after save_async returns does not change the save
        handles.append(h)
    report = handles[-1].wait()
    assert handles[-1].done() and report["tag"] == "step-000000005"
    assert ck.wait() is None or ck.wait() is None
    assert ck.checkpoints() == ["step-000000003", "step-000000004", "step-000000005"]
    for step in (3, 4, 5):
        c = ck.restore(f"step-{step:09}")
        assert np.all(c.params["w"] == step)


def test_restore_refuses_what_is_not_a_checkpoint(tmp):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path)
    ck.save(1, {"w": np.ones(2, np.float32)})
    modelzip.save(path, "release", {"w": np.ones(2, np.float32)})
    with pytest.raises(modelzip.ModelzipError) as e:
        ck.restore("release")
    assert e.value.kind == "not_a_checkpoint" and "release" in str(e.value)
    with pytest.raises(KeyError):
        ck.restore("step-999")
    # the release tag is never removed by retention, and latest() skips it
    ck2 = modelzip.Checkpointer(path, keep_last=1)
    ck2.save(2, {"w": np.ones(2, np.float32)})
    assert ck2.tags() == ["release", "step-000000002"]
    assert ck2.latest().step == 2


def test_bad_policy_arguments_are_refused(tmp):
    with pytest.raises(modelzip.ModelzipError):
        modelzip.Checkpointer(tmp / "r.zip", keep_best=("loss", "lowest", 1))
    with pytest.raises(modelzip.ModelzipError):
        modelzip.Checkpointer(tmp / "r.zip", pattern="no-step-here")
    assert modelzip.tag_for("ckpt-{step:05}", 42) == "ckpt-00042"


NONSENSE_OPTIONS = [
    ({"keep_last": 0}, "keep_last=0"),
    ({"keep_last": -1}, "keep_last=-1"),
    ({"keep_last": 2.5}, "keep_last=2.5"),
    ({"keep_last": True}, "keep_last=True"),
    ({"keep_every": 0}, "keep_every=0"),
    ({"keep_every": 1.0}, "keep_every=1.0"),
    ({"keep_best": ("loss", "min", 0)}, "keep_best count=0"),
    ({"keep_best": ("loss", "min", 1.5)}, "keep_best count=1.5"),
    ({"keep_best": "loss"}, "keep_best='loss'"),
    ({"compact_dead_fraction": 2.0}, "compact_dead_fraction=2"),
    ({"compact_dead_fraction": -0.5}, "compact_dead_fraction=-0.5"),
    ({"compact_dead_fraction": float("nan")}, "compact_dead_fraction=NaN"),
    ({"compact_dead_fraction": "0.5"}, "compact_dead_fraction='0.5'"),
    # too large is its own message (it said ">= 1")
    ({"keep_last": 1 << 64}, "keep_last=18446744073709551616 is invalid: it must be below 2**64"),
    # the sharded options, checked here rather than at the first sharded save
    ({"rank": 1.5}, "checkpoint option rank=1.5"),
    ({"rank": -1}, "checkpoint option rank=-1 is invalid: it must be an integer >= 0"),
    ({"world_size": 2.9}, "checkpoint option world_size=2.9"),
    ({"world_size": 0}, "checkpoint option world_size=0 is invalid: it must be an integer >= 1"),
    ({"world_size": 1 << 32}, "world_size=4294967296 is invalid: it must be below 2**32 (a u32; modelzip allows at most 131072 ranks)"),
    ({"rank": 1 << 32, "world_size": 2}, "rank=4294967296 is invalid: it must be below 2**32"),
    ({"rank": 2, "world_size": 2}, "checkpoint option rank=2 is invalid: it is not below checkpoint option world_size=2"),
    ({"timeout": -1}, "checkpoint option timeout=-1 is invalid"),
    ({"timeout": float("nan")}, "checkpoint option timeout=nan is invalid"),
    ({"timeout": float("inf")}, "checkpoint option timeout=inf is invalid"),
    ({"timeout": "5"}, "checkpoint option timeout='5' is invalid"),
    ({"timeout": True}, "checkpoint option timeout=True is invalid"),
]


@pytest.mark.parametrize("options,named", NONSENSE_OPTIONS, ids=[n for _, n in NONSENSE_OPTIONS])
def test_nonsense_options_are_refused_naming_them_before_anything_is_written(tmp, options, named):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path)
    for step in (1, 2, 3):
        ck.save(step, state(step)[0])
    before = path.read_bytes()
    with pytest.raises(modelzip.ModelzipError) as e:
        modelzip.Checkpointer(path, **options)  # keep_last=0 would have removed steps 1, 2
    assert e.value.kind == "invalid_input", str(e.value)
    assert named in str(e.value), str(e.value)
    assert path.read_bytes() == before
    with pytest.raises(modelzip.ModelzipError):
        modelzip.Checkpointer(tmp / "new.zip", **options)
    assert not (tmp / "new.zip").exists()


def test_the_bounds_of_the_options_are_accepted(tmp):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path, keep_last=1, keep_every=np.int64(1), compact_dead_fraction=0)
    ck.save(np.uint32(1), state(1)[0])
    ck.save(2, state(2)[0])
    assert ck.checkpoints() == ["step-000000001", "step-000000002"]  # every multiple of 1
    ck = modelzip.Checkpointer(path, keep_best=("loss", "min", 1), compact_dead_fraction=1)
    assert ck.checkpoints() == ["step-000000002"]  # none has the metric: the newest stays


@pytest.mark.parametrize("step", [2.5, 2.0, -1, 1 << 64, "3", True, None])
def test_steps_are_non_negative_integers_never_truncated(tmp, step):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path)
    ck.save(1, state(1)[0])
    before = path.read_bytes()
    for call in (
        lambda: ck.save(step, state(2)[0]),
        lambda: ck.save_async(step, state(2)[0]),
        lambda: modelzip.tag_for("step-{step}", step),
    ):
        with pytest.raises(modelzip.ModelzipError) as e:
            call()
        assert e.value.kind == "invalid_input"
        assert f"step={step!r}" in str(e.value), str(e.value)
    assert ck.wait() is None  # no save was started
    assert path.read_bytes() == before
    assert ck.checkpoints() == ["step-000000001"]


def test_restored_arrays_are_writable_empty_ones_too(tmp):
    # "Restored arrays are owned and writable": an in-place update of a restored state
    # dict (c.params[k] += lr * g) must not fail on an empty tensor.
    ck = modelzip.Checkpointer(tmp / "run.zip")
    ck.save(1, {"w": np.ones(3, np.float32), "e": np.zeros((0, 3), np.float32)},
            updater={"e": [np.zeros((0, 3), np.float32)]})
    c = ck.latest()
    for arr in [*c.params.values(), *c.updater["e"]]:
        assert arr.flags.writeable
        arr += 1
    assert c.params["e"].shape == (0, 3) and np.all(c.params["w"] == 2)
    # arrays of the map stay read-only, empty ones included
    with modelzip.open(tmp / "run.zip") as ar:
        for arr in ar.latest().to_dict().values():
            assert not arr.flags.writeable


def test_the_archive_can_be_read_while_an_async_save_runs(tmp):
    # The background save holds the write lock and its journal exists; the training
    # thread listing checkpoints or opening the archive meanwhile waits for the append
    # (as a reader in another process does) instead of failing with kind="locked".
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path, keep_last=2)
    ck.save(0, {"w": np.zeros(4, np.float32)})
    for step in (1, 2, 3):
        h = ck.save_async(step, {"w": np.full(8 << 20, step, np.float32)})
        listed = ck.checkpoints()  # most likely while the save runs
        assert listed[-1] in (f"step-{step - 1:09}", f"step-{step:09}"), listed
        assert ck.tags()[-1] in (f"step-{step - 1:09}", f"step-{step:09}")
        with modelzip.open(path) as ar:
            assert ar.latest().name in (f"step-{step - 1:09}", f"step-{step:09}")
        h.wait()
    assert ck.checkpoints() == ["step-000000002", "step-000000003"]


def test_an_async_save_whose_checkpoint_the_next_save_removed_still_reports(tmp):
    """keep_last=1: step 2's retention pass removes step 1 before h1.wait(). The save of
    step 1 succeeded, so its report comes back without the keys read from the archive
    after the commit (docs/PYTHON.md) instead of raising tag_not_found."""
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path, keep_last=1)
    h1 = ck.save_async(1, *state(1))
    h2 = ck.save_async(2, *state(2))  # waits for step 1's save first
    r2 = h2.wait()
    assert r2["tag"] == "step-000000002" and r2["removed"] == ["step-000000001"]
    assert r2["params"] == 2 and "shared" in r2 and "own_bytes" in r2
    r1 = h1.wait()
    assert r1 == {"tag": "step-000000001", "removed": [], "compacted": False,
                  "deferred": False}, r1
    assert ck.wait() == r2  # the pending save, step 2 (its tag reads back)
    assert ck.checkpoints() == ["step-000000002"]
    # a synchronous save after them reports in full
    r3 = ck.save(3, *state(3))
    assert r3["tag"] == "step-000000003" and r3["params"] == 2 and r3["removed"] == ["step-000000002"]


def test_a_metric_that_is_not_a_number_is_refused_naming_it(tmp):
    path = tmp / "run.zip"
    ck = modelzip.Checkpointer(path)
    for metrics, named in (({"loss": "low"}, "metric 'loss'='low'"), ({"acc": [1, 2]}, "metric 'acc'=[1, 2]")):
        with pytest.raises(modelzip.ModelzipValueError) as e:
            ck.save(1, state(1)[0], metrics=metrics)
        assert e.value.kind == "invalid_input" and named in str(e.value), str(e.value)
    assert not path.exists()
    ck.save(1, state(1)[0], metrics={"loss": np.float32(0.5), "n": 3})
    assert ck.latest().metrics == {"loss": 0.5, "n": 3.0}
