"""The live reconstructor on the GPU: raw frames from pinned buffers, rejected frames,
slices equal to the CPU leveret.fbp, views spilled to host memory.

Small sizes: the file also runs quickly under compute-sanitizer memcheck.
"""

import numpy as np
import pytest

from cases import parallel_phantom_scan, raw_counts_scan

import leveret
from leveret.live import LiveReconstructor

pytestmark = pytest.mark.gpu


def _err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("storage, tol", [("float32", 1e-5), ("float16", 3e-4)])
def test_gpu_slices_equal_cpu_fbp_after_the_last_frame_from_raw_counts(storage, tol):
    from leveret.live import Frame

    g, vol, counts, flat, dark, ref = raw_counts_scan(64, 48, 12)
    angles = g.angles
    rec = LiveReconstructor(vol, g, backend="cuda", storage=storage, flat=flat, dark=dark, max_batch=16)
    order = np.random.default_rng(2).permutation(64)
    frames = []
    for i in order:
        buf = rec.frame_buffer(np.uint16)
        buf[...] = counts[i]
        frames.append(Frame(buf, int(i), angle=angles[i]))
    bad = rec.frame_buffer(np.float32)
    bad[...] = np.nan
    frames.insert(5, Frame(bad, 99, angle=0.3))
    for b in range(0, len(frames), 13):
        rec.add_frames(frames[b : b + 13])
    assert rec.stats.rejected == 1 and rec.stats.received == 64
    assert rec._pool.lent == 0
    rec.watch_orthogonal((vol.coordinates("x")[20], vol.coordinates("y")[30], vol.coordinates("z")[5]))
    s = rec.slices()
    assert _err(s["xy"], ref[5]) < tol
    assert _err(s["xz"], ref[:, 30, :]) < tol
    assert _err(s["yz"], ref[:, :, 20]) < tol
    assert set(rec.gpu_seconds) == {"upload", "correct", "filter", "backproject", "store"}


def test_views_beyond_the_gpu_store_spill_to_host_and_moves_read_them(caplog):
    angles, g, proj = parallel_phantom_scan(32, 8, 40)
    vol = g.default_volume()
    ref = leveret.fbp(proj, g, vol, backend="cpu")
    rec = LiveReconstructor(vol, g, backend="cuda", max_views=8)
    with caplog.at_level("WARNING", logger="leveret.live"):
        for b in np.array_split(np.arange(40), 6):
            rec.add(proj[b], angles[b])
    assert sum("host memory" in r.message for r in caplog.records) == 1
    assert rec._store.n_device_blocks * rec._store.block_views <= 8 and rec.n_views == 40
    rec.watch_orthogonal((vol.coordinates("x")[10], vol.coordinates("y")[12], vol.coordinates("z")[3]))
    s = rec.slices()
    assert _err(s["xy"], ref[3]) < 1e-5
    assert _err(s["yz"], ref[:, :, 10]) < 1e-5


def test_gpu_sinogram_holds_every_frame_received_in_arrival_order():
    """Frames of line integrals in batches: row k of the sinogram is frame k's
    middle row as the device batch saw it (float32), whatever buffers were reused."""
    from leveret.live import Frame

    angles, g, proj = parallel_phantom_scan(32, 8, 50)
    rec = LiveReconstructor(g.default_volume(), g, backend="cuda", max_batch=8)
    frames = [Frame(proj[i], i, angle=angles[i]) for i in range(50)]
    for b in np.array_split(np.arange(50), 7):
        assert rec.add_frames([frames[i] for i in b]) == b.size
    np.testing.assert_array_equal(rec.sinogram(), proj[:, g.n_rows // 2, :])
