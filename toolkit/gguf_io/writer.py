"""Write GGUF files streamed, with exact sizes, atomically.

The header, key/values and tensor infos are written by ``gguf.GGUFWriter``; tensor data is
then streamed in declaration order, in as many chunks per tensor as the caller likes (a band
of rows at a time), and every tensor must receive exactly the byte count declared for it.

    with atomic_output(out_path) as tmp:
        w = GGUFStreamWriter(tmp, "mamba")
        w.kv.add_uint32(...)                       # gguf.GGUFWriter's add_* methods
        w.add_tensor("token_embd.weight", (512, 64), GGMLType.F32)   # numpy order
        w.begin_data()
        w.write("token_embd.weight", arr)          # bytes-like / ndarray, any number of chunks
        w.close()                                  # checks every tensor is complete
"""
from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import gguf

from toolkit.errors import InputError, ResourceError
from toolkit.gguf_io.constants import GGMLType, row_nbytes

log = logging.getLogger(__name__)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | os.PathLike[str], inputs: tuple[str, ...] = (), probe: bool = True) -> None:
    """The checks :func:`atomic_output` makes before any work, for commands that want them
    before a long computation (``toolkit run --logits-out``).  ``probe``: also create and
    remove a temp file next to ``path`` (an unwritable directory is reported now).

    Raises:
        InputError: the output directory does not exist, ``path`` is a directory, or ``path``
            is one of ``inputs`` (same file: links and relative spellings included), or
            ``path`` exists and is not a regular file (a FIFO, a device: "not a regular file").
    """
    path = os.fspath(path)
    if not path:   # abspath('') is the current directory: the final rename to '' would fail
        raise InputError("'': the output file name is empty")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise InputError(f"{path}: output directory {d} " + ("is not a directory" if os.path.exists(d) else "does not exist"))
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory")
    if path.endswith(("/", os.sep)):   # abspath drops the slash: the rename would fail at the end
        raise InputError(f"{path}: " + ("not a directory" if os.path.exists(path.rstrip("/" + os.sep)) else "no such directory"))
    try:
        st = os.stat(path)
    except OSError:
        st = None   # absent (or a dangling link): a new file is created
    if st is not None and not stat.S_ISREG(st.st_mode):
        # the temp-then-rename would replace a FIFO or a device (/dev/null as root) by a file
        raise InputError(f"{path}: not a regular file")
    for src in inputs:
        if src and _same_file(src, path):
            raise InputError(f"{path}: output would overwrite the input {src}")
    if probe:   # create and remove a temp file: EACCES, EROFS, /proc... show up now, not at the end
        made: list[str] = []
        try:
            _create_temp(path, d, made)
        except OSError as e:
            raise InputError(f"{path}: cannot create a file in {d} ({e.strerror})") from None
        finally:
            for t in made:
                _unlink(t)


@contextmanager
def atomic_output(path: str | os.PathLike[str], inputs: tuple[str, ...] = ()) -> Iterator[str]:
    """Yield a temp path next to ``path``; rename it onto ``path`` only if the block succeeds.

    On any exception (KeyboardInterrupt included) the temp file is removed and ``path`` is
    left as it was.  ``ENOSPC``/``EDQUOT`` become ResourceError.

    Raises:
        InputError: the output directory does not exist or does not accept a new file,
            ``path`` is one of ``inputs`` or exists and is not a regular file.
    """
    path = os.fspath(path)
    check_output(path, inputs, probe=False)
    d = os.path.dirname(os.path.abspath(path))
    # The temp's name is chosen before the file exists and the file is made inside the block
    # that removes it: a KeyboardInterrupt at any point (SIGINT / SIGTERM come between any two
    # bytecodes, on whichever thread) finds the name to unlink.  With mkstemp the name came back
    # only after the file existed, and an interrupt in between left the .part file (seen once in
    # tests/reliability/test_sigterm_decode.py).  O_CREAT's 0o666 takes the umask, as any new file.
    made: list[str] = []   # the temp's name, listed before the file is created
    try:
        try:
            _create_temp(path, d, made)
        except OSError as e:   # EACCES, EROFS, ...: the output location is unusable, say which
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceError(f"{path}: no space left on device") from None
            raise InputError(f"{path}: cannot create a file in {d} ({e.strerror})") from None
        yield made[-1]
        os.replace(made[-1], path)
    except OSError as e:
        for t in made:
            _unlink(t)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ResourceError(f"{path}: no space left on device while writing") from None
        if e.filename in made:   # the hidden temp is ours, not the user's: errors name the output
            e.filename = path
        raise
    except BaseException:
        for t in made:
            _unlink(t)
        raise


def _create_temp(path: str, d: str, made: list[str]) -> None:
    """Create an empty ``.NAME.XXXXXXXX.part`` next to ``path`` in ``d`` (O_EXCL, mode 0o666 less
    the umask, as any new file), its name appended to ``made`` *before* the file exists, so that
    a caller's cleanup always knows it; a name taken by another file is dropped from ``made``
    and another is tried.  Raises OSError (FileExistsError after 100 names)."""
    base = "." + os.path.basename(path) + "."
    for _ in range(100):
        made.append(os.path.join(d, base + secrets.token_hex(4) + ".part"))
        try:
            fd = os.open(made[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            made.pop()   # someone else's file: never ours to remove
            continue
        except OSError:
            made.pop()   # not created (EROFS, EACCES, ...): nothing to remove, and on a read-only
            raise        # file system unlinking the name would fail with EROFS in turn
        os.close(fd)
        return
    raise FileExistsError(errno.EEXIST, "no unused temp name", d)


def _unlink(p: str) -> None:
    """Remove our temp ``p``; a failure is logged, never raised (it would replace the error
    being handled by its own)."""
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("could not remove the temp file %s (%s)", p, e.strerror or e)


def tensor_nbytes(np_shape: tuple[int, ...], ggml_type: int) -> int:
    """Exact data size of a tensor of numpy shape ``np_shape`` (rows of ``np_shape[-1]``)."""
    n_rows = int(np.prod(np_shape[:-1], dtype=np.int64)) if len(np_shape) > 1 else 1
    return n_rows * row_nbytes(ggml_type, int(np_shape[-1]) if np_shape else 1)


class GGUFStreamWriter:
    """A small state machine: PLAN (kv + add_tensor) -> DATA (write ...) -> CLOSED."""

    def __init__(self, path: str, arch: str):
        self.path = path
        self.kv = gguf.GGUFWriter(path, arch)
        self._plan: list[tuple[str, int]] = []   # (name, nbytes) in declaration order
        self._state = "plan"
        self._cur = 0          # index into _plan of the tensor being written
        self._written = 0      # bytes written of the current tensor
        self._fout = None

    def add_tensor(self, name: str, np_shape: tuple[int, ...], ggml_type: int) -> int:
        """Declare a tensor (numpy-order shape); returns its exact byte size."""
        self._expect("plan")
        nbytes = tensor_nbytes(tuple(np_shape), ggml_type)
        self.kv.add_tensor_info(name, tuple(int(x) for x in np_shape), np.dtype(np.float32), nbytes,
                                raw_dtype=GGMLType(ggml_type))
        self._plan.append((name, nbytes))
        return nbytes

    def begin_data(self) -> None:
        self._expect("plan")
        self.kv.write_header_to_file()
        self.kv.write_kv_data_to_file()
        self.kv.write_ti_data_to_file()
        self._fout = self.kv.fout[0]
        self._state = "data"
        self._pad()

    def write(self, name: str, data) -> None:
        """Append bytes of tensor ``name`` (must be the tensor in progress or the next one)."""
        self._expect("data")
        buf = memoryview(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data).cast("B")
        self._claim(name, len(buf))
        self._fout.write(buf)
        self._written += len(buf)

    def copy_from(self, name: str, src_fd: int, src_offset: int, nbytes: int) -> None:
        """Append ``nbytes`` of tensor ``name`` copied from file descriptor ``src_fd`` at byte
        ``src_offset``, inside the kernel (``os.copy_file_range``; a read/write loop of 16 MiB
        where that is unavailable).  No user-space copy: the bytes never count in our RSS.

        Raises:
            ValueError: the same state errors as :meth:`write`; EOFError: the source is shorter.
        """
        self._expect("data")
        self._claim(name, nbytes)
        self._fout.flush()
        out_fd = self._fout.fileno()
        pos = self._fout.tell()
        done = 0
        cfr = getattr(os, "copy_file_range", None)
        while done < nbytes:
            k = 0
            if cfr is not None:
                try:
                    k = cfr(src_fd, out_fd, nbytes - done, src_offset + done, pos + done)
                except OSError as e:
                    if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
                        raise
                    cfr = None
                    continue
            else:
                chunk = os.pread(src_fd, min(nbytes - done, 16 << 20), src_offset + done)
                k = len(chunk) and os.pwrite(out_fd, chunk, pos + done)
            if k == 0:
                raise EOFError(f"tensor {name!r}: source ended after {done} of {nbytes} bytes")
            done += k
        self._fout.seek(pos + nbytes)   # resync the buffered writer's position
        self._written += nbytes

    def _claim(self, name: str, n: int) -> None:
        """Check that ``n`` more bytes of tensor ``name`` may be written now (advancing to it)."""
        if self._cur >= len(self._plan):
            raise ValueError(f"tensor {name!r}: all declared tensors are already written")
        want, size = self._plan[self._cur]
        if want != name:
            if self._written != size:
                raise ValueError(f"tensor {want!r}: {self._written} bytes written, {size} declared "
                                 f"(got data of {name!r} before it was complete)")
            self._advance()
            if self._cur >= len(self._plan) or self._plan[self._cur][0] != name:
                nxt = self._plan[self._cur][0] if self._cur < len(self._plan) else None
                raise ValueError(f"expected data of tensor {nxt!r}, got {name!r}")
            want, size = self._plan[self._cur]
        if self._written + n > size:
            raise ValueError(f"tensor {name!r}: {self._written + n} bytes written, {size} declared")

    def _advance(self) -> None:
        name, size = self._plan[self._cur]
        if self._written != size:
            raise ValueError(f"tensor {name!r}: {self._written} bytes written, {size} declared")
        self._pad()
        self._cur += 1
        self._written = 0

    def _pad(self) -> None:
        pos = self._fout.tell()
        pad = gguf.GGUFWriter.ggml_pad(pos, self.kv.data_alignment) - pos
        if pad:
            self._fout.write(b"\0" * pad)

    def close(self) -> None:
        """Check that every declared tensor is complete, flush and close."""
        if self._state == "plan":
            self.begin_data()
        self._expect("data")
        if self._plan:
            if self._cur < len(self._plan):
                self._advance()
            if self._cur != len(self._plan):
                raise ValueError(f"tensor {self._plan[self._cur][0]!r} was declared but never written")
        self._fout.flush()
        os.fsync(self._fout.fileno())
        self.kv.close()
        self._state = "closed"

    def abort(self) -> None:
        """Close the file handle without checks (the caller removes the file)."""
        try:
            self.kv.close()
        except Exception:
            pass
        self._state = "closed"

    def _expect(self, state: str) -> None:
        if self._state != state:
            raise ValueError(f"GGUF writer: expected state {state!r}, got {self._state!r}")
