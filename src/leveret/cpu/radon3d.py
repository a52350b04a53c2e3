"""3D Radon (plane-integral) back-projection and its exact transpose on the CPU
(Numba, all cores).

Both kernels use the same map from voxel ``[k, j, i]`` to the sample
coordinate of direction q (samples at integers):

    u = i * table[q, 0] + j * table[q, 1] + k * table[q, 2] + table[q, 3]

computed in float64 whatever the data type, and the same linear weights:
with ``i0 = floor(u)`` and ``f = u - i0`` the voxel meets sample ``i0`` with
weight ``1 - f`` and sample ``i0 + 1`` with weight ``f``; samples outside
``[0, n_samples)`` are zero. :func:`backproject` gathers
``sum_q (1 - f) p[q, i0] + f p[q, i0 + 1]`` into each voxel and
:func:`forward` scatters each voxel's value with the same weights, so
``<forward(x), y> = <x, backproject(y)>`` to rounding: a matched pair.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from . import serialized

#: Directions per partial sum in :func:`backproject` (the GPU kernel stages batches of up to 64).
BATCH = 64


@numba.njit(parallel=True, fastmath=False, cache=True)
def _backproject(proj, table, out):
    n_dirs, n_samples = proj.shape
    nz, ny, nx = out.shape
    for task in numba.prange(nz * ny):
        k = task // ny
        j = task % ny
        row = np.zeros(nx, dtype=out.dtype)
        part = np.empty(nx, dtype=out.dtype)
        # Blocked summation (as the GPU kernel's direction batches): the terms
        # are large and cancel to O(1), so one running float32 sum over
        # thousands of directions loses ~1e-5 of the result; sums of
        # BATCH terms added to the total lose ~10x less.
        for q0 in range(0, n_dirs, BATCH):
            part[:] = 0
            for q in range(q0, min(n_dirs, q0 + BATCH)):
                p = proj[q]
                a = table[q, 0]
                base = j * table[q, 1] + k * table[q, 2] + table[q, 3]
                for i in range(nx):
                    u = base + i * a
                    fl = math.floor(u)
                    i0 = int(fl)
                    f = u - fl
                    # Both neighbours on the sampled range is the common case;
                    # the edges blend with the zero outside.
                    if 0 <= i0 and i0 + 1 < n_samples:
                        v0 = p[i0]
                        part[i] += v0 + f * (p[i0 + 1] - v0)
                    else:
                        v0 = p[i0] if 0 <= i0 < n_samples else 0.0
                        v1 = p[i0 + 1] if 0 <= i0 + 1 < n_samples else 0.0
                        part[i] += (1.0 - f) * v0 + f * v1
            for i in range(nx):
                row[i] += part[i]
        out[k, j, :] = row


@numba.njit(parallel=True, fastmath=False, cache=True)
def _forward(vol, table, out):
    nz, ny, nx = vol.shape
    n_dirs, n_samples = out.shape
    # One direction per task: each task owns its output row, so the
    # scatter needs no atomics.
    for q in numba.prange(n_dirs):
        acc = np.zeros(n_samples, dtype=out.dtype)
        a = table[q, 0]
        for k in range(nz):
            for j in range(ny):
                base = j * table[q, 1] + k * table[q, 2] + table[q, 3]
                for i in range(nx):
                    x = vol[k, j, i]
                    if x == 0:
                        continue
                    u = base + i * a
                    fl = math.floor(u)
                    i0 = int(fl)
                    f = u - fl
                    if 0 <= i0 < n_samples:
                        acc[i0] += (1.0 - f) * x
                    if 0 <= i0 + 1 < n_samples:
                        acc[i0 + 1] += f * x
        out[q, :] = acc


def sample_table(directions: np.ndarray, n_samples: int, spacing: float, volume) -> np.ndarray:
    """``(n_dirs, 4)`` float64 coefficients of the voxel-to-sample map (module docstring).

    Parameters
    ----------
    directions : ndarray (n_dirs, 3)
        Unit normals in (x, y, z) order.
    n_samples : int
    spacing : float
        Sample pitch, length units.
    volume : VolumeGeometry
        3D grid ``(nz, ny, nx)``.
    """
    d = np.asarray(directions, np.float64)
    dz, dy, dx = volume.voxel_size
    nz, ny, nx = volume.shape
    cz, cy, cx = volume.center
    # Voxel [k, j, i] is at x0 + i dx etc. with x0 the centre of voxel 0.
    origin = np.array([cx - (nx - 1) / 2 * dx, cy - (ny - 1) / 2 * dy, cz - (nz - 1) / 2 * dz])
    table = np.empty((d.shape[0], 4))
    table[:, 0] = d[:, 0] * dx / spacing
    table[:, 1] = d[:, 1] * dy / spacing
    table[:, 2] = d[:, 2] * dz / spacing
    table[:, 3] = d @ origin / spacing + (n_samples - 1) / 2
    return table


@serialized
def backproject(proj: np.ndarray, table: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Back-project ``proj`` into ``out`` (overwritten): linear interpolation, no weights.

    Parameters
    ----------
    proj : ndarray (n_dirs, n_samples), float32 or float64, C-contiguous
    table : ndarray (n_dirs, 4) float64, from :func:`sample_table`
    out : ndarray (nz, ny, nx), same dtype as ``proj``
    """
    _backproject(proj, np.ascontiguousarray(table, np.float64), out)
    return out


@serialized
def forward(vol: np.ndarray, table: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The transpose of :func:`backproject`: scatter ``vol`` into ``out`` (overwritten).

    Parameters
    ----------
    vol : ndarray (nz, ny, nx), float32 or float64, C-contiguous
    table : ndarray (n_dirs, 4) float64, from :func:`sample_table`
    out : ndarray (n_dirs, n_samples), same dtype as ``vol``
    """
    _forward(vol, np.ascontiguousarray(table, np.float64), out)
    return out
