"""GGUF writer/reader round trip, exact sizes, atomic output."""
import os

import numpy as np
import pytest

from toolkit.errors import InputError
from toolkit.gguf_io import GGMLType, GGUFFile, GGUFStreamWriter, atomic_output


def _write(path, chunks=1):
    a = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)
    b = np.arange(3, dtype=np.float32)
    w = GGUFStreamWriter(path, "mamba")
    w.kv.add_uint32("mamba.block_count", 1)
    w.add_tensor("a", a.shape, GGMLType.F32)
    w.add_tensor("b", b.shape, GGMLType.F32)
    w.begin_data()
    for part in np.array_split(a, chunks):
        w.write("a", part)
    w.write("b", b)
    w.close()
    return a, b


def test_roundtrip_and_bands_give_same_bytes(tmp_path):
    p1, p2 = tmp_path / "one.gguf", tmp_path / "bands.gguf"
    a, b = _write(str(p1), 1)
    _write(str(p2), 4)
    assert p1.read_bytes() == p2.read_bytes()
    f = GGUFFile(p1)
    assert f.arch == "mamba" and f.get("mamba.block_count") == 1
    assert f.tensor("a").shape == (10, 6) and f.tensor("a").np_shape == (6, 10)
    np.testing.assert_array_equal(f.array("a"), a)
    np.testing.assert_array_equal(f.array("b"), b)


def test_writer_rejects_wrong_sizes_and_order(tmp_path):
    w = GGUFStreamWriter(str(tmp_path / "x.gguf"), "mamba")
    w.add_tensor("a", (2, 32), GGMLType.F32)
    w.add_tensor("b", (32,), GGMLType.F32)
    w.begin_data()
    with pytest.raises(ValueError, match="tensor 'a': 0 bytes written, 256 declared"):
        w.write("b", np.zeros(32, np.float32))
    w.write("a", np.zeros(32, np.float32))
    with pytest.raises(ValueError, match="tensor .a.: 128 bytes written, 256 declared"):
        w.write("b", np.zeros(32, np.float32))
    w.abort()


def test_quant_shape_must_fit_blocks(tmp_path):
    w = GGUFStreamWriter(str(tmp_path / "x.gguf"), "mamba")
    with pytest.raises(ValueError, match="block size 32"):
        w.add_tensor("a", (2, 33), GGMLType.Q8_0)
    assert w.add_tensor("b", (2, 64), GGMLType.Q8_0) == 2 * 2 * 34


def test_atomic_output_leaves_nothing_on_error(tmp_path):
    out = tmp_path / "out.gguf"
    with pytest.raises(RuntimeError):
        with atomic_output(out) as tmp:
            open(tmp, "wb").write(b"partial")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(out) as tmp:
            open(tmp, "wb").write(b"partial")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
    with atomic_output(out) as tmp:
        open(tmp, "wb").write(b"done")
    assert os.listdir(tmp_path) == ["out.gguf"]


def test_atomic_output_refuses_to_overwrite_input(tmp_path):
    src = tmp_path / "in.gguf"
    src.write_bytes(b"x")
    with pytest.raises(InputError, match="overwrite the input"):
        with atomic_output(src, inputs=(str(src),)):
            pass
    assert src.read_bytes() == b"x"


def test_reader_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 10)
    with pytest.raises(InputError, match="bad.gguf"):
        GGUFFile(bad)
    with pytest.raises(InputError, match="no such file"):
        GGUFFile(tmp_path / "missing.gguf")


def test_atomic_output_interrupted_while_creating_leaves_no_temp(tmp_path, monkeypatch):
    """A SIGINT that arrives just after the temp file is created (the KeyboardInterrupt raised
    before its name is back from the call that made it) leaves no temp: the name is listed
    before the file exists.  With mkstemp it was not (tests/reliability/test_sigterm_decode.py
    once left a session's .part file that way).  Blocking the signal in this thread instead did
    not help: another thread takes it and the main thread raises anyway (pytest-xdist's worker)."""
    import os
    import signal

    from toolkit.gguf_io import writer
    real = os.open

    def open_then_signal(*a, **k):
        fd = real(*a, **k)
        os.kill(os.getpid(), signal.SIGINT)
        return fd

    monkeypatch.setattr(writer.os, "open", open_then_signal)
    # Python's own SIGINT handler, whatever an earlier test in this worker left installed (a
    # recording handler turns the signal into no KeyboardInterrupt: the flake CI saw once)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    out = tmp_path / "x.bin"
    try:
        with pytest.raises(KeyboardInterrupt):
            with writer.atomic_output(str(out)) as tmp:
                open(tmp, "wb").write(b"x")
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_atomic_output_temp_name_taken_is_not_removed(tmp_path, monkeypatch):
    """A temp name another file already has is skipped, and that file is left alone."""
    import os

    from toolkit.gguf_io import writer
    names = iter(["aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr(writer.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".y.bin.aaaaaaaa.part").write_bytes(b"theirs")
    with writer.atomic_output(str(tmp_path / "y.bin")) as tmp:
        assert tmp.endswith(".y.bin.bbbbbbbb.part")
        open(tmp, "wb").write(b"ours")
    assert (tmp_path / ".y.bin.aaaaaaaa.part").read_bytes() == b"theirs"
    assert (tmp_path / "y.bin").read_bytes() == b"ours"
    assert oct(os.stat(tmp_path / "y.bin").st_mode & 0o777) == oct(0o666 & ~_current_umask())


def _current_umask() -> int:
    import os
    m = os.umask(0o022)
    os.umask(m)
    return m
