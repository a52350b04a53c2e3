"""Out-of-core helical and laminography reconstruction: each slab's views and rows
(slab_band), a slab from them alone (reconstruct_slab with views= and method=),
the plan, and reconstruct_to_file against the in-memory helical_fdk and
laminography_fbp."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.algorithms.helical import plan_slabs
from leveret.execution import slab
from leveret.execution.outofcore import plan, reconstruct_to_file
from leveret.io import read_array


@pytest.fixture(scope="module")
def helix():
    angles = np.arange(4 * 40) * 2 * np.pi / 40
    g = leveret.ConeGeometry.helical(angles, 12.0, 300.0, 500.0, 16, 40, 2.0)
    vol = leveret.VolumeGeometry((24, 40, 40), 1.2)
    body = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (16, 13, 100))])
    return g, vol, body.project(g).astype(np.float32)


@pytest.fixture(scope="module")
def tilted():
    angles = np.arange(48) * 2 * np.pi / 48
    g = leveret.ConeGeometry.laminography(angles, np.radians(40), 300.0, 500.0, 20, 28, 1.0)
    vol = leveret.VolumeGeometry((12, 24, 24), 0.7)
    body = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (4, 8, 7))])
    return g, vol, body.project(g).astype(np.float32)


def test_a_helical_slab_needs_the_views_plan_slabs_names(helix):
    g, vol, _ = helix
    for planned in plan_slabs(g, vol, 4):
        views, rows = slab.slab_band(g, vol, planned.z)
        assert (views, rows) == (planned.views, planned.rows)
        assert views[1] - views[0] < g.n_views // 2  # about a third of the scan
        assert slab.slab_rows(g, vol, planned.z) == rows
    circular = leveret.ConeGeometry.circular(g.angles[:40], 300.0, 500.0, 16, 40, 2.0)
    assert slab.slab_band(circular, vol.slab(0, 4), (0, 4))[0] == (0, 40)


def test_a_helical_slab_from_its_views_equals_helical_fdk(helix):
    g, vol, proj = helix
    ref = leveret.helical_fdk(proj, g, vol, backend="cpu")
    (n0, n1), (r0, r1) = slab.slab_band(g, vol, (8, 14))
    out = slab.reconstruct_slab(proj[n0:n1, r0:r1], g, vol, (8, 14), rows=(r0, r1), views=(n0, n1), backend="cpu")
    np.testing.assert_allclose(out, ref[8:14], rtol=0, atol=1e-6 * np.abs(ref).max())
    # more views than it needs (a piece of a larger slab) give the same slab
    (m0, m1), (q0, q1) = slab.slab_band(g, vol, (4, 16))
    out = slab.reconstruct_slab(proj[m0:m1, q0:q1], g, vol, (8, 14), rows=(q0, q1), views=(m0, m1), backend="cpu")
    np.testing.assert_allclose(out, ref[8:14], rtol=0, atol=1e-6 * np.abs(ref).max())
    with pytest.raises(ValueError, match=r"rows_data: expected detector rows .* of projections"):
        slab.reconstruct_slab(proj[n0:n1, r0:r1], g, vol, (8, 14), rows=(r0, r1), views=(n0, n1 - 1))
    with pytest.raises(ValueError, match="views: expected 0 <= n0 < n1 <= 160"):
        slab.reconstruct_slab(proj, g, vol, (8, 14), rows=(0, 16), views=(5, 200))


def test_a_circular_slab_refuses_fewer_views(tilted):
    g, vol, proj = tilted
    with pytest.raises(ValueError, match="views: a slab of this scan needs every projection, got 1:48"):
        slab.reconstruct_slab(proj[1:], g, vol, (0, 4), rows=(0, 20), views=(1, 48))
    with pytest.raises(
        ValueError, match="method: expected one of fbp, sirt, cgls, fista, pdhg, laminography, got 'helical'"
    ):
        slab.reconstruct_slab(proj, g, vol, (0, 4), rows=(0, 20), method="helical")


def test_helical_to_file_equals_helical_fdk_and_plans_on_its_views(tmp_path, helix):
    g, vol, proj = helix
    ref = leveret.helical_fdk(proj, g, vol, backend="cpu")
    res = reconstruct_to_file(proj, g, tmp_path / "h.npy", volume=vol, backend="cpu", slab_slices=4)
    assert res.slabs_done == 6
    np.testing.assert_allclose(read_array(tmp_path / "h.npy"), ref, rtol=0, atol=1e-6 * np.abs(ref).max())
    # the plan counts the views a slab reads, not every view
    from leveret.execution.outofcore import _band_for, host_bytes

    views, rows = _band_for(g, vol, 4)
    assert views < g.n_views // 2 and rows <= g.n_rows
    raw = host_bytes(g, vol, 4, input_itemsize=2) - host_bytes(g, vol, 4, input_itemsize=1)
    assert raw == views * rows * g.n_cols
    assert plan(g, vol, backend="cpu", host_memory=1 << 30, max_slices=4).slab_slices == 4


def test_helical_refuses_a_dask_client(tmp_path, helix):
    from leveret.execution import outofcore

    g, vol, proj = helix

    class Executor:  # reached only after the check: any object stands for a cluster
        def capacity(self, backend):
            raise AssertionError("the check comes first")

    with pytest.raises(ValueError, match="client: a helical scan runs in this process's pipeline"):
        outofcore._reconstruct_to_file(
            proj,
            g,
            tmp_path / "x.npy",
            volume=vol,
            flats=None,
            darks=None,
            log_transform=False,
            stripes=None,
            stripe_size=5,
            stripe_options=None,
            phase=None,
            half_acquisition=None,
            backend="cpu",
            host_memory=None,
            gpu_memory=None,
            slab_slices=None,
            resume=False,
            overwrite=False,
            dataset=None,
            compression="default",
            metadata=None,
            params=None,
            progress=False,
            on_plan=None,
            executor=Executor(),
            output_dtype="float32",
            output_range=None,
            io_threads=None,
            sync=True,
        )


def test_cone_laminography_to_file_equals_laminography_fbp(tmp_path, tilted):
    g, vol, proj = tilted
    ref = leveret.laminography_fbp(proj, g, vol, backend="cpu")
    res = reconstruct_to_file(
        proj, g, tmp_path / "c.npy", volume=vol, backend="cpu", slab_slices=3, method="laminography"
    )
    assert res.slabs_done == 4
    np.testing.assert_allclose(read_array(tmp_path / "c.npy"), ref, rtol=0, atol=1e-6 * np.abs(ref).max())


def test_parallel_laminography_to_file_equals_laminography_fbp(tmp_path):
    angles = np.arange(48) * 2 * np.pi / 48
    g = leveret.ParallelVecGeometry.laminography(angles, np.radians(25), 40, 26, 1.0)
    vol = leveret.VolumeGeometry((10, 16, 16), 1.0, (1.0, 0.0, 0.0))
    proj = phantom.EllipsoidPhantom([phantom.Ellipsoid(1.0, (4, 8, 7))]).project(g).astype(np.float32)
    ref = leveret.laminography_fbp(proj, g, vol, backend="cpu")
    rows = [slab.slab_rows(g, vol, (k, k + 2)) for k in range(0, 10, 2)]
    assert all(r[1] - r[0] < g.n_rows for r in rows)  # a slab reads a band of rows only
    res = reconstruct_to_file(proj, g, tmp_path / "p.npy", volume=vol, backend="cpu", slab_slices=2)
    assert res.slabs_done == 5
    np.testing.assert_allclose(read_array(tmp_path / "p.npy"), ref, rtol=0, atol=1e-6 * np.abs(ref).max())
