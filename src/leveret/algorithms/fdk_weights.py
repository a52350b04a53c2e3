"""FDK's per-view preprocessing, shared by circular and helical FDK (and the
live reconstructor): the cosine, angular-step and Parker weights, the ramp
filter at the isocentre's pitch (:class:`FDKWeighting`), the quantities they
need from the matrices (:func:`view_frames`), and the detector rows a volume
projects to (:func:`rows_seen`)."""

from __future__ import annotations

import functools

import numpy as np

from .. import _validate as v
from ..filters import apply_filter, filter_response
from ..geometry import VolumeGeometry


def rows_seen(geometry, volume: VolumeGeometry):
    """Detector rows (start, stop) that the volume's voxels project to in any
    view, with a row of margin for interpolation; None if none."""
    corners = np.array([[x, y, z] for x in volume.extent("x") for y in volume.extent("y") for z in volume.extent("z")])
    # v(x) is a ratio of linear functions with w > 0: over a box its extremes are at corners.
    _, row, _ = geometry.project(corners)
    start = max(0, int(np.floor(row.min())) - 1)
    stop = min(geometry.n_rows, int(np.ceil(row.max())) + 2)
    return (start, stop) if stop > start else None


class FDKWeighting:
    """FDK's per-view pre-processing: cosine weights, angular step x Parker
    weight / isocentre pitch per column, then the ramp along rows.

    ``weighting(raw, views)`` weights ``raw`` (views ``views`` of line
    integrals, NumPy or CuPy, float32 or float64) in place and returns the
    filtered views; back-projecting them with ``frames["normalised"]``
    matrices (1/w^2 weights) gives the FDK volume. ``leveret.rabbitct`` ships
    its synthetic projections prepared by this same object.

    ``angle_weights`` (n_views,), optional: each view's weight in the angular
    integral in place of FDK's own (``0.5 * angular_steps(angle) * turn_scale(angle)``
    on full scans, ``angular_steps(angle)`` times Parker's weights on short
    ones); Parker's weights still apply on short scans. ``leveret.live``
    passes ones and weights the views received so far itself.
    """

    def __init__(
        self,
        geometry,
        *,
        filter: str = "ram-lak",
        cutoff: float = 1.0,
        padding: str = "zero",
        short_scan="auto",
        angle_weights=None,
    ):
        self.geometry = geometry
        self.frames = view_frames(geometry)
        parker = _use_parker(short_scan, self.frames)
        if angle_weights is None:
            self.per_column = _column_weights(geometry, parker)
        else:
            weights = v.finite_vector("angle_weights", angle_weights, length=geometry.n_views)
            self.per_column = (
                _view_weights(self.frames, geometry.n_cols, parker, weights) / self.frames["pitch"][:, None]
            )
        self.response = filter_response(geometry.n_cols, filter, cutoff=cutoff)
        self.padding = padding
        self._gpu_tables: dict = {}  # GPU id -> its copies of the tables

    def __call__(self, raw, views: slice, row0: int = 0):
        """``raw``: views ``views``, detector rows ``row0 .. row0 + len - 1``
        (weighted as in a call with every row)."""
        xp = v.array_module(raw)
        g = self.geometry
        if xp is not np and self.padding == "zero" and raw.dtype == np.float32:
            from ..cuda.fdk_weighting import weight_and_filter  # one fused pass before the FFT

            device = xp.cuda.Device().id
            if device not in self._gpu_tables:  # uploaded once per GPU: a pageable upload waits for the stream
                f = self.frames
                frames = np.stack([f["u0"], f["v0"], 1 / f["focal_u"], 1 / f["focal_v"]], axis=1)
                tables = tuple(xp.asarray(a, np.float32) for a in (frames, self.per_column, self.response))
                xp.cuda.get_current_stream().synchronize()  # complete before other workers' streams read them
                self._gpu_tables[device] = tables
            frames, per_column, response = self._gpu_tables[device]
            return weight_and_filter(raw, frames[views], per_column[views], response, row0)
        raw *= _cosine_weights(self.frames, views, raw.shape[1], g.n_cols, xp, raw.dtype, row0)
        raw *= xp.asarray(self.per_column[views], raw.dtype)[:, None, :]
        return apply_filter(raw, self.response, padding=self.padding)


@functools.lru_cache(maxsize=4)
def _column_weights(geometry, parker: bool) -> np.ndarray:
    """Angular quadrature x Parker weight / isocentre pitch, per view and column
    (cached per geometry: a RabbitCT scan's take 10-20 ms to build)."""
    frames = view_frames(geometry)
    # The ramp at pitch tau is the unit-pitch ramp over tau: 1/tau joins the weights.
    out = _view_weights(frames, geometry.n_cols, parker) / frames["pitch"][:, None]
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=4)
def view_frames(geometry) -> dict:
    """Per-view quantities FDK needs, from the matrices alone.

    focal_u, focal_v : source-detector distance in column / row pixels
    u0, v0 : principal point (pixels)
    source : (n, 3) source positions; axis : (n, 3) unit central-ray directions
    sid : distance from the source to the isocentre (origin) along the axis
    pitch : detector column pitch at the isocentre (length units per pixel)
    angle : rotation angle of each source about z, unwrapped, increasing
            in the direction of rotation; orientation : +1 counter-clockwise
    normalised : matrices scaled so that w = depth along the axis / sid
    """
    K, R, _ = geometry.decompose()
    source = geometry.source_positions()
    sid = geometry.depth(np.zeros(3))
    if np.any(sid <= 0):
        raise ValueError("geometry: the isocentre (origin) must lie in front of every source")
    angle = np.unwrap(rotation_angles(geometry))
    orientation = 1.0 if angle[-1] >= angle[0] else -1.0
    frames = {
        "focal_u": K[:, 0, 0],
        "focal_v": K[:, 1, 1],
        "u0": K[:, 0, 2],
        "v0": K[:, 1, 2],
        "source": source,
        "axis": R[:, 2, :],
        "sid": sid,
        "pitch": sid / K[:, 0, 0],
        "angle": orientation * (angle - angle[0]),
        "orientation": orientation,
        "normalised": geometry.normalised().matrices,
    }
    for value in frames.values():  # cached per geometry (geometries hash by value): read-only
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return frames


def _use_parker(short_scan, frames) -> bool:
    coverage = _coverage(frames["angle"])
    if isinstance(short_scan, str):
        v.choice("short_scan", short_scan, ("auto",))
        return coverage < 2 * np.pi - 1e-6
    if not isinstance(short_scan, (bool, np.bool_)):
        raise ValueError(f"short_scan: expected 'auto', True or False, got {short_scan!r}")
    return bool(short_scan)


def _coverage(angle: np.ndarray) -> float:
    """Angular range the views cover: first to last plus one (median) step."""
    if angle.size == 1:
        return 0.0
    step = np.median(np.abs(np.diff(angle)))
    return float(angle.max() - angle.min() + step)


def rotation_angles(geometry) -> np.ndarray:
    """Each source's rotation angle about z (radians, in (-pi, pi]), as FDK
    measures it: ``arctan2(x, -y)`` of the source position, 0 for a source
    on the -y axis; :func:`view_frames` unwraps them along the views."""
    source = geometry.source_positions()
    return np.arctan2(source[:, 0], -source[:, 1])


def turn_scale(angle: np.ndarray) -> float:
    """FDK's weight for scans of more than one turn.

    Parameters
    ----------
    angle : ndarray (n_views,)
        The views' rotation angles (radians, unwrapped).

    Returns
    -------
    float
        ``2 pi / coverage`` for views covering more than one turn, else 1: a
        scan of k turns measures each line 2 k times, not twice.
    """
    return 2 * np.pi / max(2 * np.pi, _coverage(angle))


def angular_steps(angle: np.ndarray) -> np.ndarray:
    """FDK's angular quadrature weights: each view's share of the angle range.

    Parameters
    ----------
    angle : ndarray (n_views,)
        The views' rotation angles (radians, unwrapped, in any order).

    Returns
    -------
    ndarray (n_views,)
        Half the gap to each neighbour in angle (the first and last views:
        one full gap each; a single view: ``2 pi``).

    Examples
    --------
    >>> from leveret.algorithms.fdk_weights import angular_steps
    >>> angular_steps(np.radians([0.0, 10.0, 30.0])).round(4).tolist()
    [0.1745, 0.2618, 0.3491]
    """
    if angle.size == 1:
        return np.array([2 * np.pi])
    order = np.argsort(angle)
    a = angle[order]
    gaps = np.diff(a)
    share = np.empty_like(a)
    share[1:-1] = 0.5 * (gaps[1:] + gaps[:-1])
    share[0], share[-1] = gaps[0], gaps[-1]  # the ends: one full step each
    out = np.empty_like(share)
    out[order] = share
    return out


def _view_weights(frames, n_cols: int, parker: bool, weights=None) -> np.ndarray:
    """Angular quadrature x Parker weight, per view and detector column
    (``weights``: the quadrature in place of FDK's own)."""
    steps = angular_steps(frames["angle"]) if weights is None else weights
    if not parker:  # full scan: each line twice per turn
        scale = 0.5 * turn_scale(frames["angle"]) if weights is None else 1.0
        return np.repeat((scale * steps)[:, None], n_cols, axis=1)
    # Fan angle of each column, positive in the direction of rotation: the
    # detector's u axis points against the rotation of a counter-clockwise scan.
    u = np.arange(n_cols)[None, :]
    gamma = -frames["orientation"] * np.arctan((u - frames["u0"][:, None]) / frames["focal_u"][:, None])
    beta = frames["angle"][:, None] - frames["angle"].min()
    # Over-scan beyond pi: 2 delta (delta = half fan angle for a minimal short scan).
    two_delta = max(_coverage(frames["angle"]) - np.pi, 1e-9)
    return steps[:, None] * parker_weights(beta, gamma, two_delta / 2)


def parker_weights(beta, gamma, delta):
    """Parker's (1982) short-scan weights for source angle beta in [0, pi + 2 delta]
    and fan angle gamma (radians); the weights of the two measurements of a line
    sum to one."""
    beta, gamma = np.broadcast_arrays(np.asarray(beta, float), np.asarray(gamma, float))
    w = np.ones(beta.shape)
    # Evaluate the ramps only where they apply (most of a scan is flat at 1).
    rise = beta < 2 * delta - 2 * gamma
    w[rise] = np.sin(np.pi / 4 * beta[rise] / (delta - gamma[rise])) ** 2
    fall = beta > np.pi - 2 * gamma
    w[fall] = np.sin(np.pi / 4 * (np.pi + 2 * delta - beta[fall]) / (delta + gamma[fall])) ** 2
    w[beta > np.pi + 2 * delta] = 0.0
    return np.clip(w, 0.0, 1.0)


def _cosine_weights(frames, views: slice, n_rows: int, n_cols: int, xp=np, dtype=np.float64, row0: int = 0):
    """cos of each pixel's ray to the central ray, (views, n_rows, n_cols) for
    detector rows ``row0 .. row0 + n_rows - 1``, on ``xp``."""

    def tangent(start, n, centre, focal):
        return (
            xp.arange(start, start + n, dtype=np.float64)[None, :] - xp.asarray(frames[centre][views])[:, None]
        ) / xp.asarray(frames[focal][views])[:, None]

    # Tangents in float64 (small arrays); the broadcast to a full view in the data's type.
    tan_u2 = (tangent(0, n_cols, "u0", "focal_u") ** 2).astype(dtype)[:, None, :]
    tan_v2 = (tangent(row0, n_rows, "v0", "focal_v") ** 2 + 1.0).astype(dtype)[:, :, None]
    return 1 / xp.sqrt(tan_u2 + tan_v2)
