"""Out-of-core reconstruction: slab by slab into a file equals the in-memory
result; the planner's host estimate bounds the measured peak; a CUDA
out-of-memory error retries with smaller slabs."""

from __future__ import annotations

import importlib.util
import tracemalloc

import numpy as np
import pytest

import leveret
from leveret.execution import slab
from leveret import phantom
from leveret.io import read_array, read_metadata
from leveret.execution.memory import plan_slabs
from leveret.execution.outofcore import plan, reconstruct_to_file
from leveret.execution.slab import reconstruct_slab, slab_rows

from cases import CupyOutOfMemoryError


@pytest.fixture(scope="module")
def parallel_scan():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 120, endpoint=False), 96, n_rows=40)
    proj = phantom.shepp_logan_3d(radius=40.0).project(g).astype(np.float32)
    return g, proj, leveret.fbp(proj, g, backend="cpu")


def test_host_cap_well_below_the_volume_gives_the_in_memory_result(tmp_path, parallel_scan):
    g, proj, ref = parallel_scan
    np.save(tmp_path / "p.npy", proj)
    vol = g.default_volume()
    cap = int(0.6 * vol.size * 4)  # well below the volume's 1.4 MiB
    reconstruct_to_file(tmp_path / "p.npy", g, tmp_path / "warm.h5", backend="cpu", host_memory=cap)
    tracemalloc.start()  # measured on a warm run (imports traced otherwise)
    try:
        res = reconstruct_to_file(tmp_path / "p.npy", g, tmp_path / "r.h5", backend="cpu", host_memory=cap)
    finally:
        tracemalloc.stop()
    assert res.plan.slab_slices < vol.nz and res.slabs_done == res.plan.n_slabs
    assert res.plan.host_bytes <= cap
    # the estimate bounds what the run allocated, and is not wildly pessimistic
    assert 0.3 * res.plan.host_bytes <= res.peak_traced <= res.plan.host_bytes <= cap, res.summary()
    assert res.peak_rss > 0 and "planned host peak" in res.summary()
    out = read_array(tmp_path / "r.h5")
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6)
    # absolute values: the phantom's brain matter (1.02 in shepp_logan_3d's outer shell is 1.0)
    meta = read_metadata(tmp_path / "r.h5")
    assert meta["voxel_size"] == list(vol.voxel_size) and meta["axes"] == "zyx"


@pytest.mark.parametrize("slab", [1, 7, 40])
def test_misaligned_volume_into_zarr_and_tiff(tmp_path, parallel_scan, slab):
    g, proj, _ = parallel_scan
    v = leveret.VolumeGeometry((30, 64, 64), (1.3, 1.5, 1.5), (2.0, 1.0, -3.0))  # rows interpolated
    ref = leveret.fbp(proj, g, v, backend="cpu")
    for name in ("r.zarr", "r/") if importlib.util.find_spec("zarr") else ("r/",):
        reconstruct_to_file(proj, g, tmp_path / f"{slab}{name}", volume=v, backend="cpu", slab_slices=slab)
        np.testing.assert_allclose(read_array(tmp_path / f"{slab}{name}"), ref, rtol=0, atol=2e-6)


def test_cone_slabs_equal_fdk(tmp_path):
    g = leveret.ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 90, endpoint=False), sid=200, sdd=400, n_rows=48, n_cols=64, pixel_size=1.0
    )
    v = leveret.VolumeGeometry((24, 48, 48), 0.5)
    proj = phantom.shepp_logan_3d(radius=10.0).project(g).astype(np.float32)
    ref = leveret.fdk(proj, g, v, backend="cpu")
    res = reconstruct_to_file(proj, g, tmp_path / "c.npy", volume=v, backend="cpu", slab_slices=5)
    assert res.slabs_done == 5
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), ref, rtol=0, atol=1e-6)
    r0, r1 = slab_rows(g, v, (0, 5))
    assert 0 < r1 - r0 < g.n_rows


def test_raw_counts_with_flats_darks_and_resume(tmp_path, parallel_scan, rng):
    from leveret.preprocess import minus_log, normalize

    g, proj, _ = parallel_scan
    dark = rng.uniform(90, 110, size=(2,) + proj.shape[1:]).astype(np.float32)
    flat = dark + rng.uniform(9000, 11000, size=(3,) + proj.shape[1:]).astype(np.float32).mean(0)
    raw = np.round(dark.mean(0) + (flat.mean(0) - dark.mean(0)) * np.exp(-0.05 * proj)).astype(np.uint16)
    ref = leveret.fbp(minus_log(normalize(raw, flat, dark)), g, backend="cpu")
    out = tmp_path / "r.h5"

    calls = []
    real = slab.reconstruct_slab

    def interrupted(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args[3])
        return real(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(slab, "reconstruct_slab", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reconstruct_to_file(raw, g, out, flats=flat, darks=dark, backend="cpu", slab_slices=8, resume=True)
    mp.undo()
    assert not out.exists() and (tmp_path / ".r.h5.partial").is_dir()
    with pytest.raises(ValueError, match="different parameters"):  # another filter: another job
        reconstruct_to_file(
            raw, g, out, flats=flat, darks=dark, backend="cpu", slab_slices=8, resume=True, filter="hann"
        )
    res = reconstruct_to_file(raw, g, out, flats=flat, darks=dark, backend="cpu", slab_slices=8, resume=True)
    assert res.slices_resumed == 16 and res.slabs_done == 3
    np.testing.assert_allclose(read_array(out), ref, rtol=0, atol=1e-5)
    assert [p.name for p in tmp_path.iterdir()] == ["r.h5"]


def test_the_slices_sampled_for_the_range_are_written_not_reconstructed_again(tmp_path, parallel_scan, rng):
    """An integer output's automatic range comes from the first slices of a middle
    slab; the run writes those slices as sampled (with what they were made from,
    for a resume) and reconstructs each other slice once."""
    g, proj, _ = parallel_scan
    dark = rng.uniform(90, 110, size=(2,) + proj.shape[1:]).astype(np.float32)
    flat = dark.mean(0) + rng.uniform(9000, 11000, size=(3,) + proj.shape[1:]).astype(np.float32)
    raw = np.round(dark.mean(0) + (flat.mean(0) - dark.mean(0)) * np.exp(-0.05 * proj)).astype(np.uint16)
    args = dict(flats=flat, darks=dark, backend="cpu", slab_slices=8, output_dtype="uint16")
    regions = []
    real = slab.reconstruct_slab

    class Stop(Exception):
        pass

    def counted(*a, **kw):
        if len(regions) == 3:  # the sample and two slabs: stop
            raise Stop
        regions.append(tuple(a[3]))
        return real(*a, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(slab, "reconstruct_slab", counted)
    with pytest.raises(Stop):
        reconstruct_to_file(raw, g, tmp_path / "a.h5", resume=True, **args)
    assert regions == [(16, 24), (0, 8), (8, 16)]  # the sample is the start of a slab of the plan
    changed = raw.copy()
    changed[7, 20, 50] += 1  # a row of the sampled slices
    with pytest.raises(ValueError, match="slices 16:24 were made"):
        reconstruct_to_file(changed, g, tmp_path / "a.h5", resume=True, **args)
    regions.clear()
    res = reconstruct_to_file(raw, g, tmp_path / "a.h5", resume=True, **args)
    mp.undo()
    assert regions == [(24, 32), (32, 40)] and res.slices_resumed == 24
    whole = reconstruct_to_file(raw, g, tmp_path / "b.h5", **args)
    given = reconstruct_to_file(raw, g, tmp_path / "c.h5", **{**args, "output_range": whole.value_range})
    assert res.value_range == whole.value_range == given.value_range
    np.testing.assert_array_equal(read_array(tmp_path / "a.h5"), read_array(tmp_path / "c.h5"))
    np.testing.assert_array_equal(read_array(tmp_path / "b.h5"), read_array(tmp_path / "c.h5"))


def test_gpu_out_of_memory_retries_with_smaller_slabs(tmp_path, parallel_scan, monkeypatch):
    g, proj, ref = parallel_scan
    real = slab.reconstruct_slab
    seen = []

    def fake(rows_data, geometry, volume, region, **kw):
        seen.append(tuple(region))
        if len(seen) == 1:
            raise CupyOutOfMemoryError("out of memory allocating 1 GiB")
        return real(rows_data, geometry, volume, region, **kw)

    monkeypatch.setattr(slab, "reconstruct_slab", fake)
    res = reconstruct_to_file(proj, g, tmp_path / "r.npy", backend="cpu", slab_slices=16)
    assert seen[:3] == [(0, 16), (0, 8), (8, 16)] and res.retries == 1 and res.slab_slices == 8
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)
    assert "1 GPU out-of-memory retry" in res.summary()

    def always(rows_data, geometry, volume, region, **kw):
        raise CupyOutOfMemoryError("out of memory")

    monkeypatch.setattr(slab, "reconstruct_slab", always)
    with pytest.raises(MemoryError, match="even for one slice"):
        reconstruct_to_file(proj, g, tmp_path / "s.npy", backend="cpu", slab_slices=2)
    assert not list(tmp_path.glob("*s.npy*"))
    assert not slab.is_gpu_out_of_memory(MemoryError())


def test_planner_picks_the_largest_fit_and_prints_it():
    p = plan_slabs(
        100,
        lambda s: 1000 + 100 * s,
        lambda s: 50 * s,
        host_limit=5000,
        gpu_limit=1000,
        volume_bytes=10**6,
        backend="cuda",
    )
    assert p.slab_slices == 20 and p.n_slabs == 5  # GPU-bound: 50 x 20 = 1000
    text = p.describe()
    assert "5 slab(s) of 20 slice(s)" in text and "<- chosen" in text
    with pytest.raises(MemoryError, match="one slice does not fit"):
        plan_slabs(10, lambda s: 10**9, None, host_limit=10, gpu_limit=None, volume_bytes=1, backend="cpu")
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 50, endpoint=False), 64, n_rows=32)
    small, big = (plan(g, backend="cpu", host_memory=m) for m in (2 << 20, 64 << 20))
    assert small.slab_slices < big.slab_slices == 32
    with pytest.raises(ValueError, match="host_memory"):
        plan(g, backend="cpu", host_memory=0)


def test_reconstruct_slab_is_a_plain_function_for_a_scheduler(parallel_scan):
    dask = pytest.importorskip("dask")
    g, proj, ref = parallel_scan
    vol = g.default_volume()
    tasks = []
    for k0 in range(0, vol.nz, 10):
        region = (k0, min(vol.nz, k0 + 10))
        r0, r1 = slab_rows(g, vol, region)
        tasks.append(dask.delayed(reconstruct_slab)(proj[:, r0:r1], g, vol, region, rows=(r0, r1), backend="cpu"))
    slabs = dask.compute(*tasks, scheduler="threads")
    np.testing.assert_allclose(np.concatenate(slabs), ref, rtol=0, atol=1e-6)


def test_bad_arguments(tmp_path, parallel_scan):
    g, proj, _ = parallel_scan
    vol = g.default_volume()
    with pytest.raises(ValueError, match="projections: expected shape"):
        reconstruct_to_file(proj[:, :10], g, tmp_path / "r.npy", backend="cpu")
    with pytest.raises(ValueError, match="region"):
        reconstruct_slab(proj, g, vol, (5, 3), rows=(0, 40))
    with pytest.raises(ValueError, match="rows_data: expected detector rows 0:4"):
        reconstruct_slab(proj[:, :3], g, vol, (0, 2), rows=(0, 4), backend="cpu")
    with pytest.raises(ValueError, match="flats"):
        reconstruct_to_file(proj, g, tmp_path / "r.npy", flats=proj[0], backend="cpu")
    with pytest.raises(ValueError, match="geometry"):
        plan(leveret.ParallelGeometry(np.zeros(3) + [0, 1, 2], 8), backend="cpu")
    assert list(tmp_path.iterdir()) == []


def test_stripe_removal_slab_by_slab_equals_the_whole_scan(tmp_path, parallel_scan, rng):
    from leveret.preprocess import remove_stripes

    g, proj, _ = parallel_scan
    striped = proj + rng.uniform(-0.2, 0.2, size=(1,) + proj.shape[1:]).astype(np.float32)  # column offsets
    ref = leveret.fbp(remove_stripes(striped, method="sort", size=7), g, backend="cpu")
    res = reconstruct_to_file(
        striped, g, tmp_path / "r.npy", backend="cpu", slab_slices=6, stripes="sort", stripe_size=7
    )
    assert res.plan.n_slabs == 7
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), ref, rtol=0, atol=1e-6)
    plain = leveret.fbp(striped, g, backend="cpu")
    x = g.default_volume().coordinates("x")
    ring = np.abs(plain - ref)[:, np.hypot(x[None], x[:, None]) < 30].mean()
    assert ring > 1e-3  # the stripes were there and were removed


def test_the_output_is_never_the_input(tmp_path):
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 16, n_rows=4)
    proj = np.ones(g.projection_shape, np.float32)
    np.save(tmp_path / "p.npy", proj)
    with pytest.raises(
        ValueError,
        match=r"^output: .*p\.npy' is the same file as projections .*; "
        r"leveret never writes over its input",
    ):
        reconstruct_to_file(str(tmp_path / "p.npy"), g, tmp_path / "p.npy", overwrite=True, backend="cpu")
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), proj)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


def test_resume_refuses_an_input_changed_where_a_finished_slab_read_it(tmp_path, parallel_scan):
    g, proj, ref = parallel_scan
    proj = proj.copy()
    out = tmp_path / "r.h5"
    real = slab.reconstruct_slab
    with pytest.MonkeyPatch.context() as mp:

        def interrupted(*args, **kwargs):
            if args[3][0] >= 16:  # slabs 0:8 and 8:16 are done
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        mp.setattr(slab, "reconstruct_slab", interrupted)
        with pytest.raises(KeyboardInterrupt):
            reconstruct_to_file(proj, g, out, backend="cpu", slab_slices=8, resume=True)
    proj[5, 12, 40] += 1.0  # a row slab 8:16 read, none of the sampled ones
    with pytest.raises(
        ValueError,
        match=r"^resume: the input changed since the partial output .* \(detector "
        r"rows 8:17, from which slices 8:16 were made, differ\); run without",
    ):
        reconstruct_to_file(proj, g, out, backend="cpu", slab_slices=8, resume=True)
    assert (tmp_path / ".r.h5.partial").is_dir() and not out.exists()
    proj[5, 12, 40] -= 1.0  # restored: the run continues and equals the uninterrupted one
    res = reconstruct_to_file(proj, g, out, backend="cpu", slab_slices=8, resume=True)
    assert res.slices_resumed == 16
    np.testing.assert_allclose(read_array(out), ref, rtol=0, atol=1e-5)


def test_log_transform_leaves_the_callers_array_as_it_was(tmp_path, parallel_scan):
    """-log is taken in place on the slab's float32 rows: on a copy, never on the caller's array."""
    g, proj, ref = parallel_scan
    transmission = np.exp(-0.01 * proj)  # well above the clipping of -log
    kept = transmission.copy()
    reconstruct_to_file(transmission, g, tmp_path / "r.npy", backend="cpu", log_transform=True, slab_slices=8)
    np.testing.assert_array_equal(transmission, kept)
    assert np.abs(np.load(tmp_path / "r.npy") - 0.01 * ref).max() < 1e-4 * 0.01 * np.abs(ref).max()
