"""What the benchmarks share: timing, the results table, JSON output, ASTRA calls.

Run as a script, it prints a Markdown table of result files:

    python3 bench/common.py bench/results/h200/*.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

import numpy as np

RESULTS: list[dict] = []


def record(name, seconds, updates, *, peer="leveret", note=""):
    """Add a row to the table (printed at once) and to RESULTS (the JSON)."""
    row = {
        "problem": name,
        "code": peer,
        "seconds": seconds,
        "GU_per_s": updates / seconds / 1e9 if updates else None,
        "note": note,
    }
    RESULTS.append(row)
    gus = f"{row['GU_per_s']:9.1f}" if updates else "        -"
    print(f"{peer:8s} {name:58s} {seconds * 1e3:10.2f} ms {gus} GU/s  {note}", flush=True)


def print_header():
    print(f"{'code':8s} {'problem':58s} {'time':>13s} {'rate':>14s}")


def median_time(fn, reps=5, warmup=1, sync=None):
    """Median wall time of ``fn`` after ``warmup`` calls; ``sync`` waits for the device."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _commit() -> str | None:
    """The repository's commit (None outside a git checkout)."""
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def metadata(with_devices: bool) -> dict:
    """Date, commit, Python, the command (absolute paths cut to their file name) and the GPUs."""
    argv = [os.path.basename(a) if os.path.isabs(a) else a for a in sys.argv[1:]]
    script = os.path.relpath(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else "?"
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "python": platform.python_version(),
        "command": " ".join(["python3", script] + argv),
    }
    if with_devices:
        from leveret.backends import describe

        meta["devices"] = describe()
        gpu = [d for d in meta["devices"] if d.get("available")]
        print("GPU:", gpu[0]["name"] if gpu else "none")
    return meta


def write_results(path, meta: dict) -> None:
    """RESULTS and ``meta`` as JSON, written atomically."""
    from leveret.io import atomic_output

    with atomic_output(path, overwrite=True) as tmp:
        with open(tmp, "w") as fh:
            json.dump({"meta": meta, "results": RESULTS}, fh, indent=1)


def astra_direct_bp3d(proj_geom, vol_geom, proj_shape, vol_shape):
    """Median time of ASTRA's direct_BP3D on device (CuPy) arrays, via GPULink."""
    import astra
    import astra.experimental as ae
    import cupy as cp

    proj = cp.random.random(proj_shape, dtype=cp.float32)  # (rows, views, cols)
    vol = cp.zeros(vol_shape, cp.float32)  # (z, y, x)
    projector = astra.create_projector("cuda3d", proj_geom, vol_geom)
    vol_link = astra.data3d.GPULink(vol.data.ptr, vol_shape[2], vol_shape[1], vol_shape[0], vol_shape[2] * 4)
    proj_link = astra.data3d.GPULink(proj.data.ptr, proj_shape[2], proj_shape[1], proj_shape[0], proj_shape[2] * 4)
    t = median_time(lambda: ae.direct_BP3D(projector, vol_link, proj_link), reps=3, sync=cp.cuda.Device().synchronize)
    astra.projector3d.delete(projector)
    return t


def astra_algorithm3d(name, proj_geom, vol_geom, proj_shape, reps=3):
    """Median time of an ASTRA 3D algorithm (e.g. FDK_CUDA, BP3D_CUDA) from and to
    host (NumPy) arrays, reading the result back each time."""
    import astra

    host = np.random.rand(*proj_shape).astype(np.float32)
    pid = astra.data3d.create("-proj3d", proj_geom, host)
    vid = astra.data3d.create("-vol", vol_geom, 0)
    cfg = astra.astra_dict(name)
    cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
    aid = astra.algorithm.create(cfg)
    t = median_time(lambda: (astra.algorithm.run(aid), astra.data3d.get_shared(vid).sum()), reps=reps)
    astra.algorithm.delete(aid)
    astra.data3d.delete([pid, vid])
    return t


def table(paths) -> str:
    """A Markdown table of the rows of one or more result files (bench_*.py --out)."""
    lines = ["| code | problem | time | rate | note |", "|---|---|---|---|---|"]
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        for row in data.get("results", []):  # bench_live.py's file is one record
            if "seconds" not in row or "code" not in row:  # accuracy rows, the sweep's ratio rows
                continue
            rate = f"{row['GU_per_s']:.1f} GU/s" if row["GU_per_s"] else "-"
            problem = row["problem"].replace("|", "\\|")
            lines.append(f"| {row['code']} | {problem} | {row['seconds'] * 1e3:.2f} ms | {rate} | {row['note']} |")
    return "\n".join(lines)


# -- ASTRA geometries from leveret's (bench_sweep.py, bench_projector.py) -----------------------


def astra_volume_window(vol, roi=None) -> tuple:
    """``astra.create_vol_geom``'s arguments for a leveret VolumeGeometry (3D):
    ``(ny, nx, nz, x0, x1, y0, y1, z0, z1)``, the same voxels in the same world
    window; ``roi=(y0, x0, height, width)`` (pixels of the xy grid) narrows it."""
    nz, ny, nx = vol.shape
    (x0, x1), (y0, y1), (z0, z1) = (vol.extent(a) for a in "xyz")
    if roi is not None:
        r0, c0, h, w = roi
        dx, dy = vol.spacing("x"), vol.spacing("y")
        x0, x1 = x0 + c0 * dx, x0 + (c0 + w) * dx
        y0, y1 = y0 + r0 * dy, y0 + (r0 + h) * dy
        ny, nx = h, w
    return (ny, nx, nz, x0, x1, y0, y1, z0, z1)


def astra_cone_vectors(geometry, pixel_size=None):
    """ASTRA 'cone_vec' rows (n_views, 12) for a leveret ConeGeometry: the inverse of
    ``ConeGeometry.from_astra_vectors`` (``ConeGeometry.to_astra_vectors``)."""
    return geometry.to_astra_vectors(pixel_size=pixel_size)


def astra_vector_pixels(vectors, n_rows, n_cols, points):
    """Where ASTRA's 'cone_vec' views put world points: (column, row) in pixels,
    each ``(n_views, n_points)``, from the vectors alone (the ray from the source
    through the point meets the detector plane; pixel (r, c) sits at
    ``d + (c - (n_cols-1)/2) u + (r - (n_rows-1)/2) v``). A NumPy model of
    ASTRA's geometry, to check a conversion against ``ConeGeometry.project``."""
    vec = np.asarray(vectors, np.float64)
    s, d, u, v = vec[:, 0:3], vec[:, 3:6], vec[:, 6:9], vec[:, 9:12]
    pts = np.asarray(points, np.float64).reshape(-1, 3)
    normal = np.cross(u, v)
    ray = pts[None, :, :] - s[:, None, :]  # (n, k, 3)
    t = np.einsum("ni,ni->n", normal, d - s)[:, None] / np.einsum("ni,nki->nk", normal, ray)
    hit = s[:, None, :] + t[..., None] * ray - d[:, None, :]  # from the detector centre
    # solve hit = a u + b v in the plane (least squares: exact for points in it)
    uu, uv, vv = (np.einsum("ni,ni->n", a, b) for a, b in ((u, u), (u, v), (v, v)))
    hu, hv = np.einsum("nki,ni->nk", hit, u), np.einsum("nki,ni->nk", hit, v)
    det = (uu * vv - uv * uv)[:, None]
    a = (hu * vv[:, None] - hv * uv[:, None]) / det
    b = (hv * uu[:, None] - hu * uv[:, None]) / det
    return a + (n_cols - 1) / 2, b + (n_rows - 1) / 2


def astra_cone_geometry(geometry, vol, pixel_size=None):
    """(proj_geom, vol_geom) of ASTRA for a leveret cone scan and volume."""
    import astra

    n_views, n_rows, n_cols = geometry.projection_shape
    pg = astra.create_proj_geom("cone_vec", n_rows, n_cols, astra_cone_vectors(geometry, pixel_size))
    return pg, astra.create_vol_geom(*astra_volume_window(vol))


if __name__ == "__main__":
    print(table(sys.argv[1:]))
