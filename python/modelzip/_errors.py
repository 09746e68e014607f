"""The exceptions modelzip raises (the native extension builds them through ``_make``).

Every error is a :class:`ModelzipError` with ``.kind``. Where Python has a built-in
exception for the same failure, the error is an instance of that one too, so code written
for ``open``, numpy or safetensors catches it unchanged (docs/PYTHON.md, "Errors"):

=====================================  ==================================================
kind                                   also an instance of
=====================================  ==================================================
``io``, a missing file                 ``FileNotFoundError`` (``errno`` ENOENT)
``io``, access refused                 ``PermissionError`` (EACCES, EPERM)
``io``, a directory given for a file   ``IsADirectoryError`` (EISDIR)
``io``, a file given for a directory   ``NotADirectoryError`` (ENOTDIR)
``io``, a file that must not exist     ``FileExistsError`` (EEXIST)
``io``, any other                      ``OSError`` (its ``errno``, or ``None``)
``tag_not_found``, ``param_not_found`` ``KeyError``
invalid input, malformed archives      ``ValueError`` (the kinds in ``_VALUE_KINDS``)
=====================================  ==================================================

Every ``OSError`` one has ``errno``, ``strerror`` (the operating system's words) and
``filename`` (the file the library names, or ``None``); ``str(error)`` is always the
library's whole message, with where it happened.
"""

from __future__ import annotations

import errno as _errno
import os as _os

__all__ = [
    "ModelzipError",
    "ModelzipKeyError",
    "ModelzipValueError",
    "ModelzipOSError",
    "ModelzipFileNotFoundError",
    "ModelzipPermissionError",
    "ModelzipIsADirectoryError",
    "ModelzipNotADirectoryError",
    "ModelzipFileExistsError",
]


class ModelzipError(Exception):
    """Every error modelzip raises.

    ``kind`` is the library's error kind in snake_case (``"tag_not_found"``,
    ``"checksum"``, ``"truncated"``, ``"locked"``, ``"io"`` ...); ``str(error)`` is the
    message the command-line tool prints, with where it happened (file, entry, line,
    byte offset).
    """

    kind: str
    message: str

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, message={self.message!r})"

    def __reduce__(self):  # picklable across processes
        return (type(self), (self.kind, self.message))


class ModelzipKeyError(ModelzipError, KeyError):
    """A missing tag or parameter: both a :class:`ModelzipError` and a :class:`KeyError`."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class ModelzipValueError(ModelzipError, ValueError):
    """Invalid input or a malformed archive: both a :class:`ModelzipError` and a
    :class:`ValueError`."""


class ModelzipOSError(ModelzipError, OSError):
    """An operating-system failure (kind ``io``): both a :class:`ModelzipError` and an
    :class:`OSError` with ``errno``, ``strerror`` and ``filename``. The subclasses below
    are also the matching built-in ``OSError`` subclass."""

    def __new__(cls, kind: str, message: str, errno: int | None = None,
                filename: str | None = None):
        if errno is None:
            if filename is None:
                return OSError.__new__(cls, message)
            # (No operating system words without an errno: strerror stays None.)
            return OSError.__new__(cls, None, None, filename)
        strerror = _os.strerror(errno)
        if filename is None:
            return OSError.__new__(cls, errno, strerror)
        return OSError.__new__(cls, errno, strerror, filename)

    def __init__(self, kind: str, message: str, errno: int | None = None,
                 filename: str | None = None) -> None:
        # OSError.__new__ set errno, strerror, filename and args.
        self.kind = kind
        self.message = message

    def __str__(self) -> str:  # OSError's would be "[Errno 2] ..." without the where
        return self.message

    def __reduce__(self):
        return (type(self), (self.kind, self.message, self.errno, self.filename))


class ModelzipFileNotFoundError(ModelzipOSError, FileNotFoundError):
    """A file or directory that does not exist (ENOENT)."""


class ModelzipPermissionError(ModelzipOSError, PermissionError):
    """Access refused by the operating system (EACCES, EPERM)."""


class ModelzipIsADirectoryError(ModelzipOSError, IsADirectoryError):
    """A directory where a file was needed (EISDIR)."""


class ModelzipNotADirectoryError(ModelzipOSError, NotADirectoryError):
    """A file where a directory was needed (ENOTDIR)."""


class ModelzipFileExistsError(ModelzipOSError, FileExistsError):
    """A file that must not exist already does (EEXIST)."""


_KEY_KINDS = frozenset({"tag_not_found", "param_not_found"})

# The kinds that are invalid input or a malformed archive (or model file). The others
# stay plain ModelzipError: locked, async_save, unfinished_append, hard_linked,
# not_a_regular_file, and the remote kinds (remote, range_not_supported,
# remote_changed, remote_conflict): no built-in exception means the same.
_VALUE_KINDS = frozenset({
    # the caller's input
    "invalid_input", "invalid_tag_name", "tag_exists", "unrepresentable_values",
    "unknown_d_type_name", "d_type_mismatch", "misaligned", "not_a_checkpoint",
    # malformed bytes: archives, tensor files, graphs, text tables
    "unknown_d_type", "truncated", "trailing_bytes", "bad_version", "bad_desc_size",
    "bad_tensor_desc", "negative_dim", "size_overflow", "bad_lod", "data_length", "zip",
    "syntax", "missing_entry", "unsafe_name", "limit_exceeded", "checksum", "graph",
    "foreign_journal",
})

_OS_CLASSES = {
    _errno.ENOENT: ModelzipFileNotFoundError,
    _errno.EACCES: ModelzipPermissionError,
    _errno.EPERM: ModelzipPermissionError,
    _errno.EISDIR: ModelzipIsADirectoryError,
    _errno.ENOTDIR: ModelzipNotADirectoryError,
    _errno.EEXIST: ModelzipFileExistsError,
}


def _make(kind: str, message: str, errno: int | None = None,
          filename: str | None = None) -> ModelzipError:
    """The exception for an error of `kind`; `errno` and `filename` are an ``io``
    error's (the operating system's error number, the file the library names)."""
    if kind == "io":
        cls = _OS_CLASSES.get(errno, ModelzipOSError) if errno is not None else ModelzipOSError
        return cls(kind, message, errno, filename)
    if kind in _KEY_KINDS:
        return ModelzipKeyError(kind, message)
    if kind in _VALUE_KINDS:
        return ModelzipValueError(kind, message)
    return ModelzipError(kind, message)
