"""Example counts for the property tests: short runs by default, the long ones on request.

    pytest ...                                      # the counts CI runs (a few seconds in all)
    HYPOTHESIS_PROFILE=long pytest ...              # the long runs (or --hypothesis-profile=long)

tests/conftest.py registers the ``long`` profile and loads $HYPOTHESIS_PROFILE.  A test with
its own example count passes both figures through :func:`examples`, since an explicit
``max_examples`` is not changed by a profile.  (The GGUF mutation fuzzers of the slow tier
scale with $TOOLKIT_FUZZ_EXAMPLES instead: tests/reliability/fuzz_util.py.)
"""
from __future__ import annotations

from hypothesis import settings


def long_run() -> bool:
    """Whether the ``long`` profile is active (HYPOTHESIS_PROFILE=long or --hypothesis-profile=long)."""
    return settings.get_current_profile_name() == "long"


def examples(quick: int, long: int) -> int:
    """``quick`` examples normally, ``long`` under the long profile."""
    return long if long_run() else quick
