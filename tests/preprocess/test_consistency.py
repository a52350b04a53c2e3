"""leveret.preprocess.check_consistency: a scan's data against its geometry.

Correct scans (the bundled real scan, a simulated tooth-like scan over 0..180
degrees both ends included, over 0..180 with the end excluded and over 360
degrees, the small phantom scans of the tests) give no finding; each mistake a
user makes on them gives one finding that names the argument at fault, the
likely cause and the fix, with the values that fit (the axis, the angles'
scale)."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from cases import tooth_like_scan
from leveret import phantom
from leveret.geometry import ParallelGeometry
from leveret.preprocess import Finding, check_consistency


@pytest.fixture(scope="module")
def savu():
    return leveret.datasets.savu_scan()


@pytest.fixture(scope="module", params=["both ends", "end excluded", "360"])
def tooth(request):
    kind = request.param
    if kind == "both ends":
        return tooth_like_scan()
    if kind == "end excluded":
        return tooth_like_scan(n_angles=180, endpoint=False, seed=1)
    return tooth_like_scan(n_angles=360, span_degrees=360.0, endpoint=False, seed=2)


def checks(findings):
    return [f.check for f in findings]


def test_the_bundled_scan_and_its_line_integrals_agree_with_their_geometry(savu):
    assert check_consistency(savu.projections, savu.geometry, flats=savu.flat, darks=savu.dark) == []
    assert check_consistency(savu.line_integrals(), savu.geometry) == []
    assert check_consistency(np.exp(-savu.line_integrals()), savu.geometry, log_transform=True) == []


def test_a_tooth_like_scan_agrees_with_its_geometry(tooth):
    assert check_consistency(tooth.counts, tooth.geometry, flats=tooth.flats, darks=tooth.darks) == []
    assert check_consistency(tooth.lines, tooth.geometry) == []


@pytest.mark.parametrize(
    "n_angles,span,endpoint", [(60, 180, False), (91, 180, True), (7, 180, False), (120, 360, False), (2, 180, False)]
)
def test_small_phantom_scans_agree_with_their_geometry(n_angles, span, endpoint):
    g = ParallelGeometry(np.radians(np.linspace(0, span, n_angles, endpoint=endpoint)), 32, n_rows=4)
    for ball in (phantom.ball(9.0), phantom.ball(5.0, center=(4.0, -2.0, 0.0))):
        assert check_consistency(ball.project(g).astype(np.float32), g) == []
    sino = phantom.shepp_logan_ellipses(radius=14.0).project(g.replace(n_rows=None))
    assert check_consistency(sino, g.replace(n_rows=None)) == []


def test_a_scan_given_twice_its_range(savu, tooth):
    """0:360:N for a 180-degree scan (and 0:720:N for a 360-degree one)."""
    for p, g, kw in (
        (savu.projections, savu.geometry, dict(flats=savu.flat, darks=savu.dark)),
        (tooth.counts, tooth.geometry, dict(flats=tooth.flats, darks=tooth.darks)),
    ):
        n, turn = g.n_angles, 360 if np.ptp(g.angles) < np.pi + 0.1 else 720
        [f] = check_consistency(p, g.replace(angles=np.radians(np.arange(n) * turn / n)), **kw)
        assert (f.check, f.argument, f.flag, f.suggestion) == ("angles", "angles", "--angles", 0.5)
        assert f"a {turn // 2}-degree scan given as {turn} degrees?" in f.message
        assert f.cli_message().startswith("--angles: ") and "check the range of --angles" in f.cli_message()


def test_a_360_degree_scan_given_as_180_degrees():
    scan = tooth_like_scan(n_angles=360, span_degrees=360.0, endpoint=False, seed=2)
    [f] = check_consistency(
        scan.counts, scan.geometry.replace(angles=scan.angles / 2), flats=scan.flats, darks=scan.darks
    )
    assert f.check == "angles" and f.suggestion == 2.0 and "a 360-degree scan given as 180 degrees" in f.message


def test_degrees_read_as_radians_name_the_unit(savu, tooth):
    for p, g, kw in (
        (savu.projections, savu.geometry, dict(flats=savu.flat, darks=savu.dark)),
        (tooth.counts, tooth.geometry, dict(flats=tooth.flats, darks=tooth.darks)),
    ):
        [f] = check_consistency(p, g.replace(angles=np.degrees(g.angles)), **kw)
        assert (f.check, f.flag) == ("angles", "--angle-unit")
        assert f.suggestion == pytest.approx(np.pi / 180)
        assert "degrees, read as radians" in f.message and f.cli_fix == "give --angle-unit degree"


def test_a_wrong_centre_names_the_axis_the_mirrored_views_place(savu, tooth):
    for p, g, kw, axis in (
        (savu.projections, savu.geometry, dict(flats=savu.flat, darks=savu.dark), 85.87),
        (tooth.counts, tooth.geometry, dict(flats=tooth.flats, darks=tooth.darks), 148.3),
    ):
        for wrong in (20.0, axis - 6, (g.n_cols - 1) / 2):
            [f] = check_consistency(p, g.replace(center=wrong), **kw)
            assert (f.check, f.argument, f.flag) == ("center", "center", "--center")
            # measured: within 0.1 pixels of the axis (the bundled scan: 85.8 for 85.87)
            assert abs(f.suggestion - axis) < 0.2, (wrong, f.suggestion)
            assert f"give --center {f.suggestion:.1f}, or --center auto" in f.cli_message()
        # 1 pixel off is within the check's tolerance (CENTER_TOLERANCE = 2)
        assert check_consistency(p, g.replace(center=axis + 1), **kw) == []


def test_the_centre_is_left_unchecked_when_asked(savu):
    g = savu.geometry.replace(center=20.0)
    assert (
        check_consistency(savu.projections, g, flats=savu.flat, darks=savu.dark, checks=("values", "mass", "angles"))
        == []
    )


def test_swapped_detector_axes_break_the_mass_condition(savu, tooth):
    for p, g, flat, dark in (
        (savu.projections, savu.geometry, savu.flat, savu.dark),
        (tooth.counts, tooth.geometry, tooth.flats, tooth.darks),
    ):
        t = np.ascontiguousarray(np.swapaxes(p, 1, 2))
        gt = ParallelGeometry(g.angles, p.shape[1], n_rows=p.shape[2])
        [f] = check_consistency(t, gt, flats=np.swapaxes(flat, -1, -2), darks=np.swapaxes(dark, -1, -2))
        assert (f.check, f.argument, f.flag) == ("mass", "projections", "input")
        assert "detector axes are probably swapped" in f.message and f.value > 0.05


def test_raw_counts_are_recognised_by_their_values_not_their_dtype(savu):
    for counts in (savu.projections, savu.projections.astype(np.float32), savu.projections.astype(np.float64)):
        [f] = check_consistency(counts, savu.geometry)
        assert (f.check, f.argument, f.flag) == ("counts", "flats", "--flat/--dark")
        assert "raw detector counts" in f.message
    # integer line integrals are line integrals
    lines = np.round(100 * savu.line_integrals()).astype(np.uint16)
    assert check_consistency(lines, savu.geometry) == []


def test_transmissions_without_log_and_the_log_of_counts_or_of_line_integrals(savu):
    lines = savu.line_integrals()
    [f] = check_consistency(np.exp(-lines), savu.geometry)
    assert (f.check, f.flag, f.cli_fix) == (
        "transmission",
        "--minus-log",
        "give --minus-log (or --flat and --dark if they are raw counts)",
    )
    [f] = check_consistency(savu.projections, savu.geometry, log_transform=True)
    assert (f.check, f.argument, f.flag) == ("log-of-counts", "log_transform", "--minus-log")
    assert f"values up to {f.value:.5g}" in f.message and "give --flat and --dark instead" in f.cli_fix
    [f] = check_consistency(lines, savu.geometry, log_transform=True)
    assert (f.check, f.flag) == ("log-of-line-integrals", "--minus-log")


def test_flats_on_line_integrals(savu):
    [f] = check_consistency(savu.line_integrals(), savu.geometry, flats=savu.flat, darks=savu.dark)
    assert (f.check, f.argument, f.flag) == ("normalised", "flats", "--flat/--dark")
    assert "already normalised or line integrals" in f.message


def test_a_sinogram_and_its_flats(savu):
    row = 67
    g = savu.geometry.replace(n_rows=None)
    counts = savu.projections[:, row, :]
    assert check_consistency(counts, g, flats=savu.flat[row], darks=savu.dark[row]) == []
    [f] = check_consistency(counts, g.replace(center=30.0), flats=savu.flat[row][None], darks=savu.dark[row][None])
    assert f.check == "center"


def test_per_view_axis_shifts_are_part_of_the_centre(savu):
    """Views moved by 0..6 pixels: consistent with those axis shifts, not without them."""
    shifts = np.round(np.linspace(0, 6, savu.geometry.n_angles))
    moved = np.stack([np.roll(p, int(s), axis=-1) for p, s in zip(savu.line_integrals(), shifts)])
    assert check_consistency(moved, savu.geometry.replace(axis_shift=shifts)) == []
    assert checks(check_consistency(moved, savu.geometry)) in (["center"], ["angles"])


def test_a_lazy_array_is_read_only_in_the_rows_checked(savu):
    class Lazy:
        shape, reads = savu.projections.shape, []

        def __getitem__(self, key):
            self.reads.append(key)
            return savu.projections[key]

    lazy = Lazy()
    assert check_consistency(lazy, savu.geometry, flats=savu.flat, darks=savu.dark, rows=(60, 64)) == []
    assert lazy.reads == [(slice(None), slice(60, 64), slice(None))]


def test_findings_print_the_argument_and_the_fix(savu):
    [f] = check_consistency(savu.projections, savu.geometry.replace(center=20.0), flats=savu.flat, darks=savu.dark)
    assert isinstance(f, Finding)
    assert str(f) == f"center: {f.message}; {f.fix}" and f.fix.startswith("give center=85.8")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(geometry="g"), TypeError, "^geometry: expected a ParallelGeometry"),
        (dict(rows=(5, 2)), ValueError, "^rows: expected 0 <= first < stop"),
        (dict(checks=("values", "colour")), ValueError, "^checks: "),
        (dict(flats=np.ones((135, 160))), ValueError, "^flats: give flats and darks together"),
    ],
)
def test_bad_arguments(savu, kwargs, error, match):
    args = dict(geometry=savu.geometry)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        check_consistency(savu.projections, **args)
    with pytest.raises(ValueError, match=r"^projections: expected shape \(91, 135, 160\)"):
        check_consistency(savu.projections[:, :, :100], savu.geometry)


@pytest.mark.gpu
def test_cupy_arrays_give_the_numpy_findings(savu):
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy installed but no usable GPU
        pytest.skip(f"no CUDA device: {exc}")
    projections, flat, dark = (cp.asarray(a) for a in (savu.projections, savu.flat, savu.dark))
    assert check_consistency(projections, savu.geometry, flats=flat, darks=dark) == []
    wrong = savu.geometry.replace(center=20.0)
    assert check_consistency(projections, wrong, flats=flat, darks=dark) == check_consistency(
        savu.projections, wrong, flats=savu.flat, darks=savu.dark
    )
