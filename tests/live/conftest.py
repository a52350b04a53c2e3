"""Fixtures of the live tests."""

import shutil
import tempfile

import pytest


@pytest.fixture
def ipc_dir():
    """A short folder for ipc:// endpoints (their paths are limited to ~100 bytes)."""
    path = tempfile.mkdtemp(prefix="lz")
    yield path
    shutil.rmtree(path, ignore_errors=True)
