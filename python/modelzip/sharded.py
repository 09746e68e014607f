"""Sharded saves: one tag written by many processes at once, each writing only its rows.

Every rank (process) calls :func:`save` with its rank, the world size and its rows of
every tensor; the ranks need no channel but the filesystem the archive is on (any
launcher works: torchrun, mpirun, a ``multiprocessing`` pool, Kubernetes jobs). Rank 0
stages the save and commits it once every rank has written; the committed tag is an
ordinary tag that every reader reads. See docs/SHARDED.md.

>>> import numpy as np, modelzip.sharded as zs
>>> rows = np.arange(12, dtype=np.float32).reshape(6, 2)
>>> a, b = zs.row_range(6, rank, world_size)            # this rank's rows
>>> zs.save("run.zip", "step-100", rank, world_size,
...         {"w": (rows[a:b], a, rows.shape)})           # (local rows, first row, global shape)

A shard may also split another dimension (tensor parallelism's column shards): give the
offset on every dimension instead of the first row, ``{"w": (cols, (0, c), w.shape)}``.

Loading with any other layout reads only the rows asked for:
``modelzip.open("run.zip").latest().get_slice("w")[a:b]``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import (
    _RANKS,
    _RANKS_WHY,
    _graph_arg,
    _make,
    _metadata_json,
    _modelzip,
    _prepare,
    _seconds,
    _whole,
    _writable,
)

__all__ = ["row_range", "save"]

Shard = Tuple[Any, Union[int, Sequence[int]], Sequence[int]]


def row_range(rows: int, rank: int, world_size: int) -> Tuple[int, int]:
    """Rows ``[start, stop)`` of ``rows`` that rank ``rank`` of ``world_size`` holds when
    they are split as evenly as possible, the first ranks taking one more (the split of
    ``numpy.array_split``)."""
    if world_size < 1 or not 0 <= rank < world_size or rows < 0:
        raise _make(
            "invalid_input",
            f"row_range needs 0 <= rank < world_size and rows >= 0 (got rows={rows}, rank={rank}, world_size={world_size})",
        )
    q, m = divmod(rows, world_size)
    start = rank * q + min(rank, m)
    return start, start + q + (1 if rank < m else 0)


def _shard_item(what: str, name: str, slot: Optional[int], shard: Any) -> tuple:
    if not isinstance(shard, tuple) or len(shard) not in (3, 4):
        raise _make(
            "invalid_input",
            f"{what} must be (rows, first_row, global_shape), (block, offsets, global_shape), or (None, 0, global_shape, dtype) on a rank that holds none of it",
        )
    arr, start, shape = shard[0], shard[1], shard[2]
    # Integers >= 0 below 2**64, never truncated (first_row=1.5 is refused, not row 1).
    try:
        dims = list(shape)
    except TypeError:
        raise _make(
            "invalid_input", f"{what}: global_shape={shape!r} is invalid: it must be a sequence of integers"
        ) from None
    global_shape = [_whole(f"{what}: global_shape[{d}]", n) for d, n in enumerate(dims)]
    if isinstance(start, (tuple, list)):
        start = [_whole(f"{what}: offsets[{d}]", o) for d, o in enumerate(start)]
    else:
        start = _whole(f"{what}: first_row", start)
    holds = arr is not None
    if not holds:
        if len(shard) != 4:
            raise _make("invalid_input", f"{what}: a rank that holds none of it gives its dtype: (None, 0, global_shape, dtype)")
        arr = np.empty((0,) + tuple(global_shape[1:]), dtype=np.dtype(shard[3]))
    return (name, slot, _prepare(what, arr), start, global_shape, holds)


def save(
    path: Union[str, "os.PathLike[str]"],
    tag: str,
    rank: int,
    world_size: int,
    shards: Mapping[str, Shard],
    updater: Optional[Mapping[str, Sequence[Shard]]] = None,
    metadata: Optional[Mapping[str, Any]] = None,
    graph: Union[None, bytes, Tuple[str, bytes]] = None,
    *,
    timeout: float = 600.0,
    wait: bool = False,
    fsync: bool = True,
    group: Optional[str] = None,
) -> Dict[str, Any]:
    """Writes this rank's rows of tag ``tag`` of the archive at ``path`` (created by rank
    0 if there is none); returns once the tag is committed (or raises).

    ``shards``: parameter name -> ``(rows, first_row, global_shape)``: this rank's rows
    ``first_row .. first_row + len(rows)`` of a tensor of ``global_shape`` (every
    dimension but the first as the array's); or ``(block, offsets, global_shape)`` with
    ``offsets`` a tuple, one per dimension: the block of ``global_shape`` that starts
    there and has the array's shape (column shards of tensor parallelism, the blocks of
    a 2-D mesh). Every rank lists every tensor, with the
    same global shape and dtype; a rank that holds none of one gives an array of 0 rows,
    or ``(None, 0, global_shape, dtype)``. ``updater``: parameter name -> a list of
    the same triples, one per state array (Adam's moments; a tuple is refused, as a
    single triple given in the list's place would be). ``metadata`` and ``graph``
    are given by rank 0 (as :func:`modelzip.save` takes them).

    Rank 0 holds the archive's write lock for the group (``wait=True``: waits for
    another writer instead of raising ``kind="locked"``), waits for every rank at most
    ``timeout`` seconds, then commits; the others wait as long for rank 0. Rows or
    blocks that overlap or leave a gap, ranks that were given different descriptions, a rank that
    never writes: nothing is committed, the archive is left exactly as it was, and the
    error names the ranks and rows. ``fsync=False`` skips the fsyncs (tests only).

    ``group``: an id the same on every rank of this group and different between groups
    (a job id). Ranks talk only through files named after the tag, so two groups saving
    the same tag with the same description at once cannot otherwise be told apart (a
    lingering rank of a restarted job would join the new job's save); with ids, a rank
    of the other group is refused and the save under way goes on without it.

    ``path`` may be an ``s3://`` URL (credentials and endpoint from the ``AWS_*``
    environment, as for :func:`modelzip.save`): each rank uploads its shards to a
    staging object beside the archive, and rank 0 composes the new version of the
    archive object from the old one and those objects, copied by the store, committed
    only if the archive is still the version it read (docs/SHARDED.md, "Object
    stores").

    Returns ``{"tag", "rank", "world_size", "shards", "bytes_written", "deduplicated",
    "plan"}``: this rank's shards and bytes, the tensors rank 0 stored by reference to an
    identical earlier sharded tensor, and the plan's digest (equal on every rank). Rank
    0 of a save to ``s3://`` adds what its commit cost: ``"bytes_uploaded"``,
    ``"bytes_copied"``, ``"bytes_reread"``, ``"requests"``, ``"version"``,
    ``"previous_version"``.
    """
    # u32s of the library's, which allows at most 131072 ranks (and says so past that).
    rank = _whole("rank", rank, below=_RANKS, why=_RANKS_WHY)
    world_size = _whole("world_size", world_size, least=1, below=_RANKS, why=_RANKS_WHY)
    p = _writable(path, "save a sharded tag to")
    if not isinstance(shards, Mapping):
        raise _make("invalid_input", "shards must be a mapping of name -> (rows, first_row, global_shape)")
    items = [_shard_item(f"shard of {k!r}", str(k), None, v) for k, v in shards.items()]
    for k, states in (updater or {}).items():
        if isinstance(states, tuple) or not isinstance(states, Sequence):
            raise _make("invalid_input", f"updater state of {k!r} must be a list of (rows, first_row, global_shape) triples, one per state array")
        for slot, v in enumerate(states):
            items.append(_shard_item(f"updater array {slot} of {k!r}", str(k), slot, v))
    return _modelzip.sharded_save(
        p,
        tag,
        rank,
        world_size,
        items,
        _metadata_json(metadata),
        _graph_arg(graph),
        _seconds("timeout", timeout),
        bool(wait),
        bool(fsync),
        None if group is None else str(group),
    )
