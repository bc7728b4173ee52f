"""dev/reference/checkpoint.py's FNV-1a 64 (the payload checksum of docs/formats.md): its Python loop against
the published FNV-1a test vectors, and its compiled loop (used above 64 KiB) against the Python loop on fresh
random bytes."""
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dev", "reference"))
import checkpoint  # noqa: E402

# 64-bit FNV-1a of these strings, from the FNV reference test suite (Fowler, Noll, Vo)
VECTORS = [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C), (b"foobar", 0x85944171F73967E8)]


@pytest.mark.parametrize("data, want", VECTORS)
def test_python_loop_is_fnv1a64(data, want):
    assert checkpoint.fnv1a64_python(data) == want
    assert checkpoint.fnv1a64(data) == want  # short inputs take the Python loop


def test_compiled_loop_equals_the_python_loop():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: checkpoint.fnv1a64 uses its Python loop only")
    assert checkpoint._fnv1a64_native() is not None, "a C compiler is present but the compiled loop did not build"
    for n in ((1 << 16) + 1, (1 << 20) + 7):
        data = os.urandom(n)
        assert checkpoint.fnv1a64(data) == checkpoint.fnv1a64_python(data), n
        assert checkpoint.fnv1a64(bytearray(data)) == checkpoint.fnv1a64_python(data)  # not only bytes
    # it hashes every byte: one changed byte at the end changes the hash
    changed = data[:-1] + bytes([data[-1] ^ 1])
    assert checkpoint.fnv1a64(changed) != checkpoint.fnv1a64(data)
