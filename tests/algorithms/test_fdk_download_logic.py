"""fdk's download of a device volume to NumPy (``_SlabDownload``) run on the
CPU through the stand-in CuPy (tests/stand_in_cupy.py): every slab reaches
its place in the host array through the ring of staging buffers, into a
whole volume, a box of a larger array (fdk's boxes along y) or a window
whose slices are not contiguous, and nothing beside it is written. The
ordering of real CUDA streams is checked by the GPU tests of test_fdk.py."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import stand_in_cupy

fdk_module = importlib.import_module("leveret.algorithms.fdk")   # leveret.algorithms.fdk is also the function


@pytest.mark.parametrize("target", ["whole", "box", "window"])
def test_every_slab_lands_through_the_ring(monkeypatch, rng, target):
    stand_in_cupy.install(monkeypatch, n_gpus=1)
    monkeypatch.setattr(fdk_module, "STAGING_BYTES", 100 * 4)   # blocks of 100 values: the ring goes round often
    volume = stand_in_cupy.device_array(rng.random((10, 24, 40), dtype=np.float32))
    host = host_out = None   # "whole": the download allocates the result
    if target == "box":
        host = np.full((10, 50, 40), -1.0, np.float32)
        host_out = host[:, 13:37]
    elif target == "window":
        host = np.full((10, 24, 52), -1.0, np.float32)
        host_out = host[:, :, 5:45]
    download = fdk_module._SlabDownload(volume, alignment=1, n_slabs=4, host_out=host_out)
    try:
        for slab in download.slabs:
            download.queue(slab)
        got = download.finish()
        blocks = download.blocks_sent
    finally:
        download.close()
    np.testing.assert_array_equal(got, np.asarray(volume))
    assert blocks > fdk_module.STAGING_BUFFERS
    if target == "box":
        assert got.base is host and np.all(host[:, :13] == -1) and np.all(host[:, 37:] == -1)
    if target == "window":
        assert blocks == 10   # a slice per block: its rows are not one run of memory
        assert np.all(host[:, :, :5] == -1) and np.all(host[:, :, 45:] == -1)
