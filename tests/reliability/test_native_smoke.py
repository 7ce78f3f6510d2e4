import pytest

from toolkit.errors import NativeError

pytestmark = pytest.mark.native


def test_native_library_loads_and_reports_errors():
    from toolkit.binding import check, lib, ffi
    assert ffi.string(lib.tk_version()).decode() == "0.1.0"
    check(lib.TK_OK)
    with pytest.raises(NativeError):
        check(lib.TK_ERR_INVALID, "x")
