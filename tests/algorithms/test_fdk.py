"""leveret.fdk: quantitative on analytic phantoms with exact cone-beam projections."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.algorithms.fdk_weights import parker_weights
from leveret.geometry import ConeGeometry, VolumeGeometry

from cases import gpu_memory_for_arrays

SID, SDD = 300.0, 500.0


def scan(angles, n=64, pixel=2.0):
    return ConeGeometry.circular(angles, sid=SID, sdd=SDD, n_rows=n, n_cols=n, pixel_size=pixel)


def centre_plane_interior(rec, volume, radius):
    k = volume.nz // 2
    x = volume.coordinates("x")
    r = np.hypot(x[None, :], volume.coordinates("y")[:, None])
    return rec[k][r < radius]


@pytest.fixture(scope="module")
def ball_volume():
    return VolumeGeometry((32, 48, 48), voxel_size=1.5)


def test_full_scan_ball_is_one_within_2_percent(ball_volume):
    g = scan(np.linspace(0, 2 * np.pi, 180, endpoint=False))
    ball = phantom.ball(25.0)
    rec = leveret.fdk(ball.project(g).astype(np.float32), g, ball_volume, backend="cpu")
    inside = centre_plane_interior(rec, ball_volume, 18.0)
    assert abs(inside.mean() - 1) < 0.02 and np.abs(inside - 1).max() < 0.04


@pytest.mark.parametrize("direction", [1, -1])
def test_short_scan_with_parker_weights(ball_volume, direction):
    g0 = scan(np.zeros(1))
    fan = 2 * np.arctan(0.5 * g0.n_cols * 2.0 / SDD)
    n = 140
    angles = direction * np.linspace(0, np.pi + fan, n)
    g = scan(angles)
    ball = phantom.ball(25.0, center=(6.0, -4.0, 0.0))
    proj = ball.project(g).astype(np.float32)
    rec = leveret.fdk(proj, g, ball_volume, backend="cpu")  # auto: Parker
    truth = phantom.ball(20.0, center=(6.0, -4.0, 0.0)).rasterize(ball_volume) > 0
    k = ball_volume.nz // 2
    inside = rec[k][truth[k]]
    assert abs(inside.mean() - 1) < 0.02
    without = leveret.fdk(proj, g, ball_volume, backend="cpu", short_scan=False)
    assert abs(without[k][truth[k]].mean() - 1) > 0.1  # the test can fail: Parker matters


def ball_interior(g, volume, radius=20.0, inner=16.0):
    """FDK of a centred ball of value 1 (exact projections): the centre plane inside ``inner``."""
    rec = leveret.fdk(phantom.ball(radius).project(g).astype(np.float32), g, volume, backend="cpu")
    return centre_plane_interior(rec, volume, inner)


def test_a_27_degree_fan_is_one_within_its_measured_error():
    """The cosine weight cos(gamma) of the ray to the central ray matters most on a wide fan:
    here 27 degrees (96 columns at 200 from the source, the axis at 100). Measured: mean
    -0.0006, largest deviation 0.0014 inside 0.8 of the ball; the weight squared (cos^2)
    gives 0.0104 (bounds 0.002 and 0.004)."""
    g = ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 360, endpoint=False), sid=100.0, sdd=200.0, n_rows=16, n_cols=96, pixel_size=1.0
    )
    assert np.degrees(2 * np.arctan(48 / 200)) == pytest.approx(27.0, abs=0.1)
    inside = ball_interior(g, VolumeGeometry((1, 64, 64), voxel_size=44 / 64))
    assert abs(inside.mean() - 1) < 0.002 and np.abs(inside - 1).max() < 0.004, (
        inside.mean(),
        inside.min(),
        inside.max(),
    )


def test_a_full_turn_weighs_every_view_alike():
    """Uniform views over a full turn: each is 1/n of the turn, the end views too (they are
    neighbours across 0 = 2 pi); FDK's quadrature is half of that per view (each line is
    measured twice). Measured on 24 views: mean -0.0010; the end views at half a step give
    -0.043 (1/24 of the weight missing; bound 0.01)."""
    from leveret.algorithms.fdk_weights import FDKWeighting, view_frames

    n = 24
    g = scan(np.linspace(0, 2 * np.pi, n, endpoint=False))
    weighting = FDKWeighting(g, short_scan=False)
    pitch = view_frames(g)["pitch"]
    np.testing.assert_allclose(weighting.per_column * pitch[:, None], np.pi / n, rtol=1e-12)
    inside = ball_interior(g, VolumeGeometry((1, 48, 48), voxel_size=1.5), radius=25.0, inner=12.0)
    assert abs(inside.mean() - 1) < 0.01, inside.mean()


def test_two_turns_of_a_circle_are_one_turn_measured_twice():
    """A scan of k turns measures each line 2 k times: its quadrature is divided by k. The
    second turn here repeats the first's views, so the volumes agree to rounding (a scale
    of 1 instead of 1/2 doubles it)."""
    one = np.linspace(0, 2 * np.pi, 72, endpoint=False)
    volume = VolumeGeometry((1, 48, 48), voxel_size=1.5)
    once = ball_interior(scan(one), volume, radius=25.0, inner=18.0)
    twice = ball_interior(scan(np.concatenate([one, one + 2 * np.pi])), volume, radius=25.0, inner=18.0)
    assert abs(once.mean() - 1) < 0.005  # measured -0.0013
    np.testing.assert_allclose(twice, once, rtol=1e-5, atol=1e-6)


def test_parker_weights_sum_to_one_over_conjugate_rays():
    """The line (beta, gamma) is measured again at (beta + pi + 2 gamma, -gamma)."""
    delta = 0.2
    gamma = np.linspace(-0.9 * delta, 0.9 * delta, 19)[:, None]
    beta = np.linspace(0, 1, 50)[None, :] * (2 * delta - 2 * gamma)  # the rising part
    w = parker_weights(beta, gamma, delta) + parker_weights(beta + np.pi + 2 * gamma, -gamma, delta)
    np.testing.assert_allclose(w, 1.0, atol=1e-12)
    middle = np.linspace(2 * delta + 0.01, np.pi - 2 * delta - 0.01, 7)  # measured once
    np.testing.assert_allclose(parker_weights(middle, 0.0, delta), 1.0)
    assert parker_weights(np.pi + 3 * delta, 0.0, delta) == 0.0


def test_shepp_logan_3d_and_precision():
    g = scan(np.linspace(0, 2 * np.pi, 120, endpoint=False), n=64, pixel=3.0)  # no truncation
    vol = VolumeGeometry((8, 40, 40), voxel_size=(2.0, 2.5, 2.5))
    head = phantom.shepp_logan_3d(radius=45.0)
    proj = head.project(g).astype(np.float32)
    kept = proj.copy()
    rec = leveret.fdk(proj, g, vol, backend="cpu", filter="hann")
    np.testing.assert_array_equal(proj, kept)  # the input is not touched
    truth = head.rasterize(vol, supersampling=2)
    k = vol.nz // 2
    assert np.median(np.abs(rec[k] - truth[k])) < 0.03
    double = leveret.fdk(proj.astype(np.float64), g, vol, backend="cpu", filter="hann", precision="float64")
    assert double.dtype == np.float64
    assert np.linalg.norm(double - rec) / np.linalg.norm(double) < 1e-5
    with pytest.raises(ValueError, match="^precision: expected one of 'float32', 'float64', got 'double'"):
        leveret.fdk(proj.astype(np.float64), g, vol, backend="cpu", filter="hann", precision="double")
    st: dict = {}
    leveret.fdk(proj, g, vol, backend="cpu", stats=st)
    assert st == {}  # no GPU pipeline ran


def test_slabs_fed_their_own_rows_equal_the_whole_volume():
    g = scan(np.linspace(0, 2 * np.pi, 60, endpoint=False), n=40, pixel=3.0)
    vol = VolumeGeometry((17, 24, 24), voxel_size=2.5, center=(4.0, 0.0, 0.0))
    proj = phantom.shepp_logan_3d(radius=40.0).project(g).astype(np.float32)
    whole = leveret.fdk(proj, g, vol, backend="cpu")
    slabbed = leveret.fdk(proj, g, vol, backend="cpu", slab_slices=4)
    np.testing.assert_allclose(slabbed, whole, rtol=1e-5, atol=1e-6)
    # A volume that no ray reaches is zero, with a warning, not an error.
    far = VolumeGeometry((6, 8, 8), voxel_size=2.5, center=(200.0, 0.0, 0.0))
    with pytest.warns(UserWarning, match="^volume: no ray of the scan reaches it"):
        assert np.all(leveret.fdk(proj, g, far, backend="cpu", slab_slices=2) == 0)


def test_rows_seen_by_a_slab():
    from leveret.algorithms.fdk_weights import rows_seen

    g = scan(np.linspace(0, 2 * np.pi, 8, endpoint=False), n=64)
    top = VolumeGeometry((4, 10, 10), voxel_size=2.0, center=(30.0, 0.0, 0.0))
    start, stop = rows_seen(g, top)
    assert 32 < start < stop <= 64  # above the centre row, inside the detector
    assert rows_seen(g, VolumeGeometry((2, 4, 4), center=(500.0, 0, 0))) is None


def test_a_box_has_the_volumes_voxels():
    """A box (slices, y rows, every x) of the volume, as streamed FDK
    back-projects thin slabs, has the volume's voxel centres there."""
    from leveret.algorithms.fdk import _box

    vol = VolumeGeometry((20, 30, 12), voxel_size=(1.0, 2.0, 0.5), center=(3.0, -4.0, 1.5))
    box = _box(vol, 4, 12, 15, 30)
    assert box.shape == (8, 15, 12)
    for axis, part in (("z", slice(4, 12)), ("y", slice(15, 30)), ("x", slice(None))):
        np.testing.assert_allclose(box.coordinates(axis), vol.coordinates(axis)[part], atol=1e-12)
    assert _box(vol, 4, 12, 0, 30) == vol.slab(4, 12)


def test_thin_slabs_become_boxes_of_whole_blocks():
    """Slabs planned thinner than the CUDA kernels' 16-slice blocks become 16
    slices thick (at least one per worker), each in as few boxes along y as
    the memory left beside the chunk reserve holds; slabs of whole blocks, or
    a cap too small even for a box, stay as they are."""
    from leveret.algorithms.fdk import _slabs_in_boxes

    g = scan(np.linspace(0, 2 * np.pi, 10, endpoint=False), n=40)
    vol = VolumeGeometry((64, 30, 30))
    reserve = 12 * 40 * 40 * 4  # one view's chunk reserve (_plan_slabs)
    thin = [(k, min(64, k + 12)) for k in range(0, 64, 12)]
    half_slice = 15 * 30 * 4
    slabs, parts = _slabs_in_boxes(g, vol, thin, 1, 2, reserve + 16 * half_slice)
    assert parts == 2 and slabs == [(0, 16), (16, 32), (32, 48), (48, 64)]
    slabs, parts = _slabs_in_boxes(g, vol, thin, 1, 2, reserve + 16 * 10 * 30 * 4)  # a third of y
    assert parts == 3 and slabs[0] == (0, 16)
    slabs, parts = _slabs_in_boxes(g, vol, thin, 1, 2, reserve + 40 * half_slice)  # two blocks, a slab per worker
    assert parts == 2 and slabs == [(0, 32), (32, 64)]
    assert _slabs_in_boxes(g, vol, thin, 1, 2, reserve + 100) == (thin, 1)
    assert _slabs_in_boxes(g, vol, [(0, 16), (16, 32), (32, 48), (48, 64)], 1, 2, 1 << 30)[1] == 1


def test_bad_input():
    g = scan(np.linspace(0, 2 * np.pi, 10, endpoint=False), n=16)
    vol = VolumeGeometry((4, 8, 8))
    proj = np.zeros(g.projection_shape, np.float32)
    with pytest.raises(ValueError, match="projections: expected shape"):
        leveret.fdk(proj[:, 1:], g, vol, backend="cpu")
    with pytest.raises(ValueError, match="projections: expected finite"):
        leveret.fdk(np.full(g.projection_shape, np.nan, np.float32), g, vol, backend="cpu")
    with pytest.raises(ValueError, match="short_scan"):
        leveret.fdk(proj, g, vol, backend="cpu", short_scan="yes")
    with pytest.raises(TypeError, match="geometry"):
        leveret.fdk(proj, leveret.ParallelGeometry([0.0], 16), vol, backend="cpu")
    with pytest.raises(ValueError, match="precision: expected one of 'float32', 'float64'"):
        leveret.fdk(proj, g, vol, backend="cpu", precision="float16")


@pytest.mark.gpu
def test_fdk_cuda_streamed_non_finite_input_is_an_error():
    """NumPy input streams through the GPU in chunks; NaN and Inf in two
    different chunks are both counted (one fused count per chunk on the GPU)."""
    g = scan(np.linspace(0, 2 * np.pi, 48, endpoint=False), n=16)
    vol = VolumeGeometry((4, 8, 8))
    proj = np.ones(g.projection_shape, np.float32)
    proj[1, 3, 4] = np.nan
    proj[40, 7, 2] = -np.inf
    with pytest.raises(ValueError, match=r"^projections: expected finite values.*, got 2 "):
        leveret.fdk(proj, g, vol, backend="cuda")


@pytest.mark.gpu
def test_fdk_cuda_stops_its_threads_when_the_pipeline_fails(monkeypatch):
    """An error in the middle of the streamed FDK reaches the caller, and the
    threads that fault in and fill the NumPy result stop with it."""
    import threading

    from leveret.algorithms.fdk_weights import FDKWeighting

    g = scan(np.linspace(0, 2 * np.pi, 48, endpoint=False), n=16)
    vol = VolumeGeometry((16, 8, 8))
    original, calls = FDKWeighting.__call__, []

    def failing(self, raw, views):
        calls.append(views)
        if len(calls) == 3:
            raise RuntimeError("injected failure")
        return original(self, raw, views)

    monkeypatch.setattr(FDKWeighting, "__call__", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        leveret.fdk(np.ones(g.projection_shape, np.float32), g, vol, backend="cuda")
    assert len(calls) == 3
    assert not [t.name for t in threading.enumerate() if t.name.startswith("leveret-fdk-")]


@pytest.mark.gpu
def test_fdk_cuda_equals_cpu_texture_mode(rng, rel_mirror):
    import cupy as cp

    g = scan(np.linspace(0, 2 * np.pi, 90, endpoint=False), n=40, pixel=3.0)
    vol = VolumeGeometry((17, 30, 30), voxel_size=2.0)
    proj = phantom.shepp_logan_3d(radius=40.0).project(g).astype(np.float32)
    gpu = leveret.fdk(cp.asarray(proj), g, vol, backend="cuda")
    assert isinstance(gpu, cp.ndarray)
    cpu8 = leveret.fdk(proj, g, vol, backend="cpu", interpolation="linear8")
    assert rel_mirror(gpu.get(), cpu8) < 1e-5
    st: dict = {}
    host = leveret.fdk(proj, g, vol, backend="cuda", stats=st)  # NumPy in: streamed through the pipeline
    assert isinstance(host, np.ndarray)
    np.testing.assert_allclose(host, gpu.get(), rtol=1e-5, atol=1e-6)
    assert st["chunks"] > 1 and st["wall"] > 0 and st["compute"] > 0 and st["h2d"] > 0 and st["d2h"] == 0
    on_device: dict = {}
    leveret.fdk(cp.asarray(proj), g, vol, backend="cuda", stats=on_device)
    assert on_device == {}  # CuPy in: no pipeline, nothing to report
    # A memory cap that forces z-slabs gives the same volume, up to the texture
    # unit's 8-bit weights: a slab's matrices (rows cropped, z restarted) round
    # the coordinates differently, so a few weights land one step apart.
    capped = leveret.fdk(proj, g, vol, backend="cuda", gpu_memory=gpu_memory_for_arrays(120_000))  # 2 slabs
    assert np.linalg.norm(capped - host) / np.linalg.norm(host) < 1e-3
    capped8 = leveret.fdk(proj, g, vol, backend="cpu", interpolation="linear8", slab_slices=12)  # same slabs
    assert rel_mirror(capped, capped8) < 1e-5
    # slabs that no ray reaches are zero beside those downloaded in place (NumPy
    # in, in slabs: two workers share the GPU; CuPy in, one after the other)
    tall = VolumeGeometry((40, 30, 30), voxel_size=2.0, center=(60.0, 0.0, 0.0))
    cut = leveret.fdk(proj, g, tall, backend="cuda", slab_slices=8)
    assert np.all(cut[-8:] == 0) and np.count_nonzero(cut) > 0
    cut_gpu = leveret.fdk(cp.asarray(proj), g, tall, backend="cuda", slab_slices=8).get()
    assert np.all(cut_gpu[-8:] == 0)
    assert np.linalg.norm(cut - cut_gpu) / np.linalg.norm(cut_gpu) < 1e-3  # texture weights, as above
    exact = leveret.fdk(proj, g, vol, backend="cpu")
    soft = leveret.fdk(cp.asarray(proj), g, vol, backend="cuda", interpolation="linear32").get()
    assert np.linalg.norm(soft - exact) / np.linalg.norm(exact) < 1e-5
    with pytest.raises(ValueError, match="gpu_memory: 4096 bytes leave nothing for arrays"):
        leveret.fdk(proj, g, vol, backend="cuda", gpu_memory=4096)
    with pytest.raises(ValueError, match="gpu_memory: .* cannot be reconstructed within"):
        leveret.fdk(proj, g, vol, backend="cuda", gpu_memory=gpu_memory_for_arrays(4096))


@pytest.mark.gpu
def test_streamed_fdk_filters_each_view_once(rng, monkeypatch):
    """NumPy input in z-slabs: the rows the volume sees are weighted and
    filtered once, in view chunks, and each slab uploads its rows of them (in
    fewer chunks than it would filter them); the volume is the one from slabs
    that filter their own rows (CuPy input, or too little host memory for the
    filtered rows), to float32 rounding. Non-finite input is refused."""
    import cupy as cp

    import leveret.resources
    from leveret.cuda import pipeline
    from leveret.algorithms.fdk_weights import FDKWeighting, rows_seen

    g = scan(np.linspace(0, 2 * np.pi, 40, endpoint=False), n=40, pixel=3.0)
    vol = VolumeGeometry((24, 30, 30), voxel_size=2.0)
    proj = phantom.shepp_logan_3d(radius=40.0).project(g).astype(np.float32)
    original, weighted = FDKWeighting.__call__, []

    def counting(self, raw, views, row0=0):
        weighted.append(raw.shape[0] * raw.shape[1])
        return original(self, raw, views, row0)

    monkeypatch.setattr(FDKWeighting, "__call__", counting)
    # a cap that leaves no room for the filtered views on the GPU (else two
    # workers would filter them there): the slabs run one after the other
    kw = dict(backend="cuda", slab_slices=6, chunk_views=8, gpu_memory=gpu_memory_for_arrays(1_000_000))
    strided, copy_rows = [], pipeline._copy_rows_async
    monkeypatch.setattr(
        pipeline,
        "_copy_rows_async",
        lambda ptr, host, kind, stream: strided.append(host.flags.c_contiguous) or copy_rows(ptr, host, kind, stream),
    )
    st: dict = {}
    once = leveret.fdk(proj, g, vol, stats=st, **kw)
    r0, r1 = rows_seen(g, vol)
    assert sum(weighted) == g.n_views * (r1 - r0)
    assert st["chunks"] == 4 * 5 + 5  # 4 slabs of 5 chunks, and the filtering pass's 5
    # the filtered views lie in pinned memory: the pass uploads its raw chunks and
    # downloads them filtered into it (whole views: contiguous), each slab uploads
    # its rows from them (strided: some rows of each view)
    assert strided.count(True) == 2 * 5 and strided.count(False) == 4 * 5
    weighted.clear()
    per_slab = leveret.fdk(cp.asarray(proj), g, vol, **kw).get()
    assert sum(weighted) > 1.4 * g.n_views * (r1 - r0)  # the slabs' rows overlap
    np.testing.assert_allclose(once, per_slab, rtol=0, atol=1e-5 * np.abs(per_slab).max())
    # the plan's chunks, not fixed: the cap's reserve makes the filtering pass
    # take the 40 views one at a time; the four slabs together take fewer chunks
    # (of their rows, several views each); the kernel per chunk follows its
    # views, so the texture weights differ as above
    st.clear()
    planned = leveret.fdk(proj, g, vol, backend="cuda", slab_slices=6, gpu_memory=kw["gpu_memory"], stats=st)
    assert np.linalg.norm(planned - per_slab) / np.linalg.norm(per_slab) < 1e-3
    assert st["chunks"] < 2 * g.n_views
    bad = proj.copy()
    bad[-1, g.n_rows // 2, 3] = np.nan
    with pytest.raises(ValueError, match="projections"):
        leveret.fdk(bad, g, vol, **kw)
    # a host that will not lock them: the filtered views in pageable memory, gathered through the pipeline
    monkeypatch.setattr(pipeline, "pinned_array", lambda shape, dtype: None)
    strided.clear()
    np.testing.assert_array_equal(leveret.fdk(proj, g, vol, **kw), once)
    assert strided and all(strided)  # whole chunks of the pipeline's own buffers: no rows read in place
    monkeypatch.setattr(leveret.resources, "host_available_bytes", lambda: 4 * vol.size)
    weighted.clear()
    np.testing.assert_allclose(leveret.fdk(proj, g, vol, **kw), per_slab, rtol=0, atol=1e-5 * np.abs(per_slab).max())
    assert sum(weighted) > 1.4 * g.n_views * (r1 - r0)


@pytest.mark.gpu
def test_streamed_fdk_backprojects_thin_slabs_in_boxes(monkeypatch):
    """Under a cap that leaves each of two workers sharing the GPU less than
    16 slices, the slabs are 16 slices thick and back-projected in two boxes
    along y, each from the rows it sees: the volume is the one-piece one (up
    to the texture unit's 8-bit weights, as above), from NumPy and CuPy input."""
    import sys

    import cupy as cp

    from leveret.cuda.devices import DeviceSet

    fdk_module = sys.modules["leveret.algorithms.fdk"]  # leveret.algorithms.fdk is also the function
    g = scan(np.linspace(0, 2 * np.pi, 90, endpoint=False), n=40, pixel=3.0)
    vol = VolumeGeometry((64, 30, 30), voxel_size=1.0)
    proj = phantom.shepp_logan_3d(radius=40.0).project(g).astype(np.float32)
    whole = leveret.fdk(cp.asarray(proj), g, vol, backend="cuda").get()
    planned, original = [], fdk_module._slabs_in_boxes
    monkeypatch.setattr(fdk_module, "_slabs_in_boxes", lambda *a: planned.append(original(*a)) or planned[-1])
    # 120 kB of arrays per worker: 12 slices, or 16 slices of half the y range beside a view's reserve
    cap = gpu_memory_for_arrays(240_000)
    st: dict = {}
    boxed = leveret.fdk(proj, g, vol, backend="cuda", gpu_memory=cap, stats=st)
    assert planned == [([(0, 16), (16, 32), (32, 48), (48, 64)], 2)]
    assert np.linalg.norm(boxed - whole) / np.linalg.norm(whole) < 1e-3
    assert st["busy"] > 0  # the workers' path
    boxed_gpu = leveret.fdk(
        cp.asarray(proj),
        g,
        vol,
        backend="cuda",
        gpu_memory=cap,
        devices=DeviceSet([cp.cuda.Device().id] * 2, shared=True),
    )
    assert planned[-1][1] == 2 and isinstance(boxed_gpu, cp.ndarray)
    np.testing.assert_allclose(boxed_gpu.get(), boxed, rtol=0, atol=1e-5 * np.abs(boxed).max())


@pytest.mark.gpu
@pytest.mark.parametrize("arc", [2 * np.pi, np.pi + 0.8])  # full scan; short scan (Parker)
def test_fused_gpu_weighting_equals_the_numpy_path(rng, arc):
    """cuda/fdk_weighting (cosine x column weights fused into the FFT padding)
    against FDKWeighting's NumPy path (float64 cosines, scipy.fft)."""
    import cupy as cp

    from leveret.algorithms.fdk_weights import FDKWeighting

    g = scan(np.linspace(0, arc, 37, endpoint=False), n=29, pixel=2.5)
    weighting = FDKWeighting(g)
    raw = rng.standard_normal(g.projection_shape).astype(np.float32)
    views = slice(5, 30)
    expected = weighting(raw[views].copy(), views)
    got = weighting(cp.asarray(raw[views]), views)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert np.linalg.norm(got.get() - expected) / np.linalg.norm(expected) < 1e-6


def test_kernel_and_chunk_views_are_passed_through(rng):
    """fdk's ``kernel`` reaches the back-projection (the CPU mirrors it with
    interpolation="linear8"/"linear32"), ``chunk_views`` only regroups the
    accumulation."""
    g = scan(np.linspace(0, 2 * np.pi, 30, endpoint=False), n=24, pixel=3.0)
    vol = VolumeGeometry((9, 14, 14), voxel_size=2.5)
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    texture = leveret.fdk(proj, g, vol, backend="cpu", interpolation="linear8", kernel="texture")
    ray = leveret.fdk(proj, g, vol, backend="cpu", interpolation="linear8", kernel="ray")
    np.testing.assert_array_equal(ray, texture)  # the same texture arithmetic per view
    hybrid = leveret.fdk(proj, g, vol, backend="cpu", interpolation="linear8", kernel="ray-hybrid")
    whole = leveret.fdk(proj, g, vol, backend="cpu")

    def rel(a, b):
        return np.linalg.norm(a - b) / np.linalg.norm(b)

    # "ray-hybrid" reads a third of the views with exact weights: between the
    # texture kernel and the exact volume (measured 3.5e-3 to 3.8e-3 from
    # "texture" over 5 seeds; margin 1.3)
    assert 0 < rel(hybrid, texture) < 5e-3
    assert rel(hybrid, whole) < rel(texture, whole)
    chunked = leveret.fdk(proj, g, vol, backend="cpu", chunk_views=7)
    np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-6 * np.abs(whole).max())
    with pytest.raises(ValueError, match="kernel: expected one of"):
        leveret.fdk(proj, g, vol, backend="cpu", kernel="global")  # exact weights need "linear32"
    with pytest.raises(ValueError, match="chunk_views: expected a positive integer"):
        leveret.fdk(proj, g, vol, backend="cpu", chunk_views=0)
