"""The public entry points either work or refuse clearly.

Property-based (hypothesis) over the arguments of fbp, fdk, sirt, Projector,
the geometries and VolumeGeometry: every call returns finite values for finite
input, or raises ValueError/TypeError whose message starts with the name of
an argument. Then the specific inputs that once gave silent wrong results
(NaN volumes, dropped imaginary parts, zeros) or unhelpful errors.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leveret
from leveret import ConeGeometry, ParallelGeometry, Projector, VolumeGeometry
from leveret.resources import cgroup_available_bytes

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# Any float, extremes included; sizes around the valid range.
ANY_FLOAT = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -1.0, 1e-300, 1e300]))
SIZE = st.one_of(st.integers(-2, 6), st.sampled_from([0, 2.5, "4", None, True]))
VALUES = st.sampled_from(["normal", "nan", "inf", "huge", "complex", "object", "int"])


def _data(kind, shape, rng):
    x = rng.standard_normal(shape)
    if kind == "nan":
        x.flat[0] = np.nan
    elif kind == "inf":
        x.flat[-1] = -np.inf
    elif kind == "huge":
        x = np.clip(x, -1, 1) * 3e38  # within float32, sums of it are not
    elif kind == "complex":
        x = x + 1j
    elif kind == "object":
        x = x.astype(object)
    elif kind == "int":
        x = (x * 10).astype(np.int32)
    return x.astype(np.float32) if kind in ("normal", "nan", "inf", "huge") else x


def _refused_clearly(exc: BaseException, names) -> None:
    assert isinstance(exc, (ValueError, TypeError)), f"{type(exc).__name__}: {exc}"
    head = str(exc).split(":")[0]
    assert head in names, f"message does not start with an argument's name: {exc}"


def _call(fn, names):
    """fn() -> result, or None after checking that the refusal names an argument."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow on the way
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - what kind is the point
            _refused_clearly(exc, names)
            return None


PARALLEL_NAMES = {
    "angles",
    "n_cols",
    "n_rows",
    "det_spacing",
    "row_spacing",
    "center",
    "axis_shift",
    "shape",
    "voxel_size",
    "volume",
    "projections",
    "filter",
    "cutoff",
    "interpolation",
    "x",
    "y",
    "x0",
    "iterations",
    "projector",
    "geometry",
    "model",
    "precision",
}
for _i in range(3):
    PARALLEL_NAMES |= {f"shape[{_i}]", f"voxel_size[{_i}]", f"center[{_i}]"}


@SETTINGS
@given(
    n_angles=SIZE,
    n_cols=SIZE,
    n_rows=st.one_of(st.none(), SIZE),
    det_spacing=ANY_FLOAT,
    center=st.one_of(st.none(), ANY_FLOAT),
    values=VALUES,
    filt=st.sampled_from(["ram-lak", "hann", "nope"]),
    seed=st.integers(0, 2**16),
)
def test_fbp_works_or_names_the_argument(n_angles, n_cols, n_rows, det_spacing, center, values, filt, seed):
    rng = np.random.default_rng(seed)

    def run():
        g = ParallelGeometry(
            np.linspace(0, np.pi, n_angles, endpoint=False)
            if isinstance(n_angles, int) and not isinstance(n_angles, bool) and n_angles > 0
            else n_angles,
            n_cols,
            n_rows=n_rows,
            det_spacing=det_spacing,
            center=center,
        )
        p = _data(values, g.projection_shape, rng)
        return p, leveret.fbp(p, g, filter=filt, backend="cpu")

    out = _call(run, PARALLEL_NAMES)
    if out is not None:
        p, image = out
        assert values in ("normal", "int")  # everything else must have been refused
        assert np.isfinite(image).all()


@SETTINGS
@given(shape=st.lists(SIZE, min_size=0, max_size=4), voxel=ANY_FLOAT, center=ANY_FLOAT)
def test_volume_geometry_works_or_names_the_argument(shape, voxel, center):
    vg = _call(lambda: VolumeGeometry(tuple(shape), voxel, center), PARALLEL_NAMES)
    if vg is not None:
        assert vg.size == int(np.prod([int(n) for n in vg.shape], dtype=object))
        assert all(np.isfinite(vg.coordinates(a)).all() for a in ("xy" if vg.is_2d else "xyz"))


@SETTINGS
@given(
    x_values=VALUES,
    y_values=VALUES,
    model=st.sampled_from(["siddon", "joseph", "other"]),
    voxel=st.one_of(st.just(1.0), ANY_FLOAT),
    seed=st.integers(0, 2**16),
)
def test_projector_and_its_transpose_work_or_name_the_argument(x_values, y_values, model, voxel, seed):
    rng = np.random.default_rng(seed)
    g = ParallelGeometry(np.linspace(0, np.pi, 5, endpoint=False), 6, n_rows=2)

    def build():
        return Projector(g, VolumeGeometry((2, 6, 6), voxel), model=model, backend="cpu")

    A = _call(build, PARALLEL_NAMES)
    if A is None:
        return
    for values, apply, shape in ((x_values, A, A.volume.shape), (y_values, A.T, A.projection_shape)):
        result = _call(lambda: apply(_data(values, shape, rng)), PARALLEL_NAMES)
        if result is not None:
            assert values in ("normal", "int")
            assert np.isfinite(result).all()


@SETTINGS
@given(
    b_values=VALUES,
    x0_values=st.one_of(st.none(), VALUES),
    iterations=SIZE,
    algorithm=st.sampled_from(["sirt", "cgls"]),
    seed=st.integers(0, 2**16),
)
def test_iterative_solvers_work_or_name_the_argument(b_values, x0_values, iterations, algorithm, seed):
    rng = np.random.default_rng(seed)
    g = ParallelGeometry(np.linspace(0, np.pi, 5, endpoint=False), 6)
    A = Projector(g, VolumeGeometry((6, 6)), backend="cpu")
    b = _data(b_values, A.projection_shape, rng)
    x0 = None if x0_values is None else _data(x0_values, A.volume.shape, rng)
    solve = getattr(leveret, algorithm)
    x = _call(lambda: solve(b, A, iterations, x0=x0), PARALLEL_NAMES)
    if x is not None:
        assert b_values in ("normal", "int") and x0_values in (None, "normal", "int")
        assert np.isfinite(x).all()


CONE_NAMES = PARALLEL_NAMES | {"sid", "sdd", "pixel_size", "matrices", "short_scan"}


@SETTINGS
# sid, sdd and pixel_size: invalid values and a plausible set (ConeGeometry
# builds matrices from them, whose own checks speak of "matrices" for extreme
# but valid values).
@given(
    span=st.sampled_from([0.0, 1e-12, np.pi, 2 * np.pi]),
    sid=st.sampled_from([100.0, 0.0, -1.0, np.nan, np.inf]),
    sdd=st.sampled_from([250.0, 0.0, np.nan]),
    pixel=st.sampled_from([1.0, 0.5, 0.0, -1.0, np.nan, np.inf, 1e-300, 1e300]),
    values=VALUES,
    seed=st.integers(0, 2**16),
)
def test_fdk_works_or_names_the_argument(span, sid, sdd, pixel, values, seed):
    rng = np.random.default_rng(seed)

    def run():
        g = ConeGeometry.circular(np.linspace(0, span, 6, endpoint=False), sid, sdd, 4, 6, pixel)
        p = _data(values, g.projection_shape, rng)
        return leveret.fdk(p, g, VolumeGeometry((3, 4, 4)), backend="cpu")

    vol = _call(run, CONE_NAMES)
    if vol is not None:
        assert values in ("normal", "int") and span > 1e-6
        assert np.isfinite(vol).all()


# -- the cases a hostile user found ------------------------------------------------------------------


@pytest.fixture
def small():
    g = ParallelGeometry(np.linspace(0, np.pi, 16, endpoint=False), 16, n_rows=4)
    return g, VolumeGeometry((4, 16, 16)), np.ones(g.projection_shape, np.float32)


@pytest.mark.parametrize(
    "dtype,error,match",
    [
        (complex, ValueError, "x: expected real numbers, got complex dtype"),
        (object, TypeError, "x: expected an array of real numbers, got dtype object"),
    ],
)
def test_projector_refuses_complex_and_object_volumes(small, dtype, error, match):
    g, vg, p = small
    A = Projector(g, vg, backend="cpu")
    with pytest.raises(error, match=match):
        A(np.ones(vg.shape).astype(dtype))
    with pytest.raises(error, match=match.replace("x:", "y:")):
        A.T(p.astype(dtype))


def test_projector_refuses_nan(small):
    g, vg, p = small
    A = Projector(g, vg, backend="cpu")
    with pytest.raises(ValueError, match=r"^x: expected finite values, got 1 NaN value\(s\)"):
        A(np.where(np.arange(vg.size).reshape(vg.shape) == 3, np.nan, 1.0).astype(np.float32))
    with pytest.raises(ValueError, match=r"^y: expected finite values, got 2 Inf value"):
        A.T(np.where(np.arange(p.size).reshape(p.shape) < 2, np.inf, 1.0).astype(np.float32))


@pytest.mark.parametrize("algorithm", ["sirt", "cgls", "os_sart"])
@pytest.mark.parametrize("bad", ["object", "str", "complex"])
def test_iterative_solvers_name_a_bad_projections_or_x0(small, algorithm, bad):
    g, vg, p = small
    A = Projector(g, vg, backend="cpu")
    convert = {
        "object": lambda a: a.astype(object),
        "str": lambda a: a.astype(str),
        "complex": lambda a: a.astype(complex),
    }[bad]
    solve = getattr(leveret, algorithm)
    error = ValueError if bad == "complex" else TypeError
    with pytest.raises(error, match="^projections: "):
        solve(convert(p), A, 2)
    with pytest.raises(error, match="^x0: "):
        solve(p, A, 2, x0=convert(np.zeros(vg.shape, np.float32)))


def test_fbp_into_a_read_only_out_names_out(small):
    g, vg, p = small
    out = np.zeros(vg.shape, np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="^out: expected a writable array"):
        leveret.fbp(p, g, vg, backend="cpu", out=out)


def test_an_underflowing_detector_spacing_names_it(small):
    g, _, _ = small
    with pytest.raises(ValueError, match="^det_spacing: expected a positive number between"):
        ParallelGeometry(g.angles, 16, n_rows=4, det_spacing=1e-300)


def test_values_whose_sums_overflow_float32_are_refused_not_turned_into_nan(small):
    g, _, p = small
    with pytest.raises(ValueError, match=r"^projections: values up to 3e\+38 are too large"):
        leveret.fbp(p * np.float32(3e38), g, backend="cpu")
    # 1e6 is far from the limit and reconstructs finitely.
    assert np.isfinite(leveret.fbp(p * np.float32(1e6), g, backend="cpu")).all()


def test_float64_beyond_float32s_range_is_named_as_such(small):
    g, _, p = small
    with pytest.raises(ValueError, match=r"^projections: values up to 1e\+300 do not fit the float32"):
        leveret.fbp(p.astype(np.float64) * 1e300, g, backend="cpu")


def test_volume_size_does_not_overflow():
    assert VolumeGeometry((2**21, 2**21, 2**22)).size == 2**64


def test_a_volume_larger_than_memory_is_a_value_error_saying_how_much(small, monkeypatch):
    g, _, p = small
    monkeypatch.setattr("leveret.resources.host_available_bytes", lambda: 1 << 30)
    with pytest.raises(ValueError, match=r"^volume: the reconstruction would take 149 GiB but only 1 GiB"):
        leveret.fbp(p, g, VolumeGeometry((4, 100_000, 100_000)), backend="cpu")


def test_an_fdk_volume_larger_than_memory_is_a_value_error_saying_how_much(monkeypatch):
    monkeypatch.setattr("leveret.resources.host_available_bytes", lambda: 1 << 30)
    g = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 8, endpoint=False), 100.0, 200.0, 8, 8, 1.0)
    with pytest.raises(ValueError, match=r"^volume: the reconstruction would take 2 GiB but only 1 GiB"):
        leveret.fdk(np.ones(g.projection_shape, np.float32), g, VolumeGeometry((512, 1024, 1024)), backend="cpu")


def test_projector_ray_tables_are_checked_before_they_are_built(monkeypatch):
    monkeypatch.setattr("leveret.resources.host_available_bytes", lambda: 1 << 20)
    g = ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 64, n_rows=4)  # 46080 rays: 2.1 MiB
    with pytest.raises(ValueError, match=r"^geometry: the CPU ray tables would take 2.11 MiB but only 1 MiB"):
        Projector(g, VolumeGeometry((4, 64, 64)), backend="cpu")


@pytest.mark.parametrize(
    "call", ["radon3d_fbp", "sirt", "project_parallel", "project_2d", "project_cone", "project_radon"]
)
def test_allocations_beyond_memory_are_value_errors_before_any_work(call, monkeypatch):
    """Each of these allocates a result (or the iterations' arrays) in one piece:
    beyond what the process may use, a ValueError names the argument first."""
    from leveret.geometry import RadonGeometry

    d = np.random.default_rng(0).standard_normal((64, 3))
    radon = RadonGeometry(d / np.linalg.norm(d, axis=1, keepdims=True), 128)
    par3 = ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 256, n_rows=16)
    op = Projector(par3, VolumeGeometry((16, 256, 256)), backend="cpu") if call == "sirt" else None
    monkeypatch.setattr("leveret.resources.host_available_bytes", lambda: 1 << 20)
    head = leveret.phantom.shepp_logan_3d()
    calls = {
        "radon3d_fbp": (
            "volume",
            lambda: leveret.radon3d_fbp(
                np.zeros((64, 128), np.float32), radon, VolumeGeometry((128, 128, 128)), backend="cpu"
            ),
        ),
        "sirt": ("projector", lambda: leveret.sirt(np.zeros(par3.projection_shape, np.float32), op, 1)),
        "project_parallel": ("geometry", lambda: head.project(par3)),
        "project_2d": (
            "geometry",
            lambda: leveret.phantom.shepp_logan_ellipses().project(
                ParallelGeometry(np.linspace(0, np.pi, 720, endpoint=False), 512)
            ),
        ),
        "project_cone": (
            "geometry",
            lambda: head.project(
                ConeGeometry.circular(np.linspace(0, 2 * np.pi, 90, endpoint=False), 100.0, 200.0, 64, 64, 1.0)
            ),
        ),
        "project_radon": ("geometry", lambda: head.project_radon(RadonGeometry(radon.directions, 4096))),
    }
    name, run = calls[call]
    with pytest.raises(ValueError, match=f"^{name}: .* would take .* but only 1 MiB"):
        run()


ULIMIT_SCRIPT = """
import resource, sys, time
import numpy as np
import leveret
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIMIT_AS))
from leveret.resources import host_available_bytes
print(host_available_bytes() < 4 << 30)
g = leveret.ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 8)
t0 = time.perf_counter()
try:
    leveret.fbp(np.zeros((8, 8), np.float32), g, leveret.VolumeGeometry((40000, 40000)), backend="cpu")
except ValueError as exc:
    print(str(exc).split(":")[0], time.perf_counter() - t0 < 5)
"""


def test_an_address_space_limit_counts_as_memory_the_process_cannot_use():
    """Under ``ulimit -v`` (RLIMIT_AS) a 6 GiB result fails however much the host
    has free: the check names the argument at once instead of NumPy failing."""
    import subprocess
    import sys

    script = ULIMIT_SCRIPT.replace("resource.RLIMIT_AS))", "resource.getrlimit(resource.RLIMIT_AS)[1]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "volume", "True"], out.stdout + out.stderr


def test_fdk_refuses_views_that_all_look_from_one_direction():
    g = ConeGeometry.circular(np.zeros(8), 100.0, 200.0, 16, 16, 1.0)
    with pytest.raises(ValueError, match="^geometry: all 8 views have the same source position"):
        leveret.fdk(np.ones(g.projection_shape, np.float32), g, VolumeGeometry((8, 8, 8)), backend="cpu")


def test_out_of_core_refuses_complex_projections(tmp_path):
    g = ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 8, n_rows=2)
    with pytest.raises(ValueError, match="^projections: expected real numbers, got dtype complex"):
        leveret.execution.outofcore.reconstruct_to_file(
            np.ones(g.projection_shape, complex), g, tmp_path / "r.npy", backend="cpu"
        )
    assert list(tmp_path.iterdir()) == []


# -- the environment ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout,files,expected",
    [
        (
            "v2",
            {
                "memory.max": "1073741824",
                "memory.current": "268435456",
                "memory.stat": "anon 1\ninactive_file 67108864\n",
            },
            (1 << 30) - (256 << 20) + (64 << 20),
        ),
        ("v2 unlimited", {"memory.max": "max", "memory.current": "5"}, None),
        ("v1", {"memory/memory.limit_in_bytes": "2147483648", "memory/memory.usage_in_bytes": "1073741824"}, 1 << 30),
        (
            "v1 unlimited",
            {"memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "1"},
            None,
        ),
        ("none", {}, None),
    ],
)
def test_the_container_memory_limit_is_read_from_cgroups(tmp_path, layout, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    assert cgroup_available_bytes(str(tmp_path), str(tmp_path / "no-proc-file")) == expected


@pytest.mark.parametrize(
    "proc,files,expected",
    [
        (
            "0::/slurm/job_7\n",
            {
                "slurm/job_7/memory.max": "1073741824",
                "slurm/job_7/memory.current": "0",
                "slurm/memory.max": "4294967296",
                "slurm/memory.current": "0",
            },
            1 << 30,
        ),
        (
            "4:memory:/slurm/job_7\n1:cpu:/x\n",
            {
                "memory/slurm/job_7/memory.limit_in_bytes": "2147483648",
                "memory/slurm/job_7/memory.usage_in_bytes": "1073741824",
                "memory/memory.limit_in_bytes": "9223372036854771712",
            },
            1 << 30,
        ),
    ],
)
def test_a_batch_jobs_own_cgroup_limit_is_found(tmp_path, proc, files, expected):
    """The limit of a job's child cgroup (the parent unlimited or larger) is the one that counts."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    (tmp_path / "proc_cgroup").write_text(proc)
    assert cgroup_available_bytes(str(tmp_path), str(tmp_path / "proc_cgroup")) == expected


def test_the_default_memory_cap_follows_a_container_limit(monkeypatch):
    import leveret.resources as memory

    monkeypatch.setattr(memory, "cgroup_available_bytes", lambda: 123 << 20)
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 64 << 30)
    assert memory.host_available_bytes() == 123 << 20


WORKQUEUE_SCRIPT = """
import threading, numpy as np, leveret, numba
g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 64, n_rows=4)
p = np.ones(g.projection_shape, np.float32)
want = leveret.fbp(p, g, backend="cpu")
assert numba.threading_layer() == "workqueue"
same = []
def run():
    for _ in range(4):
        same.append(bool(np.array_equal(leveret.fbp(p, g, backend="cpu"), want)))
threads = [threading.Thread(target=run) for _ in range(3)]
[t.start() for t in threads]
[t.join() for t in threads]
print(sum(same), len(same))
"""


def test_fbp_from_several_threads_under_the_workqueue_layer_does_not_abort():
    env = dict(
        os.environ, NUMBA_THREADING_LAYER="workqueue", PYTHONPATH=str(Path(leveret.__file__).resolve().parents[1])
    )
    run = subprocess.run([sys.executable, "-c", WORKQUEUE_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["12", "12"]
