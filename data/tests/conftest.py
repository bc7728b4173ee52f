"""Shared fixtures for the data-pipeline tests."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from datatest_util import shared_data_dir  # noqa: E402  (also puts data/ on sys.path)


@pytest.fixture(scope="session")
def shared_data():
    path = shared_data_dir()
    if not os.path.isdir(path):
        pytest.skip(f"shared data folder {path} not found; set SHARED_DATA")
    return path


@pytest.fixture(scope="session")
def gpt2_dir(shared_data):
    return os.path.join(shared_data, "gpt2")


@pytest.fixture(scope="session")
def gpt2_enc(gpt2_dir):
    import text_tokenizers as tk
    return tk.load_gpt2(gpt2_dir)
