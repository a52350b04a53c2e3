"""Shared test set-up: the `gpu` marker's skip rule and common fixtures."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from leveret.backends import cuda_status
from leveret.io import read_angles, read_array


def pytest_collection_modifyitems(config, items):
    ok, reason = cuda_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A fresh generator per test and run: kernels must be right on any input.
    The seed is printed, so pytest shows it with a failure; LEVERET_TEST_SEED=<seed>
    replays it."""
    seed = int(os.environ.get("LEVERET_TEST_SEED") or np.random.SeedSequence().entropy)
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)


# -- the real scan savu-image-test: bundled as leveret.datasets.savu_scan() (fixture savu_scan, always
# there), and as its original files in data/savu-image-test/ of the folder LEVERET_SHARED names
# (default: "shared" beside the repository; fixture savu_files, skips without them)

REPO_ROOT = Path(__file__).resolve().parents[1]
N_PROJECTIONS, N_ROWS, N_COLS = 91, 135, 160
# angles.txt has 111 lines; 0-based lines 10..100 are the 91 projections, the
# repeated values around them belong to dark/flat frames.
PROJECTION_LINES = slice(10, 101)


class SavuScan(NamedTuple):
    projections: np.ndarray  # (91, 135, 160) uint16
    dark: np.ndarray  # (135, 160) float32
    flat: np.ndarray  # (135, 160) float32
    angles: np.ndarray  # (91,) float64, radians


def shared_folder() -> Path:
    return Path(os.environ.get("LEVERET_SHARED", REPO_ROOT.parent / "shared"))


def savu_folder() -> Path:
    return shared_folder() / "data" / "savu-image-test"


@functools.lru_cache(maxsize=1)
def _load(folder: Path) -> SavuScan:
    scan = SavuScan(
        projections=read_array(folder / "projections"),
        dark=read_array(folder / "dark_00001.tiff"),
        flat=read_array(folder / "flat_00001.tiff"),
        angles=read_angles(folder / "angles.txt", unit="degree")[PROJECTION_LINES],
    )
    for arr in scan:  # shared between tests through the cache: keep it intact
        arr.setflags(write=False)
    return scan


@pytest.fixture(scope="session")
def savu_scan() -> SavuScan:
    """The real scan as leveret.datasets bundles it."""
    from leveret.datasets import savu_scan as bundled

    scan = bundled()
    return SavuScan(projections=scan.projections, dark=scan.dark, flat=scan.flat, angles=scan.angles)


@pytest.fixture(scope="session")
def savu_files() -> SavuScan:
    """The real scan read from its original files with leveret.io; skips the test if they are absent."""
    folder = savu_folder()
    if not (folder / "projections").is_dir():
        pytest.skip(f"real scan savu-image-test not found at {folder} (set LEVERET_SHARED to the shared folder)")
    return _load(folder)


def _rel_to_texture_mirror(got, mirror) -> float:
    """Relative 2-norm of a texture kernel's result against the CPU's mirror
    of the texture unit (8-bit weights, docs/accuracy.md), leaving out the
    z columns (the voxels of one (y, x)) with the largest differences, one
    column for every 10^4 voxels (at least one). The mirror follows the
    texture unit except, rarely, a weight one step (1/256) apart when a
    coordinate lies within a rounding of halfway between two steps: that
    moves a voxel by ~1/256 of a pixel value, enough to lift a small
    volume's norm past 1e-5. On a circular scan a view's detector column
    does not change along z, so one such column coordinate moves the voxels
    of a whole z column (seen: 9 voxels of one column from one view of 40).
    A kernel fault touches far more voxels than are left out."""
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(mirror, np.float64))
    columns = diff.reshape(-1, diff.shape[-2] * diff.shape[-1]) if diff.ndim >= 2 else diff.reshape(1, -1)
    n_out = max(1, diff.size // 10_000)
    kept = np.delete(columns, np.argsort(columns.max(axis=0))[-n_out:], axis=1)
    return float(np.linalg.norm(kept) / np.linalg.norm(np.asarray(mirror, np.float64)))


@pytest.fixture
def rel_mirror():
    return _rel_to_texture_mirror


@pytest.fixture
def ipc_dir():
    """A short folder for ipc:// endpoints (their paths are limited to ~100 bytes)."""
    path = tempfile.mkdtemp(prefix="lz")
    yield path
    shutil.rmtree(path, ignore_errors=True)
