"""The download of a device volume to NumPy (``leveret.cuda.pipeline.SlabDownload``,
fdk's slabs and boxes) run on the CPU through the stand-in CuPy
(tests/stand_in_cupy.py): every slab reaches
its place in the host array through the ring of staging buffers, into a
whole volume, a box of a larger array (fdk's boxes along y) or a window
whose slices are not contiguous, and nothing beside it is written. The
ordering of real CUDA streams is checked by the GPU tests of test_fdk.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import stand_in_cupy

from leveret.cuda import pipeline


@pytest.mark.parametrize("target", ["whole", "box", "window"])
def test_every_slab_lands_through_the_ring(monkeypatch, rng, target):
    stand_in_cupy.install(monkeypatch, n_gpus=1)
    volume = stand_in_cupy.device_array(rng.random((10, 24, 40), dtype=np.float32))
    host = host_out = None  # "whole": the download allocates the result
    if target == "box":
        host = np.full((10, 50, 40), -1.0, np.float32)
        host_out = host[:, 13:37]
    elif target == "window":
        host = np.full((10, 24, 52), -1.0, np.float32)
        host_out = host[:, :, 5:45]
    download = pipeline.SlabDownload(
        volume, alignment=1, n_slabs=4, host_out=host_out, block_bytes=100 * 4
    )  # blocks of 100 values: the ring goes round often
    try:
        for slab in download.slabs:
            download.queue(slab)
        got = download.finish()
        blocks = download.blocks_sent
    finally:
        download.close()
    np.testing.assert_array_equal(got, np.asarray(volume))
    assert blocks > pipeline.STAGING_BUFFERS
    if target == "box":
        assert got.base is host and np.all(host[:, :13] == -1) and np.all(host[:, 37:] == -1)
    if target == "window":
        assert blocks == 10  # a slice per block: its rows are not one run of memory
        assert np.all(host[:, :, :5] == -1) and np.all(host[:, :, 45:] == -1)


def test_downloads_sharing_a_staging_return_before_their_copies(monkeypatch, rng):
    """fdk's boxes: each download returns once its transfers have landed,
    while the copies into the result wait (here: until released); the
    staging never holds more than its capacity in buffers, and after its
    drain every box is in place."""
    stand_in_cupy.install(monkeypatch, n_gpus=1)
    release, held = threading.Event(), []
    copy = pipeline.Staging._copy_out

    def held_copy(self, *args):
        release.wait(5)
        copy(self, *args)

    take = pipeline.Staging.take

    def counted_take(self, *args):
        buffer = take(self, *args)
        held.append(self._used)  # bytes of buffers in use, this one included
        return buffer

    monkeypatch.setattr(pipeline.Staging, "_copy_out", held_copy)
    monkeypatch.setattr(pipeline.Staging, "take", counted_take)
    host = np.full((10, 48, 40), -1.0, np.float32)
    boxes = [stand_in_cupy.device_array(rng.random((10, 24, 40), dtype=np.float32)) for _ in range(2)]
    capacity = 2 * boxes[0].nbytes
    staging = pipeline.Staging(capacity)
    try:
        for j, box in enumerate(boxes):
            download = pipeline.SlabDownload(
                box,
                alignment=1,
                n_slabs=3,
                host_out=host[:, 24 * j : 24 * (j + 1)],
                staging=staging,
                block_bytes=100 * 4,
            )
            for slab in download.slabs:
                download.queue(slab)
            assert download.finish() is not None
            download.close()
        assert np.all(host == -1)  # both returned, no copy done
        release.set()
        staging.drain()
    finally:
        release.set()
        staging.close()
    np.testing.assert_array_equal(host, np.concatenate([np.asarray(b) for b in boxes], axis=1))
    assert max(held) <= capacity and staging._used == 0
