"""Fixtures every pytest module under test/ may use (the helpers themselves: test/run_helpers.py)."""
import pytest

from run_helpers import byte_data_in


@pytest.fixture(scope="session")
def byte_data(tmp_path_factory):
    """Byte-level shards of tiny Shakespeare (run_helpers.byte_data_in), written once per session."""
    return byte_data_in(tmp_path_factory.mktemp("bytes"))
