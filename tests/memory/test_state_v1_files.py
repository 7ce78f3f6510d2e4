"""State blobs written by the runtime before the memory interface was reshaped (format
version 1, tests/fixtures/state/) still load, and continue exactly where they left off.

The fixtures were written with the pre-refactor runtime: a context of n_ctx=64 fed tokens
``arange(1, 12) * 7 % n_vocab``, its state saved, then token 5 decoded; the saved logits
are that decode's, with the attention kernel of that time: the reference kernel
(tk_attn_set_reference) reproduces them bit for bit, the blocked one to float reordering.
"""
from pathlib import Path

import numpy as np
import pytest

from toolkit.runtime import Context, Model

pytestmark = pytest.mark.native

FIX = Path(__file__).parent.parent / "fixtures"
NAMES = ["bamba-tiny", "mamba-tiny", "mamba2-tiny"]


@pytest.mark.parametrize("name", NAMES)
def test_v1_state_file_restores_bit_identical(name):
    m = Model(FIX / "llamacpp" / f"{name}.f32.gguf")
    blob = (FIX / "state" / f"{name}.v1.tkstate").read_bytes()
    assert int.from_bytes(blob[8:12], "little") == 1          # format version 1
    want = np.load(FIX / "state" / f"{name}.v1.next_logits.npy")
    from toolkit.binding import lib
    for reference in (1, 0):
        lib.tk_attn_set_reference(reference)
        try:
            c = Context(m, n_ctx=64, n_seq_max=1)
            c.load_state(blob)
            assert c.memory.seq_pos_max(0) == 10
            got = c.decode(np.array([5], np.int32), 0)
        finally:
            lib.tk_attn_set_reference(-1)
        if reference:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    # and the same state written again is the same bytes
    c2 = Context(m, n_ctx=64, n_seq_max=1)
    c2.load_state(blob)
    assert c2.state_bytes() == blob


def test_state_from_a_newer_version_names_the_version():
    m = Model(FIX / "llamacpp" / "mamba-tiny.f32.gguf")
    blob = bytearray((FIX / "state" / "mamba-tiny.v1.tkstate").read_bytes())
    blob[8:12] = (7).to_bytes(4, "little")
    c = Context(m, n_ctx=64, n_seq_max=1)
    with pytest.raises(Exception, match="format version 7 is newer than this build's 1"):
        c.load_state(bytes(blob))
