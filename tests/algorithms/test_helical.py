"""Helical FDK (leveret.helical_fdk, and leveret.fdk on a helix): the window
against the Tam-Danielsson formula, its partition of unity, the pitch and
coverage checks, accuracy on analytic phantoms against circular FDK at the
same cone angle and sampling, no pitch-periodic ripple, either handedness."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.algorithms.helical import (
    HelicalWindow,
    covered_z,
    fdk_slab,
    helical_fdk,
    plan_slabs,
    views_seen,
    window_weight,
)
from leveret.geometry import ConeGeometry, VolumeGeometry
from leveret.geometry.helix import fit_helix

SID, SDD, ROWS, COLS, PIX = 300.0, 500.0, 24, 96, 2.0
ISO = PIX * SID / SDD  # detector pitch at the isocentre
HEIGHT = ROWS * ISO  # detector height at the isocentre
PER_TURN = 180
E = phantom.Ellipsoid


def helix(pitch, volume=None, *, per_turn=PER_TURN, direction=1.0, rows=ROWS, cols=COLS, **kwargs):
    """A helix long enough for ``volume`` (its z extent and a window's reach on each side)."""
    length = 0.0 if volume is None else np.ptp(volume.extent("z"))
    n = int(((length + 1.7 * max(abs(pitch), HEIGHT)) / abs(pitch) + 0.5) * per_turn)
    t = direction * np.arange(n) * 2 * np.pi / per_turn
    return ConeGeometry.helical(t, pitch, SID, SDD, rows, cols, PIX, **kwargs)


def window(g, **kwargs) -> HelicalWindow:
    return HelicalWindow(g, fit_helix(g), **kwargs)


def long_phantom():
    """Ellipsoids inside a body much longer than the scanned slab."""
    return phantom.EllipsoidPhantom(
        [
            E(1.0, (28, 26, 60)),
            E(0.5, (8, 10, 6), (8, -5, 4)),
            E(-0.4, (5, 5, 9), (-10, 6, -9)),
            E(0.3, (6, 4, 4), (-4, -12, 14), (0.4, 0.2, 0)),
            E(0.6, 3, (12, 10, -15)),
        ]
    )


def rmse_inside(rec, truth, volume, radii=(24, 22)):
    inside = phantom.EllipsoidPhantom([E(1.0, radii + (1e3,))]).rasterize(volume) > 0
    return float(np.sqrt(np.mean((rec - truth)[inside] ** 2))), float((rec - truth)[inside].mean())


# -- the window ------------------------------------------------------------------------------
@pytest.mark.parametrize("n_pi,smoothing", [(1, 0.0), (1, 0.3), (1, 1.0), (3, 0.5), (5, 2.0), (3, 3.0)])
def test_window_is_a_partition_of_unity(n_pi, smoothing):
    zeta = np.linspace(-0.5, 0.5, 1001)
    total = sum(window_weight(zeta - m, n_pi, smoothing) for m in range(-8, 9))
    np.testing.assert_allclose(total, 1.0, atol=1e-12)
    assert window_weight(np.array([0.0]), n_pi, smoothing)[0] == pytest.approx(1 / n_pi)
    assert window_weight(np.array([(n_pi + smoothing) / 2 + 1e-9]), n_pi, smoothing)[0] == 0.0


@pytest.mark.parametrize("pitch", [30.0, -30.0])
@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_zeta_is_half_on_the_tam_danielsson_boundaries(pitch, direction):
    """Turbell (2001), flat detector at distance D: the window's upper and lower
    boundaries are v = +-(h D / (2 pi R)) (1 + (u/D)^2) (pi/2 -+ atan(u/D)) for a
    right-handed helix (u along e(t), where leveret's fan angle is -atan(u/D));
    the other handedness mirrors u."""
    g = helix(pitch, direction=direction)
    w = window(g)
    u = (np.arange(COLS) - (COLS - 1) / 2) * PIX
    s = np.sign(pitch)
    top = abs(pitch) * SDD / (2 * np.pi * SID) * (1 + (u / SDD) ** 2) * (np.pi / 2 - s * np.arctan(u / SDD))
    bottom = -abs(pitch) * SDD / (2 * np.pi * SID) * (1 + (u / SDD) ** 2) * (np.pi / 2 + s * np.arctan(u / SDD))
    for boundary, value in ((top, 0.5), (bottom, -0.5)):
        rows = boundary / PIX + (ROWS - 1) / 2
        for n in (0, 7, g.n_views - 1):
            zeta = np.array([w.zeta([n], [rows[c]], [c])[0, 0, 0] for c in range(0, COLS, 5)])
            np.testing.assert_allclose(zeta, value * s, atol=1e-9)


def test_largest_pitch_is_where_the_window_meets_the_detector_edge():
    """h_max = min over columns of v_half 2 pi R / (D (1 + (u/D)^2) (pi/2 + |atan(u/D)|)),
    v_half the outermost row centre: the boundary formulas above solved for h
    (the same for both handedness: top and bottom swap). With the detector
    shifted along u the columns' u shift with it."""
    v_half = (ROWS - 1) / 2 * PIX

    def expected(shift):
        u = (np.arange(COLS) - (COLS - 1) / 2) * PIX + shift
        return np.min(
            v_half * 2 * np.pi * SID / (SDD * (1 + (u / SDD) ** 2) * (np.pi / 2 + np.abs(np.arctan(u / SDD))))
        )

    for pitch in (20.0, -35.0):
        assert window(helix(pitch)).max_pitch == pytest.approx(expected(0.0), rel=1e-9)
        for shift in (15.0, -15.0):
            assert window(helix(pitch, det_offset=(shift, 0.0))).max_pitch == pytest.approx(expected(shift), rel=1e-9)
    assert expected(15.0) < expected(0.0)


def test_pitch_that_leaves_gaps_names_geometry_and_the_largest_pitch():
    h_max = window(helix(20.0)).max_pitch
    vol = VolumeGeometry((4, 8, 8), 4.0)
    g = helix(1.03 * h_max, vol)
    proj = np.zeros(g.projection_shape, np.float32)
    with pytest.raises(
        ValueError,
        match=rf"^geometry: the helix's pitch {1.03 * h_max:.6g} per turn leaves gaps"
        rf".*largest pitch without gaps is {h_max:.6g}",
    ):
        leveret.fdk(proj, g, vol, backend="cpu")
    ok = helix(0.98 * h_max, vol)
    leveret.fdk(np.zeros(ok.projection_shape, np.float32), ok, vol, backend="cpu")


def test_volume_outside_the_helix_names_volume():
    g = helix(25.0, VolumeGeometry((10, 8, 8), 2.0))
    lo, hi = covered_z(g, VolumeGeometry((1, 8, 8), 2.0))
    proj = np.zeros(g.projection_shape, np.float32)
    inside = VolumeGeometry((4, 8, 8), 2.0, center=(hi - 4.0, 0.0, 0.0))
    leveret.fdk(proj, g, inside, backend="cpu")
    beyond = VolumeGeometry((4, 8, 8), 2.0, center=(hi - 2.0, 0.0, 0.0))
    with pytest.raises(ValueError, match=r"^volume: its z range .* is not covered by the helix.*must lie within z"):
        leveret.fdk(proj, g, beyond, backend="cpu")
    wide = VolumeGeometry((2, 8, 300), 2.0)
    with pytest.raises(ValueError, match=r"^volume: its corners lie .* outside the helix's radius"):
        leveret.fdk(proj, g, wide, backend="cpu")
    # a wider volume is covered over a shorter range (its voxels reach further from the source's height)
    assert covered_z(g, VolumeGeometry((1, 80, 80), 2.0))[1] < hi


def test_views_seen_hold_every_view_whose_window_sees_the_slab(rng):
    vol = VolumeGeometry((30, 24, 24), 2.0)
    g = helix(30.0, vol, per_turn=60)
    w = window(g)
    slab = vol.slab(10, 16)
    n0, n1 = views_seen(w, slab)
    pts = np.stack([rng.uniform(*slab.extent(a), 400) for a in "xyz"], axis=1)
    u, v, _ = g.project(pts)
    needed = []
    for n in range(g.n_views):
        on = (u[n] > -1) & (u[n] < COLS) & (v[n] > -1) & (v[n] < ROWS)
        zeta = np.array([w.zeta([n], [vi], [ui])[0, 0, 0] for ui, vi in zip(u[n][on], v[n][on])])
        if np.any(window_weight(zeta, w.n_pi, w.smoothing) > 0):
            needed.append(n)
    assert n0 <= min(needed) and max(needed) < n1
    assert n1 - n0 < 1.4 * (max(needed) - min(needed) + 1)  # and not many more


# -- accuracy --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def circular_reference():
    """Circular FDK's error inside the body, at the same cone angle and sampling, over
    the voxels every view sees (the slab a circular scan reconstructs)."""
    ph = long_phantom()
    g = ConeGeometry.circular(np.arange(PER_TURN) * 2 * np.pi / PER_TURN, SID, SDD, ROWS, COLS, PIX)
    vol = VolumeGeometry((ROWS, 56, 56), ISO)
    rec = leveret.fdk(ph.project(g).astype(np.float32), g, vol, backend="cpu")
    truth = ph.rasterize(vol, supersampling=2)
    X, Y = np.meshgrid(vol.coordinates("x"), vol.coordinates("y"))
    z = np.abs(vol.coordinates("z"))[:, None, None]
    seen = z * SID / (SID - np.hypot(X, Y))[None] <= HEIGHT / 2 - ISO
    inside = (phantom.EllipsoidPhantom([E(1.0, (24, 22, 1e3))]).rasterize(vol) > 0) & seen
    return float(np.sqrt(np.mean((rec - truth)[inside] ** 2)))


@pytest.mark.parametrize("pitch_factor", [0.5, 1.0, 1.4])
def test_error_inside_the_object_is_within_that_of_circular_fdk(circular_reference, pitch_factor):
    ph = long_phantom()
    vol = VolumeGeometry((40, 56, 56), ISO)
    g = helix(pitch_factor * HEIGHT, vol)
    proj = ph.project(g).astype(np.float32)
    stats: dict = {}
    rec = leveret.fdk(proj, g, vol, backend="cpu", stats=stats, slab_slices=16)  # 3 slabs of the 40 slices
    rmse, bias = rmse_inside(rec, ph.rasterize(vol, supersampling=2), vol)
    print(
        f"pitch {pitch_factor} x detector: rmse {rmse:.4f} (circular {circular_reference:.4f}), bias {bias:.4f}, "
        f"window {stats['n_pi']}-PI, edges {stats['smoothing']:.3f}"
    )
    assert rmse <= 1.5 * circular_reference
    assert abs(bias) < 0.005
    assert stats["views_per_slab"] < g.n_views / 2  # each slab from the views that see it


def test_no_pitch_periodic_ripple_along_z():
    """Long rods, off the axis (a centred, rotationally symmetric object would hide
    the ripple: the helix's screw symmetry turns it into a rotation): the mean
    inside a rod, slice by slice, has no component at the pitch's frequency above
    0.1 % of the rod's value. The sharp window (smoothing=0) ripples 15x more."""
    rods = phantom.EllipsoidPhantom(
        [E(1.0, (16, 15, 1e4)), E(0.5, (3, 3, 1e4), (7, 2, 0)), E(-0.5, (2.5, 2.5, 1e4), (-5, -6, 0))]
    )
    vol = VolumeGeometry((64, 36, 36), voxel_size=(ISO, 1.2 * ISO, 1.2 * ISO))
    g = ConeGeometry.helical(np.arange(int(5.8 * 120)) * 2 * np.pi / 120, 16 * ISO, SID, SDD, 16, 64, PIX)
    proj = rods.project(g).astype(np.float32)
    X, Y = np.meshgrid(vol.coordinates("x"), vol.coordinates("y"))
    rod = np.hypot(X - 7, Y - 2) < 2.0
    z = vol.coordinates("z")

    def ripple(smoothing):
        rec = helical_fdk(proj, g, vol, backend="cpu", smoothing=smoothing)
        means = np.array([s[rod].mean() for s in rec])
        assert means.mean() == pytest.approx(1.5, abs=0.01)
        return 2 * np.abs(np.sum((means - means.mean()) * np.exp(-2j * np.pi * z / (16 * ISO)))) / z.size

    smooth = ripple("auto")
    assert smooth < 0.001 * 1.5 * 2  # below 0.2 % of the rod's value
    assert ripple(0.0) > 5 * smooth


@pytest.mark.parametrize("pitch,direction", [(-1.0, 1.0), (1.0, -1.0), (-1.0, -1.0)])
def test_either_handedness_and_direction(pitch, direction):
    ph = long_phantom()
    vol = VolumeGeometry((20, 40, 40), 1.5 * ISO)
    g = helix(pitch * HEIGHT, vol, direction=direction, per_turn=120)
    rec = leveret.fdk(ph.project(g).astype(np.float32), g, vol, backend="cpu")
    rmse, bias = rmse_inside(rec, ph.rasterize(vol, supersampling=2), vol)
    assert rmse < 0.03 and abs(bias) < 0.005


def test_fdk_sends_a_helix_to_helical_fdk_and_refuses_what_it_ignores():
    vol = VolumeGeometry((8, 16, 16), 3.0)
    g = helix(HEIGHT, vol, per_turn=60)
    proj = phantom.ball(20.0).project(g).astype(np.float32)
    kept = proj.copy()
    direct = helical_fdk(proj, g, vol, backend="cpu")
    np.testing.assert_array_equal(leveret.fdk(proj, g, vol, backend="cpu"), direct)
    np.testing.assert_array_equal(proj, kept)  # the input is not touched
    with pytest.raises(ValueError, match="^short_scan: a helical scan"):
        leveret.fdk(proj, g, vol, backend="cpu", short_scan=True)
    with pytest.raises(ValueError, match="^devices: helical scans run on one GPU"):
        leveret.fdk(proj, g, vol, backend="cpu", devices=[0])
    # slabs of any thickness, float64, chunks: the same volume
    np.testing.assert_allclose(
        helical_fdk(proj, g, vol, backend="cpu", slab_slices=3, chunk_views=7),
        direct,
        rtol=1e-5,
        atol=1e-5 * np.abs(direct).max(),
    )
    double = helical_fdk(proj.astype(np.float64), g, vol, backend="cpu", precision="float64")
    assert double.dtype == np.float64
    assert np.linalg.norm(double - direct) / np.linalg.norm(double) < 1e-5


def test_a_slab_from_its_own_views_and_rows_is_the_whole_calls_slab():
    """What an out-of-core driver does: plan_slabs, then each slab from
    projections[n0:n1, r0:r1] alone (fdk_slab)."""
    vol = VolumeGeometry((24, 20, 20), 2.5)
    g = helix(HEIGHT, vol, per_turn=60)
    proj = long_phantom().project(g).astype(np.float32)
    whole = helical_fdk(proj, g, vol, backend="cpu", slab_slices=8)
    plan = plan_slabs(g, vol, 8)
    assert [s.z for s in plan] == [(0, 8), (8, 16), (16, 24)]
    for slab in plan:
        (n0, n1), (r0, r1) = slab.views, slab.rows
        assert 0 < n1 - n0 < g.n_views and 0 < r1 - r0 <= ROWS
        part = fdk_slab(proj[n0:n1, r0:r1], g, vol, slab, backend="cpu")
        k0, k1 = slab.z
        np.testing.assert_allclose(part, whole[k0:k1], rtol=0, atol=1e-5 * np.abs(whole).max())
        # the slab's views alone cover it: a helix of its own
        helical_fdk(proj[n0:n1], g.crop_views(n0, n1), vol.slab(k0, k1), backend="cpu")
    with pytest.raises(ValueError, match="^projections: expected shape"):
        fdk_slab(proj, g, vol, plan[0], backend="cpu")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"smoothing": -0.1}, "^smoothing: expected a width >= 0"),
        ({"smoothing": 5.0}, "^smoothing: 5 is wider than the detector holds"),
        ({"n_pi": 2}, "^n_pi: expected an odd number"),
        ({"n_pi": 99}, "^n_pi: the 99-PI window does not fit"),
        ({"filter": "box"}, "^filter"),
        ({"precision": "half"}, "^precision"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    vol = VolumeGeometry((4, 8, 8), 3.0)
    g = helix(HEIGHT, vol, per_turn=40)
    with pytest.raises(ValueError, match=match):
        helical_fdk(np.zeros(g.projection_shape, np.float32), g, vol, backend="cpu", **kwargs)


def test_not_a_helix_is_refused():
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 20), SID, SDD, ROWS, COLS, PIX)
    with pytest.raises(ValueError, match="^geometry: expected a helical scan"):
        helical_fdk(np.zeros(g.projection_shape, np.float32), g, VolumeGeometry((2, 4, 4)), backend="cpu")


# -- GPU -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_case():
    vol = VolumeGeometry((40, 48, 48), ISO)
    g = helix(HEIGHT, vol, per_turn=120)
    proj = long_phantom().project(g).astype(np.float32)
    return g, vol, proj, helical_fdk(proj, g, vol, backend="cpu", interpolation="linear32")


@pytest.mark.gpu
def test_gpu_equals_cpu_within_float32_rounding(gpu_case):
    import cupy as cp

    g, vol, proj, cpu = gpu_case
    for kernel in ("quad", "global"):  # exact float32 weights on both sides
        gpu = helical_fdk(proj, g, vol, backend="cuda", interpolation="linear32", kernel=kernel)
        assert isinstance(gpu, np.ndarray)
        assert np.abs(gpu - cpu).max() < 1e-4 * np.abs(cpu).max()
        on_device = helical_fdk(cp.asarray(proj), g, vol, interpolation="linear32", kernel=kernel)
        assert isinstance(on_device, cp.ndarray)
        assert np.abs(on_device.get() - cpu).max() < 1e-4 * np.abs(cpu).max()
    # the default (texture-unit) kernels: within their 8-bit interpolation weights
    fast = leveret.fdk(proj, g, vol, backend="cuda")
    assert np.sqrt(np.mean((fast - cpu) ** 2)) < 2e-3 * np.abs(cpu).max()


@pytest.mark.gpu
def test_gpu_keeps_the_filtered_views_on_the_host_under_a_small_budget(gpu_case):
    g, vol, proj, cpu = gpu_case
    whole = helical_fdk(proj, g, vol, backend="cuda", interpolation="linear32", kernel="quad")
    small = helical_fdk(
        proj, g, vol, backend="cuda", interpolation="linear32", kernel="quad", gpu_memory=64 << 20, chunk_views=50
    )
    assert np.abs(small - whole).max() < 1e-5 * np.abs(whole).max()
