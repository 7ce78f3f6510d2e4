"""An output in a read-only directory (issue 44, section 2, items 1-2): one line naming the
output and its directory, exit 2; never ``internal error: OSError: [Errno 30]`` (the cleanup
unlinked the temp name it had listed but never created, and a read-only file system answers
that unlink with EROFS too), and never the hidden ``.NAME.XXXXXXXX.part`` temp.

The read-only directory is simulated in-process (os.open / os.unlink / os.replace / os.rename
under it raise EROFS, as a ``mount -o ro`` does): a real read-only mount needs privileges CI
may not have, and root ignores a directory's mode bits."""
from __future__ import annotations

import errno
import os
import pathlib

import pytest

from cli_runner import cli

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
GGUF = FIX / "llamacpp" / "mamba-tiny.f32.gguf"
HF = FIX / "hf" / "mamba-tiny"


def read_only(monkeypatch, d: pathlib.Path) -> None:
    """Make directory ``d`` behave as on a read-only mount: creating, removing or renaming a
    name under it raises OSError(EROFS); reading is untouched."""
    d = os.path.abspath(d)

    def under(p) -> bool:
        try:
            return os.path.dirname(os.path.abspath(os.fspath(p))) == d
        except TypeError:   # a file descriptor
            return False

    def guard(real, writes=lambda a, k: True):
        def f(path, *a, **k):
            if under(path) and writes(a, k):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
            return real(path, *a, **k)
        return f

    def wants_write(a, k) -> bool:
        flags = a[0] if a else k.get("flags", 0)
        return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))

    monkeypatch.setattr(os, "open", guard(os.open, wants_write))
    for name in ("unlink", "remove", "replace", "rename"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))


def _check(rc: int, err: str, out: pathlib.Path) -> None:
    line = " ".join(err.split())
    assert rc == 2, err
    assert line.startswith("error:") and "internal error" not in err and "Traceback" not in err, err
    assert str(out) in line and f"in {out.parent}" in line, line
    assert ".part" not in line, line
    assert not out.exists()


def test_atomic_output_in_read_only_dir(tmp_path, monkeypatch):
    from toolkit.errors import InputError
    from toolkit.gguf_io import atomic_output, check_output
    read_only(monkeypatch, tmp_path)
    with pytest.raises(InputError, match="cannot create a file in .*Read-only file system"):
        with atomic_output(tmp_path / "x.bin"):
            pass
    with pytest.raises(InputError, match="cannot create a file in .*Read-only file system"):
        check_output(tmp_path / "x.bin")


def test_atomic_output_names_the_output_not_the_temp(tmp_path, monkeypatch):
    """A write error on the temp (here: the final rename) names the output."""
    from toolkit.gguf_io import atomic_output
    real = os.replace

    def fail(src, dst, *a, **k):
        raise OSError(errno.EIO, os.strerror(errno.EIO), src)
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError) as ei:
        with atomic_output(tmp_path / "x.bin") as tmp:
            open(tmp, "wb").write(b"x")
    monkeypatch.setattr(os, "replace", real)
    assert ei.value.filename == str(tmp_path / "x.bin")
    assert os.listdir(tmp_path) == []


@pytest.mark.native
def test_convert_into_read_only_dir(monkeypatch, capsys, tmp_path):
    read_only(monkeypatch, tmp_path)
    out = tmp_path / "out.gguf"
    rc, _, err = cli(monkeypatch, capsys, "convert", str(HF), str(out))
    _check(rc, err, out)


@pytest.mark.native
def test_quantize_into_read_only_dir(monkeypatch, capsys, tmp_path):
    read_only(monkeypatch, tmp_path)
    out = tmp_path / "out.gguf"
    rc, _, err = cli(monkeypatch, capsys, "quantize", str(GGUF), str(out), "Q8_0")
    _check(rc, err, out)


@pytest.mark.native
def test_perplexity_kld_out_into_read_only_dir(monkeypatch, capsys, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    ro = tmp_path / "ro"
    ro.mkdir()
    read_only(monkeypatch, ro)
    out = ro / "k.npz"
    rc, _, err = cli(monkeypatch, capsys, "perplexity", "-m", str(GGUF), str(text), "-c", "64",
                     "--chunks", "1", "--kld-out", str(out))
    _check(rc, err, out)
