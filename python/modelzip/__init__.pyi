"""Type stubs of the modelzip Python package (see __init__.py for the docs)."""

import os
from dataclasses import dataclass
from typing import (
    Any,
    Dict,
    ItemsView,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    ValuesView,
    overload,
)

import numpy as np
import numpy.typing as npt

from ._errors import ModelzipError as ModelzipError
from ._errors import ModelzipFileExistsError as ModelzipFileExistsError
from ._errors import ModelzipFileNotFoundError as ModelzipFileNotFoundError
from ._errors import ModelzipIsADirectoryError as ModelzipIsADirectoryError
from ._errors import ModelzipKeyError as ModelzipKeyError
from ._errors import ModelzipNotADirectoryError as ModelzipNotADirectoryError
from ._errors import ModelzipOSError as ModelzipOSError
from ._errors import ModelzipPermissionError as ModelzipPermissionError
from ._errors import ModelzipValueError as ModelzipValueError

_T = TypeVar("_T")

__all__ = [
    "Archive",
    "Checkpoint",
    "Checkpointer",
    "ModelzipError",
    "ModelzipFileExistsError",
    "ModelzipFileNotFoundError",
    "ModelzipIsADirectoryError",
    "ModelzipKeyError",
    "ModelzipNotADirectoryError",
    "ModelzipOSError",
    "ModelzipPermissionError",
    "ModelzipValueError",
    "SaveHandle",
    "Tag",
    "TensorSlice",
    "export_model",
    "export_paddle",
    "import_model",
    "import_paddle",
    "cast",
    "compact",
    "download",
    "open",
    "quantize",
    "save",
    "tag_for",
    "upload",
]

__version__: str

PathLike = Union[str, os.PathLike[str]]
# Aliases of the stubs only (not importable from the package at run time).
_ArrayLike = npt.ArrayLike
_GraphArg = Union[None, bytes, Tuple[str, bytes]]

class Tag:
    """One tag of an open archive."""

    def __init__(self, native: Any) -> None: ...  # made by Archive.tag
    @property
    def name(self) -> str: ...
    def keys(self) -> List[str]: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def __getitem__(self, name: str) -> np.ndarray: ...
    def get_tensor(self, name: str) -> np.ndarray: ...
    def get_slice(self, name: str) -> TensorSlice: ...
    @overload
    def get(self, name: str) -> Optional[np.ndarray]: ...
    @overload
    def get(self, name: str, default: _T) -> Union[np.ndarray, _T]: ...
    def items(self) -> ItemsView[str, np.ndarray]: ...
    def values(self) -> ValuesView[np.ndarray]: ...
    def lod(self, name: str) -> List[List[int]]: ...
    def updater_keys(self) -> List[str]: ...
    def updater(self, name: str) -> List[np.ndarray]: ...
    @property
    def metadata(self) -> Dict[str, Any]: ...
    @property
    def graph_encoding(self) -> Optional[str]: ...
    def graph_bytes(self) -> Optional[bytes]: ...
    def to_dict(self) -> Dict[str, np.ndarray]: ...
    def extract(
        self,
        out: PathLike,
        *,
        force: bool = False,
        link: bool = False,
        max_output: Optional[int] = None,
        max_files: int = 100_000,
    ) -> Dict[str, Any]: ...

class TensorSlice:
    """One parameter of a tag, read in parts (Tag.get_slice)."""

    def __init__(self, native: Any, name: str) -> None: ...  # made by Tag.get_slice
    def get_shape(self) -> List[int]: ...
    def get_dtype(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: Any) -> np.ndarray: ...

class Archive:
    """An open, memory-mapped archive."""

    def __init__(self, path: PathLike) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def tags(self) -> List[str]: ...
    @property
    def default_tag(self) -> Optional[str]: ...
    @property
    def closed(self) -> bool: ...
    def tag(self, name: str) -> Tag: ...
    def __getitem__(self, name: str) -> Tag: ...
    def __contains__(self, name: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def latest(self) -> Tag: ...
    def extract(
        self,
        tag: Optional[str],
        out: PathLike,
        *,
        force: bool = False,
        link: bool = False,
        max_output: Optional[int] = None,
        max_files: int = 100_000,
    ) -> Dict[str, Any]: ...
    def verify(self) -> List[Tuple[Optional[str], str]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Archive: ...
    def __exit__(self, *exc: object) -> None: ...

def open(path: PathLike) -> Archive: ...
def upload(
    local: PathLike, url: str, *, if_match: Optional[str] = None, force: bool = False
) -> Optional[str]: ...
def download(url: str, local: PathLike, *, force: bool = False) -> Optional[str]: ...
def save(
    path: PathLike,
    tag: str,
    params: Mapping[str, _ArrayLike],
    updater: Optional[Mapping[str, Sequence[_ArrayLike]]] = None,
    metadata: Optional[Mapping[str, Any]] = None,
    graph: _GraphArg = None,
    *,
    wait: bool = False,
) -> Dict[str, Any]: ...
@dataclass
class Checkpoint:
    step: int
    tag: str
    params: Dict[str, np.ndarray] = ...
    updater: Dict[str, List[np.ndarray]] = ...
    metrics: Dict[str, float] = ...

class SaveHandle:
    def __init__(self, native: Any) -> None: ...  # made by Checkpointer.save_async
    def wait(self) -> Dict[str, Any]: ...
    def done(self) -> bool: ...

class Checkpointer:
    def __init__(
        self,
        path: PathLike,
        keep_last: Optional[int] = None,
        keep_every: Optional[int] = None,
        keep_best: Optional[Tuple[str, str, int]] = None,
        pattern: str = "step-{step:09}",
        *,
        compact_dead_fraction: float = 0.5,
        wait: bool = False,
        rank: int = 0,
        world_size: int = 1,
        timeout: float = 600.0,
        group: Optional[str] = None,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    def save(
        self,
        step: int,
        params: Mapping[str, _ArrayLike],
        updater: Optional[Mapping[str, Sequence[_ArrayLike]]] = None,
        metrics: Optional[Mapping[str, float]] = None,
    ) -> Dict[str, Any]: ...
    def save_async(
        self,
        step: int,
        params: Mapping[str, _ArrayLike],
        updater: Optional[Mapping[str, Sequence[_ArrayLike]]] = None,
        metrics: Optional[Mapping[str, float]] = None,
    ) -> SaveHandle: ...
    def wait(self) -> Optional[Dict[str, Any]]: ...
    def checkpoints(self) -> List[str]: ...
    def tags(self) -> List[str]: ...
    def latest(self) -> Optional[Checkpoint]: ...
    def restore(self, tag: str) -> Checkpoint: ...

def tag_for(pattern: str, step: int) -> str: ...
def import_paddle(
    archive: PathLike,
    tag: str,
    model: Optional[PathLike] = None,
    params: Optional[PathLike] = None,
    *,
    dir: Optional[PathLike] = None,
    wait: bool = False,
) -> Dict[str, Any]: ...
def export_paddle(
    archive: PathLike, tag: Optional[str], prefix: PathLike, *, overwrite: bool = False
) -> Dict[str, Any]: ...
def import_model(
    archive: PathLike,
    tag: str,
    *inputs: PathLike,
    format: Optional[str] = None,
    wait: bool = False,
) -> Dict[str, Any]: ...
def export_model(
    archive: PathLike,
    tag: Optional[str],
    out: PathLike,
    *,
    format: Optional[str] = None,
    overwrite: bool = False,
    external_data: bool = False,
    max_shard_bytes: Optional[int] = None,
) -> Dict[str, Any]: ...
def quantize(
    archive: PathLike,
    source: str,
    tag: str,
    *,
    per_channel: bool = True,
    wait: bool = False,
    allow_non_finite: bool = False,
) -> Dict[str, Any]: ...
def compact(archive: PathLike, *, wait: bool = False) -> Dict[str, Any]: ...
def cast(
    archive: PathLike,
    source: str,
    tag: str,
    dtype: str,
    *,
    wait: bool = False,
    allow_non_finite: bool = False,
    allow_overflow: bool = False,
) -> Dict[str, Any]: ...
