"""Errors Python users expect: each row of docs/PYTHON.md's exception table, caught by
the built-in class a Python programmer writes (``except FileNotFoundError``), while
staying a ``ModelzipError`` with its ``kind``."""

from __future__ import annotations

import errno
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import modelzip
from conftest import HOSTILE

W = {"w": np.ones(4, np.float32)}


def check_os_error(e: BaseException, cls: type, number: int, filename) -> None:
    assert isinstance(e, cls) and isinstance(e, OSError), type(e).__mro__
    assert isinstance(e, modelzip.ModelzipError) and e.kind == "io"
    assert e.errno == number, (e.errno, str(e))
    assert e.strerror == os.strerror(number)
    assert e.filename == str(filename), (e.filename, filename)
    # str() is the library's whole message, with where it happened (not "[Errno 2] ...").
    assert str(e) == e.message and str(filename) in str(e)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is type(e) and (again.errno, again.filename, again.kind, str(again)) == (
        e.errno,
        e.filename,
        e.kind,
        str(e),
    )


def test_a_missing_archive_is_a_file_not_found_error(tmp):
    missing = tmp / "missing.zip"
    with pytest.raises(FileNotFoundError) as e:
        modelzip.open(missing)
    check_os_error(e.value, FileNotFoundError, errno.ENOENT, missing)
    assert isinstance(e.value, modelzip.ModelzipFileNotFoundError)
    # reading a tensor file that is not there, through an import, likewise
    with pytest.raises(FileNotFoundError) as e:
        modelzip.import_model(tmp / "m.zip", "t", tmp / "absent.safetensors")
    assert e.value.kind == "io" and e.value.errno == errno.ENOENT


def test_a_directory_given_as_the_archive_is_an_is_a_directory_error(tmp):
    d = tmp / "d"
    d.mkdir()
    with pytest.raises(IsADirectoryError) as e:
        modelzip.open(d)
    check_os_error(e.value, IsADirectoryError, errno.EISDIR, d)
    assert "is a directory" in str(e.value)  # was "No such device (os error 19)"
    # a directory given as a model file to import
    model = tmp / "model.onnx"
    model.mkdir()
    with pytest.raises(IsADirectoryError) as e:
        modelzip.import_model(tmp / "m.zip", "t", model, format="onnx")
    check_os_error(e.value, IsADirectoryError, errno.EISDIR, model)


def test_a_path_through_a_file_is_a_not_a_directory_error(tmp):
    f = tmp / "f.zip"
    f.write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as e:
        modelzip.open(f / "inner.zip")
    check_os_error(e.value, NotADirectoryError, errno.ENOTDIR, f / "inner.zip")


def test_an_export_onto_an_existing_file_is_a_file_exists_error(tmp):
    modelzip.save(tmp / "m.zip", "t", W)
    out = tmp / "w.safetensors"
    modelzip.export_model(tmp / "m.zip", "t", out, format="safetensors")
    with pytest.raises(FileExistsError) as e:
        modelzip.export_model(tmp / "m.zip", "t", out, format="safetensors")
    check_os_error(e.value, FileExistsError, errno.EEXIST, out)
    modelzip.export_model(tmp / "m.zip", "t", out, format="safetensors", overwrite=True)


CHILD = """
import sys, modelzip
try:
    modelzip.open(sys.argv[1])
except PermissionError as e:
    assert isinstance(e, modelzip.ModelzipError) and e.kind == "io", repr(e)
    print("PermissionError", e.errno, e.filename)
"""


def test_an_unreadable_archive_is_a_permission_error(tmp):
    path = tmp / "m.zip"
    modelzip.save(path, "t", W)
    path.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(PermissionError) as e:
            modelzip.open(path)
        check_os_error(e.value, PermissionError, errno.EACCES, path)
        return
    # Root reads any file: the check runs in a child that is root without capabilities
    # (util-linux's setpriv empties its bounding set, so no CAP_DAC_OVERRIDE).
    proc = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
         sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["PermissionError", str(errno.EACCES), str(path)]


def test_invalid_input_is_a_value_error(tmp):
    with pytest.raises(ValueError) as e:
        modelzip.save(tmp / "m.zip", "bad/tag", W)
    assert isinstance(e.value, modelzip.ModelzipError) and e.value.kind == "invalid_tag_name"
    # raised by the Python layer itself, before the library
    with pytest.raises(ValueError) as e:
        modelzip.save(tmp / "m.zip", "t", ["not", "a", "mapping"])
    assert e.value.kind == "invalid_input"
    modelzip.save(tmp / "m.zip", "t", W)
    with pytest.raises(ValueError) as e:
        modelzip.save(tmp / "m.zip", "T", W)  # tags are not case sensitive
    assert e.value.kind == "tag_exists"
    assert not isinstance(e.value, (OSError, KeyError))


def test_a_malformed_archive_is_a_value_error(tmp):
    with pytest.raises(ValueError) as e:
        modelzip.open(HOSTILE / "truncated-archive.zip")
    assert isinstance(e.value, modelzip.ModelzipError) and e.value.kind == "zip"
    assert not isinstance(e.value, OSError)
    # every hostile archive's error is a ValueError too: python/tests/test_hostile.py


def test_a_missing_tag_or_parameter_is_a_key_error(tmp):
    modelzip.save(tmp / "m.zip", "t", W)
    with modelzip.open(tmp / "m.zip") as ar:
        with pytest.raises(KeyError) as e:
            ar["nope"]
        assert e.value.kind == "tag_not_found" and not isinstance(e.value, ValueError)
        with pytest.raises(KeyError) as e:
            ar["t"]["nope"]
        assert e.value.kind == "param_not_found"


def test_kinds_without_a_builtin_counterpart_stay_plain(tmp):
    """A held write lock is neither an OSError nor a ValueError (docs/PYTHON.md)."""
    e = modelzip._errors._make("locked", "archive is locked by another process")
    assert type(e) is modelzip.ModelzipError
    assert not isinstance(e, (OSError, ValueError, KeyError))
    # an io error without an errno is a plain OSError (errno None)
    e = modelzip._errors._make("io", "failed to fill whole buffer (file x)")
    assert type(e) is modelzip.ModelzipOSError and e.errno is None and str(e).endswith("(file x)")


def test_an_io_error_without_an_errno_keeps_its_filename():
    """The file the error names is ``filename`` whether or not the OS gave a number."""
    e = modelzip._errors._make("io", "failed to fill whole buffer (file x.zip)", None, "x.zip")
    assert type(e) is modelzip.ModelzipOSError
    assert (e.errno, e.strerror, e.filename) == (None, None, "x.zip")
    assert str(e) == e.message == "failed to fill whole buffer (file x.zip)"
    again = pickle.loads(pickle.dumps(e))
    assert (type(again), again.errno, again.filename, str(again)) == (type(e), None, "x.zip", str(e))
