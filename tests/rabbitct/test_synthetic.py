"""The synthetic RabbitCT dataset: perturbed geometry, FDK-exact images, references, the file."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

import leveret
from leveret.geometry import ConeGeometry
from leveret.rabbitct import (
    HU_SCALE,
    MU_WATER,
    RabbitCTData,
    data_geometry,
    default_pixel_size,
    head_phantom,
    hu_from_mu,
    make_dataset,
    make_geometry,
    read_rabbitct,
    reference_volume,
    scored_reference,
    volume_geometry,
    write_rabbitct,
)
from leveret.operators import ConeBackprojection

# Tiny: 24 views of 40 x 48 pixels; the arc and the detector field stay RabbitCT's.
SCAN = dict(n_views=24, n_rows=40, n_cols=48)
SIZES = (16, 32)


@pytest.fixture(scope="module")
def built():
    cache = {}
    data = make_dataset(**SCAN, reference_sizes=SIZES, cache=cache)
    return data, cache


def test_default_detector_is_rabbitcts_and_keeps_its_field():
    assert default_pixel_size(960, 1248) == pytest.approx(0.308)
    p = default_pixel_size(SCAN["n_rows"], SCAN["n_cols"])
    assert SCAN["n_cols"] * p >= 1248 * 0.308 - 1e-9 and SCAN["n_rows"] * p >= 960 * 0.308 - 1e-9


def test_geometry_is_perturbed_but_only_a_little():
    g = make_geometry()  # the real size: matrices only, cheap
    circle = make_geometry(perturbation_scale=0.0)
    assert g.matrices.shape == (496, 3, 4)
    np.testing.assert_allclose(g.matrices[:, 2, 3], 1.0)  # w = 1 at the origin: 1/w^2 is FDK's weight
    np.testing.assert_allclose(np.degrees(g.angles[1] - g.angles[0]), 0.4)
    shift = np.linalg.norm(g.source_positions() - circle.source_positions(), axis=1)
    assert 0.25 < shift.mean() < 1.0 and shift.max() < 2.5  # mm: not a circle, but close (0.48, 1.19)
    # Where points of the head land on the detector: off by a few pixels at most, not all zero.
    pts = np.array([[0.0, 0.0, 0.0], [60.0, -80.0, 70.0], [-69.0, 0.0, -40.0]])
    (u, vv, _), (u0, v0, _) = g.project(pts), circle.project(pts)
    d = np.hypot(u - u0, vv - v0)
    assert 0.8 < np.median(d) < 3.0 and d.max() < 8.0  # pixels of 0.308 mm (1.56, 5.2)
    # Seeded: the same by default, different for another seed.
    np.testing.assert_array_equal(make_geometry().matrices, g.matrices)
    assert not np.array_equal(make_geometry(rng=1).matrices, g.matrices)


def test_shipped_images_back_project_to_fdk(built):
    data, _ = built
    g = make_geometry(**SCAN)
    np.testing.assert_array_equal(data.matrices, g.matrices)  # stored as used
    raw = head_phantom().project(g)
    vol = volume_geometry(SIZES[0])
    rabbit = ConeBackprojection(data_geometry(data), vol, backend="cpu")(data.projections)
    # The stored images are float32: measured max differences 4.0e-8 (double) and 4.2e-7
    # (single) of the largest voxel; bounds 5x.
    for precision, tol in (("float64", 2e-7), ("float32", 2e-6)):
        fdk = leveret.fdk(
            raw.astype(np.float32) if precision == "float32" else raw, g, vol, backend="cpu", precision=precision
        )
        assert np.abs(rabbit - fdk).max() <= tol * np.abs(fdk).max(), precision


@pytest.mark.parametrize("size", SIZES)
def test_head_reconstructs_to_its_values(built, size):
    _, cache = built
    rec = cache[size]
    vol = volume_geometry(size)
    c = slice(size // 2 - 1, size // 2 + 1)  # the 8 central voxels
    z, y, x = (vol.coordinates(a)[c] for a in "zyx")
    truth = head_phantom().evaluate(x[None, None, :], y[None, :, None], z[:, None, None])
    assert 1.0 * MU_WATER <= truth.min() and truth.max() <= 1.04 * MU_WATER  # brain, 0..40 HU
    # Measured 0.27 % (16^3) and 0.54 % (32^3) above the truth, i.e. 2.8 and 5.5 HU: bound 12 HU.
    assert HU_SCALE * abs(rec[c, c, c].mean() - truth.mean()) < 12
    # Outside the head, where every view sees the voxel, is air on average: 24 views draw
    # streaks (single voxels up to 560 HU) but their mean is -2.5 / 0.8 HU measured; bound 10 HU.
    z, y, x = (vol.coordinates(a) for a in "zyx")
    head = head_phantom().evaluate(x[None, None, :], y[None, :, None], z[:, None, None]) > 0
    near_head = ndimage.binary_dilation(head, iterations=2)
    u, v, _ = make_geometry(**SCAN).project(
        np.stack(np.meshgrid(x, y, z, indexing="ij"), -1).transpose(2, 1, 0, 3).reshape(-1, 3)
    )
    seen = ((u >= 0) & (u <= SCAN["n_cols"] - 1) & (v >= 0) & (v <= SCAN["n_rows"] - 1)).all(axis=0)
    air = ~near_head & seen.reshape(rec.shape)
    assert air.sum() > 0.1 * rec.size and abs(HU_SCALE * rec[air].mean()) < 10
    # The cube's corners lie beyond the field of view: no ray, exactly zero.
    assert rec[0, 0, 0] == 0 and rec[-1, -1, -1] == 0


def test_references_are_the_scored_float64_volumes(built):
    data, cache = built
    assert data.reference_sizes == SIZES
    for L in SIZES:
        ref = data.references[L]
        assert ref.dtype == np.uint16 and ref.shape == (L, L, L)
        np.testing.assert_array_equal(ref, hu_from_mu(cache[L], data.hu_scale, data.hu_offset))
        np.testing.assert_array_equal(ref, scored_reference(cache[L], data.hu_scale, data.hu_offset))
        assert cache[L].dtype == np.float64 and not cache[L].flags.writeable
        again = reference_volume(data, L)  # recomputed from the data alone
        np.testing.assert_array_equal(again, cache[L])
        assert reference_volume(data, L, cache=cache) is cache[L]  # the cache answers first


def test_round_trip_through_the_file(tmp_path, built):
    data, cache = built
    back = read_rabbitct(write_rabbitct(tmp_path / "synthetic.rct", data))
    np.testing.assert_array_equal(back.matrices, data.matrices)
    np.testing.assert_array_equal(back.projections, data.projections)
    assert (back.hu_scale, back.hu_offset) == (data.hu_scale, data.hu_offset)
    assert back.reference_sizes == SIZES
    for L in SIZES:
        np.testing.assert_array_equal(back.references[L], data.references[L])
    # The file's data reproduce the references (memory-mapped images, matrices as stored).
    np.testing.assert_array_equal(reference_volume(back, SIZES[0]), cache[SIZES[0]])


def test_truncated_projections_are_reported():
    with pytest.warns(RuntimeWarning, match="truncated"):
        make_dataset(n_views=4, n_rows=8, n_cols=10, phantom=head_phantom(radius=200.0))


def test_bad_arguments_name_themselves(built):
    data, _ = built
    with pytest.raises(ValueError, match="reference_sizes"):
        make_dataset(**SCAN, reference_sizes=(16, 48))
    with pytest.raises(ValueError, match="hu_scale"):
        make_dataset(**SCAN, hu_scale=-1.0)
    with pytest.raises(ValueError, match="hu_offset"):
        make_dataset(**SCAN, hu_offset=-10.0)
    with pytest.raises(TypeError, match="phantom"):
        make_dataset(**SCAN, phantom="head")
    with pytest.raises(ValueError, match="sid"):
        make_geometry(sid=150.0)
    with pytest.raises(ValueError, match="perturbation_scale"):
        make_geometry(perturbation_scale=-1.0)
    with pytest.raises(ValueError, match="backend"):
        reference_volume(data, 16, backend="cuda")
    with pytest.raises(TypeError, match="data"):
        reference_volume(data.projections, 16)
    with pytest.raises(ValueError, match="size"):
        reference_volume(data, 0)
    with pytest.raises(ValueError, match="hu_offset"):
        scored_reference(np.array([1e-9]), 1.0, -3.0)


def test_perfect_circle_and_plain_data_work_too():
    data = make_dataset(n_views=8, n_rows=8, n_cols=10, perturbation_scale=0.0)
    assert isinstance(data, RabbitCTData) and data.references == {}
    circle = ConeGeometry.circular(
        np.radians(np.arange(8) * 198.4 / 8), 750.0, 1200.0, 8, 10, default_pixel_size(8, 10)
    )
    np.testing.assert_allclose(data.matrices, circle.matrices, rtol=1e-12, atol=1e-12)
