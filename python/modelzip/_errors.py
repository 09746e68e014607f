"""The exceptions modelzip raises (the native extension builds them through ``_make``)."""

from __future__ import annotations

__all__ = ["ModelzipError", "ModelzipKeyError"]


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


_KEY_KINDS = frozenset({"tag_not_found", "param_not_found"})


def _make(kind: str, message: str) -> ModelzipError:
    cls = ModelzipKeyError if kind in _KEY_KINDS else ModelzipError
    return cls(kind, message)
