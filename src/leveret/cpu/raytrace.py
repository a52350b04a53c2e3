"""Ray-driven projection and its exact transpose on the CPU (Numba, all cores).

One generic tracer for every geometry: a ray is a point ``o`` and a unit
direction ``d`` in world coordinates (x, y, z), and the line ``o + t d`` is
followed for ``t >= t_start`` (``-inf`` for parallel beams, whose rays are
whole lines; ``0`` for cone beams, whose rays start at the source). ``t`` is a
world length, so every weight below is a length and a volume of ones projects
to chord lengths.

The volume is always 3D ``(nz, ny, nx)``, C order, x fastest; a 2D image is
passed as one slice of thickness 1 centred on z = 0 with rays in that plane
(``leveret.operators.projector`` does this), so both paths share the code.

Models (``model`` argument of the kernels):

0, Siddon (Jacobs' incremental form): the weight of voxel v for a ray is the
   exact length of the ray inside v. The ray is clipped to the grid box, then
   stepped from face crossing to face crossing, one axis at a time, by the
   smallest of the three next-crossing parameters.
1, Joseph: the axis along which the ray moves fastest in voxel units (the
   dominant axis) is sampled at every voxel-centre plane; in each plane the
   volume is interpolated bilinearly in the other two axes (zero outside the
   grid). Each sample is weighted by the world length of the ray between two
   such planes, ``voxel_size_main / |d_main|``, so that a constant volume of
   value 1 gives the chord length up to the half-voxel ends.

Forward: ``y[r] = sum_v w[r, v] x[v]``. Transpose: ``x[v] += w[r, v] y[r]``
over the same traversal, by the same per-ray function (``adjoint=True``), so
the pair is matched to rounding. The forward kernel runs rays in parallel
(each writes only its own output). The transpose needs no atomics: the rays
are cut into ``n_buffers`` contiguous blocks, each block accumulates into its
own private volume, and the private volumes are summed afterwards; memory is
``n_buffers`` extra volumes (the caller picks ``n_buffers``, normally the
thread count).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from . import serialized

SIDDON = 0
JOSEPH = 1


@numba.njit(cache=True)
def _siddon(vol, px, py, pz, dx, dy, dz, t_start, adjoint, value):
    """Siddon/Jacobs along one ray in index space.

    ``(px, py, pz)`` is the ray point at t = 0 in voxel units from the grid's
    low corner (voxel i spans [i, i+1)); ``(dx, dy, dz)`` the change of those
    coordinates per world length. Returns the line integral (forward) or adds
    ``w * value`` into ``vol`` (adjoint) and returns 0.
    """
    nz, ny, nx = vol.shape
    n = (nx, ny, nz)
    p = (px, py, pz)
    d = (dx, dy, dz)
    t_in = t_start
    t_out = np.inf
    for a in range(3):
        if d[a] == 0.0:
            # Parallel to these faces: inside iff within [0, n) (half open, so a
            # ray on a shared face belongs to exactly one voxel layer).
            if not (0.0 <= p[a] < n[a]):
                return 0.0
        else:
            t0 = -p[a] / d[a]
            t1 = (n[a] - p[a]) / d[a]
            t_in = max(t_in, min(t0, t1))
            t_out = min(t_out, max(t0, t1))
    if not (t_in < t_out):
        return 0.0
    idx = np.empty(3, np.int64)
    step = np.empty(3, np.int64)
    t_next = np.empty(3)
    dt = np.empty(3)
    for a in range(3):
        pos = p[a] + t_in * d[a]
        if d[a] > 0.0:
            i = int(math.floor(pos))
            step[a] = 1
        elif d[a] < 0.0:
            # Moving down, a position on a face belongs to the voxel below it.
            i = int(math.ceil(pos)) - 1
            step[a] = -1
        else:
            i = int(math.floor(pos))
            step[a] = 0
        i = min(max(i, 0), n[a] - 1)  # rounding at the entry face
        idx[a] = i
        if d[a] > 0.0:
            t_next[a] = (i + 1 - p[a]) / d[a]
            dt[a] = 1.0 / d[a]
        elif d[a] < 0.0:
            t_next[a] = (i - p[a]) / d[a]
            dt[a] = -1.0 / d[a]
        else:
            t_next[a] = np.inf
            dt[a] = np.inf
    acc = 0.0
    t = t_in
    while t < t_out:
        a = 0
        if t_next[1] < t_next[a]:
            a = 1
        if t_next[2] < t_next[a]:
            a = 2
        tn = min(t_next[a], t_out)
        w = tn - t
        if w > 0.0:
            if adjoint:
                vol[idx[2], idx[1], idx[0]] += w * value
            else:
                acc += w * vol[idx[2], idx[1], idx[0]]
        t = tn
        idx[a] += step[a]
        if idx[a] < 0 or idx[a] >= n[a]:
            break
        t_next[a] += dt[a]
    return acc


@numba.njit(cache=True)
def _joseph(vol, px, py, pz, dx, dy, dz, t_start, adjoint, value):
    """Joseph along one ray; arguments as :func:`_siddon` but ``p`` is in
    voxel-centre units (voxel i centred at i)."""
    nz, ny, nx = vol.shape
    n = (nx, ny, nz)
    p = (px, py, pz)
    d = (dx, dy, dz)
    m = 0
    if abs(d[1]) > abs(d[m]):
        m = 1
    if abs(d[2]) > abs(d[m]):
        m = 2
    u = 1 if m == 0 else 0
    v = 3 - m - u
    w = 1.0 / abs(d[m])  # world length between consecutive centre planes
    idx = np.empty(3, np.int64)
    acc = 0.0
    for s in range(n[m]):
        t = (s - p[m]) / d[m]
        if t < t_start:
            continue
        fu = p[u] + t * d[u]
        fv = p[v] + t * d[v]
        if not (-1.0 < fu < n[u]) or not (-1.0 < fv < n[v]):
            continue
        iu = int(math.floor(fu))
        iv = int(math.floor(fv))
        au = fu - iu
        av = fv - iv
        idx[m] = s
        for cu in range(2):
            ju = iu + cu
            if ju < 0 or ju >= n[u]:
                continue
            wu = au if cu == 1 else 1.0 - au
            for cv in range(2):
                jv = iv + cv
                if jv < 0 or jv >= n[v]:
                    continue
                wuv = wu * (av if cv == 1 else 1.0 - av) * w
                if wuv == 0.0:
                    continue
                idx[u] = ju
                idx[v] = jv
                if adjoint:
                    vol[idx[2], idx[1], idx[0]] += wuv * value
                else:
                    acc += wuv * vol[idx[2], idx[1], idx[0]]
    return acc


@numba.njit(cache=True)
def _ray(vol, origins, directions, r, offset, scale, t_start, model, adjoint, value):
    px = (origins[r, 0] - offset[0]) * scale[0]
    py = (origins[r, 1] - offset[1]) * scale[1]
    pz = (origins[r, 2] - offset[2]) * scale[2]
    dx = directions[r, 0] * scale[0]
    dy = directions[r, 1] * scale[1]
    dz = directions[r, 2] * scale[2]
    if model == SIDDON:
        return _siddon(vol, px, py, pz, dx, dy, dz, t_start, adjoint, value)
    # Joseph works in centre units: voxel i's centre is half a voxel above its low face.
    return _joseph(vol, px - 0.5, py - 0.5, pz - 0.5, dx, dy, dz, t_start, adjoint, value)


@numba.njit(parallel=True, cache=True)
def _forward(vol, origins, directions, offset, scale, t_start, model, out):
    for r in numba.prange(origins.shape[0]):
        out[r] = _ray(vol, origins, directions, r, offset, scale, t_start, model, False, 0.0)


@numba.njit(parallel=True, cache=True)
def _adjoint(y, origins, directions, offset, scale, t_start, model, buffers):
    n_buf = buffers.shape[0]
    n_rays = origins.shape[0]
    for b in numba.prange(n_buf):
        # Contiguous blocks: neighbouring rays (same view) touch neighbouring
        # voxels, which keeps each private volume's working set small.
        lo = b * n_rays // n_buf
        hi = (b + 1) * n_rays // n_buf
        buf = buffers[b]
        for r in range(lo, hi):
            if y[r] != 0.0:
                _ray(buf, origins, directions, r, offset, scale, t_start, model, True, y[r])


@serialized
def forward(volume, origins, directions, offset, scale, t_start, model, out):
    """Line integrals of ``volume`` (nz, ny, nx) along every ray into ``out`` (n_rays,).

    Parameters
    ----------
    volume : ndarray (nz, ny, nx), float32 or float64, C-contiguous
    origins, directions : ndarray (n_rays, 3) float64
        A point and a unit direction per ray, world (x, y, z).
    offset : ndarray (3,) float64
        World (x, y, z) of the grid's low corner (outer voxel faces).
    scale : ndarray (3,) float64
        1 / voxel size along (x, y, z).
    t_start : float
        Rays start at ``origin + t_start * direction`` (``-inf``: whole lines).
    model : int
        ``SIDDON`` or ``JOSEPH``.
    out : ndarray (n_rays,), same dtype as ``volume``
    """
    _forward(volume, origins, directions, offset, scale, float(t_start), int(model), out)
    return out


@serialized
def adjoint(values, origins, directions, offset, scale, t_start, model, out, n_buffers):
    """Exact transpose of :func:`forward`: ``out`` (nz, ny, nx) = A^T ``values`` (n_rays,).

    ``n_buffers`` private volumes (of ``out``'s dtype) are allocated and summed
    into ``out``, which is overwritten.
    """
    n_buffers = max(1, min(int(n_buffers), values.shape[0]))
    buffers = np.zeros((n_buffers,) + out.shape, dtype=out.dtype)
    _adjoint(values, origins, directions, offset, scale, float(t_start), int(model), buffers)
    np.sum(buffers, axis=0, out=out)
    return out
