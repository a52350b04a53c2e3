"""bench/bench_sweep.py's CPU-checkable logic: geometries, ASTRA vectors, memory
estimates, the summary, the regression comparison and the plot."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

import leveret

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sweep = _load("bench_sweep")
common = sweep.common

CONE_VARIANTS = [
    {},
    {"sampling": 2.5},
    {"sampling": 0.5},
    {"half_angle": 2.0},
    {"half_angle": 15.0},
    {"scan": "short"},
    {"offset": 0.25},
    {"trajectory": "wobble"},
    {"scan": "short", "offset": 0.25, "trajectory": "wobble"},
]


def cone_params(n=64, views=24, **over):
    params = dict(
        n=n,
        nz=n,
        views=views,
        sampling=sweep.BASE_SAMPLING,
        half_angle=None,
        scan="full",
        offset=0.0,
        trajectory="circular",
    )
    params.update(over)
    return params


def inside_points(vol, rng, k=50):
    """Random world points inside the volume."""
    lo = np.array([vol.extent(a)[0] for a in "xyz"])
    hi = np.array([vol.extent(a)[1] for a in "xyz"])
    return lo + (hi - lo) * rng.random((k, 3))


# -- geometries --------------------------------------------------------------------------


def test_base_point_is_the_matched_projector_papers_problem():
    base = sweep.points()[0]
    assert base["family"] == "cone" and base["axis"] == "base"
    g, vol, derived = sweep.cone_problem(base["params"])
    angles = np.linspace(0, 2 * np.pi, 720, endpoint=False)
    paper = leveret.ConeGeometry.circular(angles, 1000.0, 1500.0, 512, 512, 2.0)
    assert g.projection_shape == (720, 512, 512)
    np.testing.assert_allclose(g.matrices, paper.matrices, rtol=1e-12, atol=1e-9)
    assert vol.shape == (512, 512, 512) and vol.spacing("x") == 1.0
    assert derived["half_angle"] == pytest.approx(math.degrees(math.atan(512 / 1500)), abs=1e-3)


@pytest.mark.parametrize("sampling", [0.5, 0.75, 1.0, 2.5])
@pytest.mark.parametrize("half_angle", [None, 2.0, 15.0])
def test_one_voxel_at_the_isocentre_spans_sampling_detector_pixels(sampling, half_angle):
    g, vol, _ = sweep.cone_problem(cone_params(sampling=sampling, half_angle=half_angle))
    voxel = vol.spacing("x")
    # view 0: u runs along +x, v along +z, through the isocentre
    u, v, _ = g.project([[0.0, 0.0, 0.0], [voxel, 0.0, 0.0], [0.0, 0.0, voxel]])
    assert u[0, 1] - u[0, 0] == pytest.approx(sampling, rel=1e-12)
    assert v[0, 2] - v[0, 0] == pytest.approx(sampling, rel=1e-12)


@pytest.mark.parametrize("half_angle", [2.0, 5.0, 15.0])
def test_half_angle_is_the_angle_of_the_detectors_edge_row(half_angle):
    g, _, derived = sweep.cone_problem(cone_params(half_angle=half_angle))
    centre = g.ray_directions((g.n_cols - 1) / 2, (g.n_rows - 1) / 2, views=0)[0]
    edge = g.ray_directions((g.n_cols - 1) / 2, -0.5, views=0)[0]  # the top row's outer edge
    angle = math.degrees(math.acos(float(np.dot(centre, edge))))
    assert angle == pytest.approx(half_angle, abs=1e-9)
    assert derived["half_angle"] == pytest.approx(half_angle, abs=1e-3)
    assert derived["sdd"] / derived["sid"] == pytest.approx(sweep.SDD / sweep.SID)


def test_short_scan_covers_half_a_turn_plus_the_fan():
    g, _, derived = sweep.cone_problem(cone_params(scan="short"))
    span = g.angles[-1] - g.angles[0] + (g.angles[1] - g.angles[0])
    assert span == pytest.approx(np.pi + 2 * math.radians(derived["fan_half_angle"]), rel=1e-3)


def test_offset_detector_moves_the_principal_ray_a_quarter_width():
    g, _, _ = sweep.cone_problem(cone_params(offset=0.25))
    u0 = g.principal_point()[:, 0]
    np.testing.assert_allclose(u0, (g.n_cols - 1) / 2 - 0.25 * g.n_cols, atol=1e-9)


def test_wobble_trajectory_varies_source_distance_and_detector_per_view():
    g, _, derived = sweep.cone_problem(cone_params(views=90, trajectory="wobble"))
    distance = np.linalg.norm(g.source_positions()[:, :2], axis=1) / derived["sid"]
    assert distance.min() == pytest.approx(0.98, abs=1e-3) and distance.max() == pytest.approx(1.02, abs=1e-3)
    pp = g.principal_point()
    assert np.ptp(pp[:, 0]) > 3.0 and np.ptp(pp[:, 1]) > 2.0  # shifts of +-2 and +-1.5 pixels


def test_unknown_trajectory_is_refused_by_name():
    with pytest.raises(ValueError, match="^trajectory"):
        sweep.cone_problem(cone_params(trajectory="helix"))


# -- ASTRA's geometry from leveret's ----------------------------------------------------------


@pytest.mark.parametrize("over", CONE_VARIANTS)
def test_astra_vectors_put_every_point_where_leveret_projects_it(over, rng):
    g, vol, _ = sweep.cone_problem(cone_params(**over))
    vectors = common.astra_cone_vectors(g)
    pts = inside_points(vol, rng)
    u_astra, v_astra = common.astra_vector_pixels(vectors, g.n_rows, g.n_cols, pts)
    u, v, _ = g.project(pts)
    # float64 geometry: agreement to rounding of pixel coordinates of order 1e3
    np.testing.assert_allclose(u_astra, u, atol=1e-8)
    np.testing.assert_allclose(v_astra, v, atol=1e-8)


@pytest.mark.parametrize("over", CONE_VARIANTS)
def test_astra_vectors_give_the_same_geometry_back(over):
    g, _, _ = sweep.cone_problem(cone_params(**over))
    back = leveret.ConeGeometry.from_astra_vectors(common.astra_cone_vectors(g), g.n_rows, g.n_cols)
    np.testing.assert_allclose(back.matrices, g.normalised().matrices, rtol=1e-10, atol=1e-12)


def test_check_cases_build_and_convert_to_astra_vectors(rng):
    cases = sweep.check_cases(16)
    assert [name for name, _ in cases][0] == "base" and len(cases) == 5
    for _, params in cases:
        g, vol, _ = sweep.cone_problem(params)
        pts = inside_points(vol, rng, 5)
        u_astra, _ = common.astra_vector_pixels(common.astra_cone_vectors(g), g.n_rows, g.n_cols, pts)
        np.testing.assert_allclose(u_astra, g.project(pts)[0], atol=1e-8)


def test_astra_vector_pixels_model_a_known_detector():
    # source on -y at 10, detector centre at +y 5, u = x, v = z: magnification 1.5
    vectors = np.array([[0, -10, 0, 0, 5, 0, 1, 0, 0, 0, 0, 1]], float)
    u, v = common.astra_vector_pixels(vectors, 3, 5, [[1.0, 0.0, 2.0]])
    assert u[0, 0] == pytest.approx(2 + 1.5) and v[0, 0] == pytest.approx(1 + 3.0)


def test_astra_volume_window_matches_voxel_centres_with_and_without_roi():
    vol = leveret.VolumeGeometry((6, 10, 12), 0.5)
    ny, nx, nz, x0, x1, y0, y1, z0, z1 = common.astra_volume_window(vol)
    assert (ny, nx, nz) == (10, 12, 6)
    assert (x0, x1, y0, y1, z0, z1) == (*vol.extent("x"), *vol.extent("y"), *vol.extent("z"))
    roi = (2, 3, 4, 5)
    ny, nx, nz, x0, x1, y0, y1, _, _ = common.astra_volume_window(vol, roi)
    assert (ny, nx) == (4, 5)
    centres_x = x0 + (np.arange(nx) + 0.5) * (x1 - x0) / nx
    centres_y = y0 + (np.arange(ny) + 0.5) * (y1 - y0) / ny
    np.testing.assert_allclose(centres_x, vol.coordinates("x")[3:8])
    np.testing.assert_allclose(centres_y, vol.coordinates("y")[2:6])


# -- the points -------------------------------------------------------------------------------


@pytest.mark.parametrize("quick", [False, True])
def test_points_vary_one_axis_at_a_time_from_their_familys_base(quick):
    pts = sweep.points(quick)
    bases = {p["family"]: p["params"] for p in pts if p["axis"] == "base"}
    assert set(bases) == {"cone", "fdk", "parallel", "radon3d"}
    for p in pts:
        if p["axis"] in ("base", "corner") or p["family"] == "fdk-streamed":
            continue
        differ = {k for k in p["params"] if p["params"][k] != bases[p["family"]][k]}
        expected = {p["axis"], "nz"} & set(p["params"]) if p["axis"] == "n" else {p["axis"]}
        assert differ == expected, (p, differ)
    keys = [sweep.point_key(p["family"], op, p["params"]) for p in pts for op in sweep.OPS[p["family"]]]
    assert len(keys) == len(set(keys))
    assert [p["axis"] for p in pts[:4]] == ["base"] * 4


def test_full_sweep_covers_the_ranges_asked_for():
    pts = sweep.points()
    values = lambda fam, key: {p["params"][key] for p in pts if p["family"] == fam}  # noqa: E731
    assert min(values("cone", "sampling")) == 0.5 and max(values("cone", "sampling")) == 2.5
    assert {2.0, 15.0} <= values("cone", "half_angle")
    assert min(values("cone", "n")) == 256 and max(values("cone", "n")) == 1024
    assert min(values("cone", "views")) == 180 and max(values("cone", "views")) == 1440
    assert {"full", "short"} <= values("cone", "scan") and 0.25 in values("cone", "offset")
    assert "wobble" in values("cone", "trajectory")
    assert min(values("fdk", "views")) == 128 and max(values("fdk", "views")) == 1000
    assert min(values("fdk", "n")) == 256 and max(values("fdk", "n")) == 1024
    assert {0.5, 2.5} <= values("fdk", "sampling")
    streamed = [p["params"] for p in pts if p["family"] == "fdk-streamed"]
    assert {(p["n"], p["nz"], p["views"], p["budget_gib"]) for p in streamed} >= {
        (4096, 640, 124, 2.0),
        (4096, 640, 124, 8.0),
    }
    assert min(values("parallel", "slices")) == 1 and max(values("parallel", "slices")) == 2048
    assert min(values("parallel", "angles")) == 180 and max(values("parallel", "angles")) == 6000
    assert min(values("parallel", "width")) == 512 and max(values("parallel", "width")) == 4096
    assert values("parallel", "roi") == {False, True}
    assert values("parallel", "precision") == {"float32", "float16"}
    assert min(values("radon3d", "n")) == 64 and max(values("radon3d", "n")) == 256
    assert min(values("radon3d", "dirs")) == 100 and max(values("radon3d", "dirs")) == 4000


@pytest.mark.parametrize("quick", [False, True])
def test_memory_estimates_use_the_shapes_the_problems_build(quick):
    for p in sweep.points(quick):
        vol_bytes, proj_bytes = sweep.array_bytes(p)
        if p["family"] in ("cone", "fdk", "fdk-streamed"):
            if p["params"]["n"] > 1024:  # building 4096^2 matrices is cheap, but keep it to the cone sizes
                continue
            g, vol, _ = sweep.cone_problem(p["params"])
        elif p["family"] == "parallel":
            g, vol, roi = sweep.parallel_problem(p["params"])
            if roi:
                vol = leveret.VolumeGeometry((vol.nz, roi[2], roi[3]))
        else:
            g, vol = sweep.radon_problem(p["params"])
            assert proj_bytes == 8 * int(np.prod(g.projection_shape))
            assert vol_bytes == 4 * vol.size
            continue
        assert proj_bytes == 4 * int(np.prod(g.projection_shape))
        assert vol_bytes == 4 * vol.size
        for op in sweep.OPS[p["family"]]:
            gpu, host = sweep.needs(p, op)
            on_device = op in ("cone BP", "parallel BP") or p["family"] in ("cone", "fdk-streamed")
            if on_device:  # at least the op's own volume and projections
                assert gpu >= vol_bytes + proj_bytes


def test_points_that_do_not_fit_are_skipped_with_the_reason():
    big = next(
        p
        for p in sweep.points()
        if p["family"] == "parallel" and p["params"]["slices"] == 2048 and p["params"]["width"] == 2048
    )
    s = sweep.Sweep(sweep.Astra(False), gpu_bytes=80 << 30, host_bytes=500 << 30)
    assert "GPU memory" in s.fits(big, "parallel BP")
    assert s.fits(big, "FBP") == ""  # FBP streams from host arrays
    s = sweep.Sweep(sweep.Astra(False), gpu_bytes=1 << 30, host_bytes=1 << 30)
    s.run(sweep.points()[0])  # nothing fits 1 GiB: rows, no GPU call
    assert [r["status"] for r in s.rows] == ["skipped"] * len(sweep.OPS["cone"])
    assert all(r["reason"].startswith("needs ~") for r in s.rows)


def test_estimates_grow_with_the_work():
    cb = sweep.cone_base()
    est = lambda **o: sweep.estimate_seconds(sweep._point("cone", "x", **dict(cb, **o)))  # noqa: E731
    assert est() < est(views=1440) < est(n=1024, nz=1024)
    assert est(sampling=0.5) <= est() < est(sampling=2.5)


# -- summary, comparison, plot ----------------------------------------------------------------


def synthetic_rows():
    s = sweep.Sweep(sweep.Astra(False), gpu_bytes=1 << 40, host_bytes=1 << 40)
    cb = sweep.cone_base(quick=True)
    for i, (ta, tb, tat) in enumerate([(1.0, 2.0, 1.5), (1.0, 0.5, 2.5), (2.0, 1.0, 3.0)]):
        point = sweep._point("cone", "views", **dict(cb, views=100 + i))
        s.add(point, "A joseph", ta, tb)
        s.add(point, "A.T joseph", tat, tb, at_over_a=tat / ta)
    s.add(sweep._point("cone", "views", **dict(cb, views=999)), "A joseph", status="skipped", reason="no")
    s.add(sweep._point("radon3d", "base", n=8, dirs=10), "radon3d FBP", 0.1, None)
    return s.rows


def test_summary_gives_worst_and_median_ratios_and_flags():
    summary = sweep.summarize(synthetic_rows())
    a = summary["per_op"]["A joseph"]
    assert a["points"] == 3 and a["worst_ratio"] == 2.0 and a["median_ratio"] == 2.0  # 0.5, 2.0, 2.0
    at = summary["per_op"]["A.T joseph"]
    assert at["worst_at_over_a"] == 2.5 and at["worst_ratio"] == 5.0
    assert summary["per_op"]["radon3d FBP"]["worst_ratio"] is None
    why = {item["key"]: item["why"] for item in summary["flagged"]}
    # slower than ASTRA: A and A.T at views 101 and 102; A.T > 2 A: views 101 only
    assert len(why) == 4
    assert any("A.T = 2.50 x A" in w for ws in why.values() for w in ws)
    assert not any("A.T =" in w for k, ws in why.items() if "views=100" in k for w in ws)
    assert summary["skipped"] == 1 and summary["failed"] == 0
    assert "FLAG" in sweep.summary_text(summary)


def test_compare_flags_points_more_than_ten_percent_slower():
    stored = synthetic_rows()
    now = json.loads(json.dumps(stored))
    now[0]["leveret_s"] *= 1.11  # slower by 11 %: flagged
    now[2]["leveret_s"] *= 1.09  # by 9 %: not
    now[4]["leveret_s"] *= 0.5  # faster: not
    regressions = sweep.compare(now, stored)
    assert [r["key"] for r in regressions] == [now[0]["key"]]
    assert regressions[0]["slower"] == pytest.approx(0.11)
    # a point the stored run did not have, or skipped, is no regression
    assert sweep.compare(now, [r for r in stored if r["key"] != now[0]["key"]]) == []
    # nor timer noise on a sub-millisecond point
    fast = [dict(r, leveret_s=r["leveret_s"] * 1e-4) for r in stored if r["status"] == "ok"]
    noisy = [dict(r, leveret_s=r["leveret_s"] * 1.5) for r in fast]
    assert sweep.compare(noisy, fast) == []


def test_replot_draws_the_ratios_from_a_result_file(tmp_path):
    rows = synthetic_rows()
    data = tmp_path / "sweep.json"
    data.write_text(json.dumps({"meta": {}, "results": rows}))
    png = tmp_path / "sweep.png"
    assert sweep.main(["--replot", str(data), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dry_run_lists_every_point_without_a_gpu(capsys):
    assert sweep.main(["--dry-run", "--quick"]) == 0
    out = capsys.readouterr().out
    assert f"{len(sweep.points(True))} points" in out
    assert sweep.main(["--dry-run", "--families", "radon3d"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "radon3d" in line]
    assert len(lines) == sum(p["family"] == "radon3d" for p in sweep.points())


def test_resume_keeps_the_measured_points_of_the_same_gpu_model(tmp_path):
    """--resume: a point's rows are kept only where every operation of it was
    measured; another GPU model's file is refused."""
    base = sweep.cone_base(quick=True)
    other = dict(base, sampling=2.5)

    def row(params, op, status):
        return {
            "family": "cone",
            "axis": "base",
            "op": op,
            "params": params,
            "status": status,
            "key": sweep.point_key("cone", op, params),
        }

    measured = [row(base, op, "ok") for op in sweep.OPS["cone"]]
    partial = [row(other, op, "ok") for op in sweep.OPS["cone"][:-1]] + [row(other, sweep.OPS["cone"][-1], "skipped")]
    gpu = {"devices": [{"backend": "cuda", "available": True, "name": "NVIDIA H200"}]}
    path = tmp_path / "stored.json"
    path.write_text(json.dumps({"meta": gpu, "results": measured + partial}))
    kept = sweep.resumed_rows(str(path), gpu)
    assert kept == measured
    with pytest.raises(SystemExit, match="measured on NVIDIA H200, this is NVIDIA H100"):
        sweep.resumed_rows(str(path), {"devices": [{"backend": "cuda", "available": True, "name": "NVIDIA H100"}]})


def test_resume_measures_only_the_operations_a_stored_point_lacks():
    """A point stored before an operation joined the sweep keeps its rows; only the
    new operation is run (here: skipped for memory, so no GPU is needed)."""
    point = sweep._point("cone", "base", **sweep.cone_base())
    old_ops = [op for op in sweep.OPS["cone"] if op != "A.T unmatched"]
    done = {sweep.point_key("cone", op, point["params"]) for op in old_ops}
    assert sweep.missing_ops(point, done) == ["A.T unmatched"]
    assert sweep.estimate_seconds(point, ["A.T unmatched"]) < sweep.estimate_seconds(point) / 5
    s = sweep.Sweep(sweep.Astra(False), gpu_bytes=1 << 30, host_bytes=1 << 30)
    s.run(point, done)
    assert [(r["op"], r["status"]) for r in s.rows] == [("A.T unmatched", "skipped")]


def test_parts_split_the_points_by_estimated_time():
    pts = sweep.points()
    parts = [sweep.part_of(pts, k, 3) for k in range(3)]
    keys = lambda ps: [json.dumps([p["family"], p["params"]], sort_keys=True) for p in ps]  # noqa: E731
    assert sorted(sum((keys(p) for p in parts), [])) == sorted(keys(pts))  # each point once
    for part in parts:  # in the sweep's order of information
        assert keys(part) == [k for k in keys(pts) if k in set(keys(part))]
    loads = [sum(sweep.estimate_seconds(p) for p in part) for part in parts]
    assert max(loads) - min(loads) <= max(sweep.estimate_seconds(p) for p in pts)
    assert keys(sweep.part_of(pts, 1, 3)) == keys(parts[1])  # the same split every time


@pytest.mark.parametrize("bad", ["0/2", "3/2", "2", "a/b"])
def test_part_must_name_one_of_n_parts(bad, capsys):
    with pytest.raises(SystemExit):
        sweep.main(["--dry-run", "--part", bad])
    assert "--part" in capsys.readouterr().err
