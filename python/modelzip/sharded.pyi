"""Type stubs of modelzip.sharded (see sharded.py)."""

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

Shard = Tuple[Any, Union[int, Sequence[int]], Sequence[int]]

__all__ = ["row_range", "save"]

def row_range(rows: int, rank: int, world_size: int) -> Tuple[int, int]: ...
def save(
    path: Union[str, os.PathLike[str]],
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
) -> Dict[str, Any]: ...
