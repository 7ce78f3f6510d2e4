"""Fault injection for the two commands that write files, `convert` and `quantize`.

Faults: disk full (a child process under RLIMIT_FSIZE, so the kernel returns EFBIG at a chosen
byte; and a patched writer / fsync returning ENOSPC), a shard deleted or truncated mid-run,
SIGINT and SIGTERM during a long write.  After every fault the output path holds either nothing
(or the file that was there before) or a complete, valid file, no temporary file is left next
to it, and the inputs are byte-identical to what they were (sha256 before and after).
"""
from __future__ import annotations

import errno
import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fuzz_util import cli

pytestmark = pytest.mark.native   # quantize runs the C quantizers; CI repeats it under ASan + UBSan

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = pathlib.Path(__file__).parent.parent / "fixtures"
HF = FIX / "hf" / "mamba-tiny"
GGUF_IN = FIX / "llamacpp" / "mamba-tiny.f32.gguf"

# A child that runs the CLI, optionally under a file-size limit, optionally with a slow writer
# (each write sleeps, and "WRITING" goes to stderr once data is flowing) so a signal lands mid-write.
CHILD = r"""
import os, resource, sys, time
fsize = int(os.environ.get("FAULT_FSIZE", "0"))
if fsize:
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))   # writes past it fail with EFBIG
if os.environ.get("FAULT_SLOW"):
    from toolkit.gguf_io import writer
    n = [0]
    def slowed(orig):
        def slow(self, name, *a):
            n[0] += 1
            if n[0] == 3:
                print("WRITING", file=sys.stderr, flush=True)
            time.sleep(0.05)
            return orig(self, name, *a)
        return slow
    W = writer.GGUFStreamWriter
    W.write, W.copy_from = slowed(W.write), slowed(W.copy_from)
from toolkit.cli.app import main
sys.argv = ["toolkit"] + sys.argv[1:]
main()
"""


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TOOLKIT_THREADS="1", **extra)
    env.pop("TOOLKIT_DEBUG", None)
    return env


def child(argv, **extra) -> subprocess.CompletedProcess:
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path, and the checkout's
    # toolkit/ has no compiled extension when the package is installed non-editable
    return subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, timeout=300,
                          cwd=pathlib.Path(argv[2]).parent, env=_env(**extra))   # argv[2]: OUT


def hashes(*paths: pathlib.Path) -> dict[str, str]:
    out = {}
    for p in paths:
        for f in sorted([p] if p.is_file() else p.iterdir()):
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def no_leftovers(d: pathlib.Path) -> None:
    left = [p.name for p in d.iterdir() if p.name.endswith(".part")]
    assert not left, f"temporary files left behind: {left}"


def assert_complete(path: pathlib.Path, reference: pathlib.Path | None = None) -> None:
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(path)
    assert f.tensors
    if reference is not None:
        assert path.read_bytes() == reference.read_bytes()


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """Reference outputs of both commands, made without faults."""
    d = tmp_path_factory.mktemp("good")
    assert cli(["convert", str(HF), str(d / "c.gguf"), "--outtype", "f32"])[0] == 0   # convert()'s default
    assert cli(["quantize", str(GGUF_IN), str(d / "q.gguf"), "Q8_0", "-t", "1"])[0] == 0
    return d


JOBS = {
    "convert": lambda out: ["convert", str(HF), str(out), "--outtype", "f32"],
    "quantize": lambda out: ["quantize", str(GGUF_IN), str(out), "Q8_0", "-t", "1"],
}


# ---- disk full ----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("job,where", [("convert", "header"), ("convert", "middle"), ("quantize", "middle"),
                                       ("quantize", "last byte")])
def test_disk_full_under_rlimit_fsize(tmp_path, good, job, where):
    size = (good / ("c.gguf" if job == "convert" else "q.gguf")).stat().st_size
    limit = {"header": 512, "middle": size // 2, "last byte": size - 1}[where]
    out = tmp_path / "out.gguf"
    before = hashes(HF, GGUF_IN)
    r = child(JOBS[job](out), FAULT_FSIZE=str(limit))
    assert r.returncode == 4, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.lower().startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error:") and "out.gguf" in lines[0], r.stderr
    assert not out.exists()
    no_leftovers(tmp_path)
    assert hashes(HF, GGUF_IN) == before


@pytest.mark.parametrize("job", sorted(JOBS))
@pytest.mark.parametrize("after_writes", [0, 2, 5])
def test_enospc_from_the_writer(tmp_path, monkeypatch, job, after_writes):
    from toolkit.gguf_io import writer
    n = [0]

    def filling(orig):
        def full(self, name, *a):
            n[0] += 1
            if n[0] > after_writes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return orig(self, name, *a)
        return full

    W = writer.GGUFStreamWriter
    monkeypatch.setattr(W, "write", filling(W.write))
    monkeypatch.setattr(W, "copy_from", filling(W.copy_from))
    out = tmp_path / "out.gguf"
    out.write_bytes(b"previous contents")
    code, _o, err = cli(JOBS[job](out))
    assert code == 4 and "out.gguf" in err, err
    assert out.read_bytes() == b"previous contents"   # the old file survives a failed write
    no_leftovers(tmp_path)


@pytest.mark.parametrize("job", sorted(JOBS))
def test_enospc_at_fsync(tmp_path, monkeypatch, job):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "out.gguf"
    code, _o, err = cli(JOBS[job](out))
    assert code == 4 and "out.gguf" in err, err
    assert not out.exists()
    no_leftovers(tmp_path)


# ---- inputs that change under a running job --------------------------------------------------

def _copy_hf(tmp_path) -> pathlib.Path:
    d = tmp_path / HF.name        # same directory name: general.name is taken from it
    shutil.copytree(HF, d)
    for p in [d, *d.iterdir()]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return d


@pytest.mark.parametrize("fault", ["delete", "truncate"])
@pytest.mark.parametrize("shard", [1, 3])
def test_shard_changed_mid_convert(tmp_path, good, fault, shard):
    from toolkit.convert import convert
    from toolkit.errors import InputError
    d = _copy_hf(tmp_path)
    victim = d / f"model-0000{shard}-of-00003.safetensors"
    others = [p for p in d.iterdir() if p != victim]
    before = {p.name: p.read_bytes() for p in others}
    calls = [0]

    def factory(total):
        def progress(n):
            calls[0] += 1
            if calls[0] == 2:
                if fault == "delete":
                    victim.unlink()
                else:
                    with open(victim, "r+b") as fh:
                        fh.truncate(victim.stat().st_size // 2)
        return progress

    out = tmp_path / "out.gguf"
    try:
        convert(str(d), str(out), progress_factory=factory)
    except InputError as e:
        assert victim.name in str(e)
        assert not out.exists()
    else:
        # an already-open shard stays readable after unlink: then the file must be complete
        assert fault == "delete"
        assert_complete(out, good / "c.gguf")
    assert calls[0] >= 2
    no_leftovers(tmp_path)
    assert {p.name: p.read_bytes() for p in others} == before


def test_input_truncated_mid_quantize(tmp_path):
    from toolkit.errors import InputError
    from toolkit.quantize import quantize_file
    src = tmp_path / "in.gguf"
    shutil.copy(GGUF_IN, src)
    os.chmod(src, 0o644)
    calls = [0]

    def progress(done, total, name):
        calls[0] += 1
        if calls[0] == 2:
            with open(src, "r+b") as fh:
                fh.truncate(src.stat().st_size // 2)

    out = tmp_path / "out.gguf"
    with pytest.raises(InputError, match="in.gguf"):
        quantize_file(str(src), str(out), "Q8_0", n_threads=1, band_mb=0.01, progress=progress)
    assert not out.exists()
    no_leftovers(tmp_path)


# ---- signals ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("job,sig,code,existing", [
    ("convert", signal.SIGINT, 130, False), ("convert", signal.SIGINT, 130, True),
    ("quantize", signal.SIGINT, 130, False), ("convert", signal.SIGTERM, 143, False),
    ("quantize", signal.SIGTERM, 143, True),
])
def test_signal_during_a_long_write(tmp_path, job, sig, code, existing):
    out = tmp_path / "out.gguf"
    if existing:
        out.write_bytes(b"the previous model")
    before = hashes(HF, GGUF_IN)
    p = subprocess.Popen([sys.executable, "-c", CHILD, *JOBS[job](out)], stderr=subprocess.PIPE, text=True,
                         stdout=subprocess.DEVNULL, cwd=tmp_path, env=_env(FAULT_SLOW="1"))
    try:
        t0 = time.monotonic()
        for line in p.stderr:
            if "WRITING" in line:
                break
            assert time.monotonic() - t0 < 120
        else:
            pytest.fail("the child never started writing")
        p.send_signal(sig)
        rest = p.stderr.read()
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == code, (rc, rest[-2000:])
    assert "Traceback" not in rest, rest
    if existing:
        assert out.read_bytes() == b"the previous model"
    else:
        assert not out.exists()
    no_leftovers(tmp_path)
    assert hashes(HF, GGUF_IN) == before


def test_outputs_have_ordinary_permissions(tmp_path, good):
    # written through a temp file, the result must still get the usual 0666 & ~umask mode
    um = os.umask(0o022)
    os.umask(um)
    out = tmp_path / "p.gguf"
    assert cli(["quantize", str(GGUF_IN), str(out), "Q8_0", "-t", "1"])[0] == 0
    assert out.stat().st_mode & 0o777 == 0o666 & ~um


@pytest.mark.parametrize("job", ["convert", "quantize", "run"])
def test_output_location_that_refuses_files(job):
    # sysfs refuses new files even to root (EACCES): a clean exit 2 naming the path, not exit 1
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs Linux sysfs")
    out = "/sys/kernel/toolkit-test.gguf"
    argv = JOBS[job](out) if job in JOBS else ["run", "-m", str(GGUF_IN), "--tokens", "1", "-n", "1",
                                               "--logits-out", "/sys/kernel/l.npy"]
    code, _o, err = cli(argv)
    assert code in (2, 4) and "/sys/kernel/" in err and "internal error" not in err, err
