"""Does a scan's data agree with its geometry? Cheap checks on a few detector rows
that catch a user's mistakes before they become a volume.

:func:`check_consistency` reads a band of middle detector rows and asks:

- **values**: are the projections what the preprocessing assumes? Raw detector
  counts and transmissions are brightest outside the sample (air), line
  integrals darkest there; -log needs transmissions (at most about 1); a flat
  field must be about as bright as the air in the projections.
- **mass** (the Helgason-Ludwig condition of order 0): the sum of a parallel
  projection row over the detector, ``m0(t) = sum_s p(t, s)``, is the mass of
  the slice, the same at every angle. Detector axes swapped (rows for columns)
  break it.
- **angles** (order 1, and mirrored views): the centroid of a projection row,
  ``m1(t) / m0(t)`` with ``m1(t) = sum_s s p(t, s)``, is the projection of the
  slice's centre of mass, ``a + b cos t + c sin t`` as a function of the true
  angle t (``a``: the axis' offset). And views half a turn apart mirror each
  other about the axis, ``p(t + pi, s) = p(t, -s)``. Wrong angles (a
  180-degree scan read as 360, degrees read as radians) break both; then the
  angles scaled by 1/2, 2, pi/180 or 180/pi are tried, to name the likely
  mistake.
- **center**: the shift that best lines up the mirrored views places the
  rotation axis; a geometry whose ``center`` lies far from it is reported.

Each problem found is a :class:`Finding` naming the argument at fault, the
likely cause and the fix; nothing is changed. A check that has too little to
go on (a round object centred on the axis, no views half a turn apart, too few
views, data that are constant) stays silent.

References: Helgason (1965) and Ludwig (1966) for the moment conditions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validate import array_module, choice
from ..io.bands import read_rows
from ._common import check_real, to_numpy

CHECKS = ("values", "mass", "angles", "center")

#: Detector rows read by default (the middle ones): enough to average noise down, few enough to be cheap.
CHECK_ROWS = 4

#: Outermost share of the columns on each side taken as "outside the sample" (at least 2 columns).
EDGE_SHARE = 0.05
#: Where the edges' median lies between the 1st and 99th percentiles of the values: above
#: BRIGHT_EDGES the air is bright (counts, transmissions), below DARK_EDGES it is dark (line integrals).
BRIGHT_EDGES = 0.6
DARK_EDGES = 0.3
#: Transmissions above this (the 99th percentile) are not transmissions: noise reaches a few
#: percent beyond 1, raw counts go to hundreds and more.
MAX_TRANSMISSION = 1.5
#: Raw counts: bright edges at least this high (line integrals of real samples stay below ~10).
COUNTS_LEVEL = 20.0
#: Flat-corrected projections whose 99th percentile stays below this share of the flat are not
#: raw counts of this detector (the air would be near 1).
MIN_FLAT_SHARE = 0.1

#: Relative variation (standard deviation / mean) of a row's sum over the views beyond which the
#: data break the order-0 moment condition. Measured: at most 0.008 on the bundled scan and a
#: simulated tooth with 1 % beam drift; 0.14 and 0.23 with their detector axes swapped.
MASS_VARIATION = 0.05

#: The centroid fit: its residual must exceed this many noise levels (the noise measured by
#: second differences along the views) and this share of the centroid's spread to fail.
#: Measured: 0.9 to 1.4 noise levels on correct scans, 15 and more with wrong angles.
MOMENT_NOISE = 5.0
MOMENT_SHARE = 0.1
#: Views fewer than this give no moment verdict.
MIN_VIEWS = 8

#: Mirrored views: the mismatch at the best shift, in units of the difference between neighbouring
#: views (scaled for the interpolation's noise) plus MIRROR_FLOOR times the row's contrast, beyond
#: which the views half a turn apart do not mirror each other. Measured: 0.16 to 0.36 on the
#: bundled scan and the simulated tooth-like scans, 3.5 to 14 with wrong angles.
MIRROR_LIMIT = 3.0
MIRROR_FLOOR = 0.02
#: A partner view is interpolated from views at most this many angular steps from the mirrored angle.
MIRROR_REACH = 1.5
#: Most mirrored comparisons made (evenly chosen).
MAX_MIRRORS = 16
#: Gaussian smoothing (pixels) of the rows before mirrored views are compared.
MIRROR_SMOOTHING = 1.0
#: Least share of the columns that must overlap after a shift for a comparison to count.
MIN_OVERLAP = 0.25

#: The axis the mirrored views place must be this far (pixels) from the geometry's centre, and fit
#: clearly better than it, for a finding.
CENTER_TOLERANCE = 2.0

#: Angle scalings tried when the angles do not fit: (factor, what it means).
ALTERNATIVES = ((0.5, "half"), (2.0, "double"), (math.pi / 180, "degrees"), (180 / math.pi, "radians"))


@dataclass(frozen=True)
class Finding:
    """One disagreement between a scan's data and its geometry.

    Attributes
    ----------
    check : str
        Which check found it: "counts", "transmission", "log-of-counts",
        "log-of-line-integrals", "normalised" (values), "mass", "angles", "center".
    argument : str
        The argument of the library call at fault (``flats``, ``log_transform``,
        ``projections``, ``angles``, ``center``).
    flag : str
        The ``leveret`` command-line flag at fault (``--flat/--dark``,
        ``--minus-log``, ``input``, ``--angles``, ``--angle-unit``, ``--center``).
    message : str
        What the data show and the likely cause.
    fix : str
        What to change in a library call.
    cli_fix : str
        What to change on the command line.
    value, limit : float
        The measured statistic and the threshold it passed.
    suggestion : float or None
        A value that fits the data: the centre the mirrored views place, or
        the factor the angles fit when multiplied by.
    """

    check: str
    argument: str
    flag: str
    message: str
    fix: str
    cli_fix: str
    value: float
    limit: float
    suggestion: float | None = None

    def __str__(self) -> str:
        return f"{self.argument}: {self.message}; {self.fix}"

    def cli_message(self) -> str:
        """The finding as the command line says it: the flag, the cause, the flag that fixes it."""
        return f"{self.flag}: {self.message}; {self.cli_fix}"


def check_consistency(
    projections, geometry, *, flats=None, darks=None, log_transform: bool = False, rows=None, checks=CHECKS
) -> list[Finding]:
    """Check a parallel-beam scan's data against its geometry, cheaply; say what disagrees.

    Reads only the detector rows ``rows`` of ``projections`` (a lazy reader's
    array reads nothing else, on a thread per core: :func:`leveret.io.bands.read_rows`)
    and runs the checks in the module docstring: the values against the
    preprocessing asked for, then, on line integrals, the
    Helgason-Ludwig moment conditions of order 0 and 1 and the agreement of
    views half a turn apart against the angles and the centre. Measured on two
    CPU cores, after reading the rows: 0.1 to 0.2 s for the 4 default rows of
    1800 views of 2048 columns (raw counts with flats; most of it their
    normalisation; trying the angles' alternatives when they fail doubles it).

    Parameters
    ----------
    projections : array, (n_angles, n_rows, n_cols) or a sinogram (n_angles, n_cols)
        The data as given to the reconstruction: raw counts with ``flats`` and
        ``darks``, transmissions with ``log_transform``, else line integrals.
        NumPy, CuPy (the rows are copied to the host) or any lazy array with
        ``shape`` and NumPy indexing (:func:`leveret.io.open_array`).
    geometry : ParallelGeometry
        The scan's geometry: angles in radians, ``center`` in column pixels.
    flats, darks : array, optional
        Flat and dark fields for the whole detector, ``(n_rows, n_cols)`` or a
        stack ``(k, n_rows, n_cols)`` (for a sinogram ``(n_cols,)`` or
        ``(k, n_cols)``), as :func:`normalize` takes them.
    log_transform : bool
        Without flats: the data are transmissions whose ``-log`` is taken.
    rows : (int, int), optional
        The detector rows ``r0:r1`` to read; default the ``CHECK_ROWS`` middle ones.
    checks : sequence of str
        Which checks to run, of ``CHECKS``: "values", "mass", "angles",
        "center". Leave out "center" when the centre is not known yet (it is
        to be estimated).

    Returns
    -------
    list of Finding
        Empty when the data agree with the geometry (or the checks cannot
        tell). Once the values show that the data are not what the
        preprocessing expects, the geometry is not checked.

    Raises
    ------
    TypeError
        Naming ``geometry`` when it is not a ParallelGeometry.
    ValueError
        Naming ``projections``, ``rows``, ``checks``, ``flats`` or ``darks``
        on shapes that do not match the geometry.

    Examples
    --------
    >>> import numpy as np, leveret
    >>> from leveret.preprocess import check_consistency
    >>> g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 64, n_rows=4)
    >>> lines = leveret.phantom.ball(12.0, center=(8.0, 3.0, 0.0)).project(g)
    >>> check_consistency(lines, g)
    []
    >>> wrong = g.replace(angles=2 * g.angles)              # a 180-degree scan called 360
    >>> [f.check for f in check_consistency(lines, wrong)]
    ['angles']
    """
    from ..geometry import ParallelGeometry

    if not isinstance(geometry, ParallelGeometry):
        raise TypeError(f"geometry: expected a ParallelGeometry, got {type(geometry).__name__}")
    checks = tuple(choice("checks", c, CHECKS) for c in ((checks,) if isinstance(checks, str) else checks))
    shape = tuple(projections.shape)
    if shape != geometry.projection_shape:
        raise ValueError(f"projections: expected shape {geometry.projection_shape} (the geometry's), got {shape}")
    raw, r0, r1 = _band(projections, rows)
    check_real("projections", raw)
    flat, dark = (None if images is None else _field_rows(to_numpy(images), shape, r0, r1) for images in (flats, darks))
    if (flat is None) != (dark is None):
        raise ValueError("flats: give flats and darks together, or neither")
    if raw.dtype.kind == "f" and not np.isfinite(raw).all():
        return []  # not finite: the reconstruction's own checks say so
    transmission = None
    if flat is not None:
        from .flatfield import normalize

        transmission = normalize(raw, flat, dark, require_valid=False)
    findings = _check_values(raw, transmission, log_transform) if "values" in checks else []
    if findings:
        return findings
    lines = _line_integrals(raw, transmission, log_transform)
    sino = lines.mean(axis=1, dtype=np.float64)  # the rows share the axis: average them
    if not np.isfinite(sino).all():
        return findings
    if "mass" in checks:
        findings += _check_mass(sino)
    if findings:
        return findings
    angles = geometry.angles
    shifts = np.zeros(angles.size) if geometry.axis_shift is None else geometry.axis_shift
    rows = _Rows(sino)
    verdict = _angles_verdict(rows, angles, geometry.center, shifts)
    if "angles" in checks and verdict.failed:
        findings.append(_angle_finding(rows, angles, geometry.center, shifts, verdict))
    elif "center" in checks:
        findings += _check_center(verdict, geometry.center)
    return findings


def _field_rows(images: np.ndarray, shape: tuple, r0: int, r1: int) -> np.ndarray:
    """Flats or darks for the rows read: a stack (k, 1, n_cols) for a sinogram, else rows r0:r1."""
    if len(shape) == 2:
        return images.reshape(-1, 1, shape[-1]) if images.size % shape[-1] == 0 else images
    return images[..., r0:r1, :] if images.ndim >= 2 else images


def _band(projections, rows):
    """The rows ``r0:r1`` of ``projections`` as a NumPy array (n_angles, r1 - r0, n_cols)
    (a sinogram: (n_angles, 1, n_cols)), read from a lazy array or copied from the GPU."""
    shape = tuple(projections.shape)
    if len(shape) == 2:
        return np.asarray(to_numpy(projections[:, :]))[:, None, :], 0, 1
    if len(shape) != 3:
        raise ValueError(f"projections: expected (n_angles, n_rows, n_cols) or (n_angles, n_cols), got shape {shape}")
    n_rows = shape[1]
    if rows is None:
        r0 = max(0, n_rows // 2 - CHECK_ROWS // 2)
        r1 = min(n_rows, r0 + CHECK_ROWS)
    else:
        try:
            r0, r1 = (int(r) for r in rows)
        except (TypeError, ValueError):
            raise ValueError(f"rows: expected (first, stop) detector rows, got {rows!r}") from None
        if not 0 <= r0 < r1 <= n_rows:
            raise ValueError(f"rows: expected 0 <= first < stop <= {n_rows}, got {rows!r}")
    if array_module(projections) is not np:  # CuPy: its rows copied to the host
        return np.asarray(to_numpy(projections[:, r0:r1, :])), r0, r1
    return read_rows(projections, (r0, r1)), r0, r1  # a lazy stack's rows on threads


# -- values ---------------------------------------------------------------------------------------

#: Values the percentiles of the value checks are taken from (evenly spaced among all).
VALUE_SAMPLES = 1 << 18


def _sample(values: np.ndarray) -> np.ndarray:
    flat = values.reshape(-1)
    return flat[:: max(1, flat.size // VALUE_SAMPLES)].astype(np.float64)


def _edges(data: np.ndarray) -> np.ndarray:
    """The outermost EDGE_SHARE of the columns on each side (at least 2), all views and rows."""
    n = data.shape[-1]
    w = max(2, int(round(EDGE_SHARE * n)))
    if 2 * w >= n:
        return data
    return np.concatenate([data[..., :w], data[..., -w:]], axis=-1)


def _edge_position(data: np.ndarray) -> tuple[float, float, float, float]:
    """(position, edge, low, high): the edges' median between the 1st and 99th percentiles."""
    lo, hi = np.percentile(_sample(data), [1, 99])
    edge = float(np.median(_sample(_edges(data))))
    position = (edge - lo) / (hi - lo) if hi > lo else math.nan
    return float(position), edge, float(lo), float(hi)


def _check_values(raw, transmission, log_transform) -> list[Finding]:
    position, edge, lo, hi = _edge_position(raw)
    if not math.isfinite(position):
        return []  # constant rows: nothing to tell
    span = f"{lo:.3g} to {hi:.3g}"
    if transmission is not None:
        share = float(np.percentile(_sample(transmission), 99))
        if share < MIN_FLAT_SHARE:
            return [
                Finding(
                    "normalised",
                    "flats",
                    "--flat/--dark",
                    f"the projections (values {span}) reach at most {max(share, 0):.1%} of the flat "
                    "field (above the dark), where the air outside a sample reaches about 100%: they "
                    "are probably already "
                    "normalised or line integrals, not raw counts of this detector",
                    "leave out flats and darks for line integrals",
                    "leave out --flat and --dark for line integrals",
                    share,
                    MIN_FLAT_SHARE,
                )
            ]
        return []
    if log_transform:
        if position < DARK_EDGES:
            return [
                Finding(
                    "log-of-line-integrals",
                    "log_transform",
                    "--minus-log",
                    f"the projections (values {span}) are darkest outside the sample, as line "
                    "integrals are; transmissions are brightest there",
                    "leave out log_transform for line integrals",
                    "leave out --minus-log for line integrals",
                    position,
                    DARK_EDGES,
                )
            ]
        if hi > MAX_TRANSMISSION:
            return [
                Finding(
                    "log-of-counts",
                    "log_transform",
                    "--minus-log",
                    f"the projections hold values up to {hi:.5g}, not transmissions (at most about 1): "
                    "they look like raw detector counts, whose -log is not a line integral",
                    "normalise raw counts with flats and darks instead",
                    "give --flat and --dark instead of --minus-log for raw counts",
                    hi,
                    MAX_TRANSMISSION,
                )
            ]
        return []
    if position > BRIGHT_EDGES and lo >= -0.01 * abs(hi):
        if edge >= COUNTS_LEVEL:
            return [
                Finding(
                    "counts",
                    "flats",
                    "--flat/--dark",
                    f"the projections look like raw detector counts (values {span}, brightest outside "
                    "the sample), but they are reconstructed as line integrals",
                    "normalise them with flats and darks (leveret.preprocess.normalize, minus_log)",
                    "give --flat and --dark (or --minus-log if they are transmissions)",
                    edge,
                    COUNTS_LEVEL,
                )
            ]
        if hi <= MAX_TRANSMISSION:
            return [
                Finding(
                    "transmission",
                    "log_transform",
                    "--minus-log",
                    f"the projections look like transmissions (values {span}, brightest outside the "
                    "sample), but they are reconstructed as line integrals",
                    "take their -log first (log_transform=True, or leveret.preprocess.minus_log)",
                    "give --minus-log (or --flat and --dark if they are raw counts)",
                    position,
                    BRIGHT_EDGES,
                )
            ]
    return []


def _line_integrals(raw, transmission, log_transform) -> np.ndarray:
    from .flatfield import minus_log

    if transmission is not None:
        return minus_log(transmission, out=transmission)
    return minus_log(raw) if log_transform else raw


# -- mass (order 0) -------------------------------------------------------------------------------


def _check_mass(sino: np.ndarray) -> list[Finding]:
    if sino.shape[0] < MIN_VIEWS:
        return []
    mass = sino.sum(axis=1)
    scale = float(np.abs(sino).sum(axis=1).mean())
    if not scale > 0:
        return []
    variation = float(mass.std() / scale)
    if variation <= MASS_VARIATION:
        return []
    return [
        Finding(
            "mass",
            "projections",
            "input",
            f"the sum of a projection row over the detector varies by {variation:.0%} between the views, "
            "while a consistent parallel-beam scan keeps it constant (the slice's mass): the detector "
            "axes are probably swapped (rows for columns), or the sample reaches out of the field of view",
            "give projections as (n_angles, n_rows, n_cols), rows along the rotation axis",
            "store the projections as (n_angles, n_rows, n_cols), rows along the rotation axis (transpose each image)",
            variation,
            MASS_VARIATION,
        )
    ]


# -- angles (order 1, mirrored views) -------------------------------------------------------------


@dataclass
class _Verdict:
    """What the moments and the mirrored views say about a set of angles."""

    moment: float | None  # centroid fit residual in noise levels (None: no verdict)
    moment_failed: bool
    mirror: float | None  # mirror mismatch statistic (None: no mirrored views)
    mirror_failed: bool
    axis: float | None = None  # the axis the mirrored views place (pixels)
    axis_gain: float = 1.0  # mismatch at the given centre / at the best shift

    @property
    def failed(self) -> bool:
        return self.moment_failed or self.mirror_failed

    @property
    def informative(self) -> bool:
        return self.moment is not None or self.mirror is not None


class _Rows:
    """The averaged sinogram and what the angle checks take from it whatever the angles are:
    the centroid per view with its noise and spread, and the smoothed views, made as needed."""

    def __init__(self, sino: np.ndarray):
        self.sino = sino
        n_angles, n_cols = sino.shape
        self.centroid = None
        mass = sino.sum(axis=1)
        scale = float(np.abs(sino).sum(axis=1).mean())
        if n_angles >= MIN_VIEWS and scale > 0 and np.abs(mass).min() >= 0.1 * scale:
            s = np.arange(n_cols) - (n_cols - 1) / 2
            self.centroid = sino @ s / mass
            # white noise: the variance of a second difference is 6 times the variance
            self.noise = float(np.diff(self.centroid, 2).std() / math.sqrt(6))
            self.spread = float(self.centroid.std())
        self._smooth: dict[int, np.ndarray] = {}

    def smooth(self, j: int) -> np.ndarray:
        from scipy.ndimage import gaussian_filter1d

        if j not in self._smooth:
            self._smooth[j] = gaussian_filter1d(self.sino[j], MIRROR_SMOOTHING)
        return self._smooth[j]


def _angles_verdict(rows: _Rows, angles, center, shifts) -> _Verdict:
    moment, moment_failed = _centroid_fit(rows, angles, shifts)
    mirror, mirror_failed, axis, gain = _mirrors(rows, angles, center, shifts)
    return _Verdict(moment, moment_failed, mirror, mirror_failed, axis, gain)


def _centroid_fit(rows: _Rows, angles, shifts) -> tuple[float | None, bool]:
    """The residual of ``centroid(t) = a + b cos t + c sin t`` in noise levels, and whether it fails
    (the centroids taken relative to each view's axis shift)."""
    if rows.centroid is None:
        return None, False
    floor = 1e-9 * rows.sino.shape[1]
    if rows.spread <= max(MOMENT_NOISE * rows.noise, floor):
        return None, False  # the centroid does not move measurably: no verdict
    centroid = rows.centroid - shifts
    basis = np.stack([np.ones_like(angles), np.cos(angles), np.sin(angles)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, centroid, rcond=None)
    residual = float((centroid - basis @ coef).std())
    level = residual / max(rows.noise, floor)
    return level, bool(level > MOMENT_NOISE and residual > MOMENT_SHARE * rows.spread)


def _partners(angles: np.ndarray):
    """Up to MAX_MIRRORS views (evenly chosen) whose mirrored angle ``t - pi`` lies within
    MIRROR_REACH steps of other views: (j, i1, w1, i2, w2) with ``w1 p[i1] + w2 p[i2]`` the
    linear estimate of the view at ``t_j - pi``."""
    folded = np.mod(angles, 2 * np.pi)
    order = np.argsort(folded, kind="stable")
    f = folded[order]
    gaps = np.diff(np.concatenate([f, [f[0] + 2 * np.pi]]))
    real = gaps[gaps > 1e-9]
    if real.size < 2:
        return []
    step = float(np.median(real))
    ext = np.concatenate([f[-2:] - 2 * np.pi, f, f[:2] + 2 * np.pi])  # wrapped around the circle
    ext_index = np.concatenate([order[-2:], order, order[:2]])
    targets = np.mod(angles - np.pi, 2 * np.pi)
    k = np.searchsorted(ext, targets)
    nearest = np.minimum(np.abs(ext[k] - targets), np.abs(ext[k - 1] - targets))
    views = np.flatnonzero(nearest <= MIRROR_REACH * step)
    if views.size > MAX_MIRRORS:
        views = views[np.unique(np.linspace(0, views.size - 1, MAX_MIRRORS).round().astype(int))]
    out = []
    for j in views:
        phi, c = targets[j], int(k[j])
        near = sorted(
            (c for c in (c - 2, c - 1, c, c + 1) if 0 <= c < ext.size and ext_index[c] != j),
            key=lambda c: abs(ext[c] - phi),
        )
        c1 = near[0]
        if abs(ext[c1] - phi) <= 1e-6 * step or len(near) < 2:
            out.append((int(j), int(ext_index[c1]), 1.0, int(ext_index[c1]), 0.0))
            continue
        # the second view: on the other side if there is one close by, else the next on the same side
        close = [c for c in near[1:] if abs(ext[c] - ext[c1]) > 1e-6 * step and abs(ext[c] - phi) <= 2.5 * step]
        other = [c for c in close if (ext[c] - phi) * (ext[c1] - phi) < 0]
        if not close:
            continue
        c2 = (other or close)[0]
        d1, d2 = ext[c1] - phi, ext[c2] - phi
        out.append((int(j), int(ext_index[c1]), d2 / (d2 - d1), int(ext_index[c2]), -d1 / (d2 - d1)))
    return out


def _mirrors(rows: _Rows, angles, center, shifts):
    """The mirrored views' mismatch statistic, whether it fails, the axis they place and how much
    worse the given centre fits than that axis (None, False, None, 1 without mirrored views)."""
    n_angles, n_cols = rows.sino.shape
    pairs = _partners(angles) if n_cols >= 8 else []
    stats, axes, gains = [], [], []
    cols = np.arange(n_cols, dtype=np.float64)
    for j, i1, w1, i2, w2 in pairs:
        view = rows.smooth(j)
        flipped = (w1 * rows.smooth(i1) + w2 * rows.smooth(i2))[::-1]  # flipped(c) = partner(n_cols - 1 - c)
        # view(c) = flipped(c - d) with d = 2 center + a_j + a_partner - (n_cols - 1), a: the axis shifts
        shift = shifts[j] + w1 * shifts[i1] + w2 * shifts[i2]
        d_given = 2 * center + shift - (n_cols - 1)
        best = _best_shift(view, flipped, cols)
        contrast = float(np.sqrt(np.mean((view - np.median(view)) ** 2)))
        if best is None or not contrast > 0:
            continue
        d_best, r_best = best
        r_given = float(_mismatch(view, flipped, cols, [d_given])[0])
        neighbour = rows.smooth(j + 1 if j + 1 < n_angles else j - 1)
        r_adjacent = float(np.sqrt(np.mean((view - neighbour) ** 2)))
        noise = r_adjacent * math.sqrt((1 + w1 * w1 + w2 * w2) / 2)
        stats.append(r_best / (noise + MIRROR_FLOOR * contrast))
        axes.append((d_best + (n_cols - 1) - shift) / 2)
        gains.append(r_given / max(r_best, 1e-12 * contrast))
    if not stats:
        return None, False, None, 1.0
    stat = float(np.median(stats))
    return stat, stat > MIRROR_LIMIT, float(np.median(axes)), float(np.median(gains))


def _mismatch(view, flipped, cols, shifts) -> np.ndarray:
    """RMS of ``view(c) - flipped(c - d)`` for every ``d`` in ``shifts``, over the columns where
    both exist (linear interpolation); inf where those are fewer than MIN_OVERLAP of them."""
    n = cols.size
    x = cols[None, :] - np.asarray(shifts, dtype=np.float64)[:, None]
    ok = (x >= 0) & (x <= n - 1)
    i0 = np.clip(np.floor(x).astype(np.int64), 0, n - 2)
    frac = x - i0
    moved = flipped[i0] * (1 - frac) + flipped[i0 + 1] * frac
    count = ok.sum(axis=1)
    sq = np.where(ok, (view[None, :] - moved) ** 2, 0.0).sum(axis=1)
    return np.where(count >= MIN_OVERLAP * n, np.sqrt(sq / np.maximum(count, 1)), np.inf)


def _best_shift(view, flipped, cols):
    """(d, mismatch) minimising :func:`_mismatch`: whole pixels by cross-correlating the column
    derivatives (a constant background drops out), then 0.05-pixel steps around the three best."""
    n = cols.size
    a, b = np.diff(view), np.diff(flipped)
    size = 2 * n
    corr = np.fft.irfft(np.fft.rfft(a, size) * np.conj(np.fft.rfft(b, size)), size)
    lags = np.arange(size)
    lags[lags >= n] -= size
    allowed = np.abs(lags) <= (1 - MIN_OVERLAP) * n
    candidates = lags[allowed][np.argsort(corr[allowed])[::-1][:3]]
    shifts = (candidates[:, None] + np.arange(-1.0, 1.0 + 1e-9, 0.05)[None, :]).ravel()
    r = _mismatch(view, flipped, cols, shifts)
    k = int(np.argmin(r))
    return (float(shifts[k]), float(r[k])) if math.isfinite(r[k]) else None


def _angle_finding(rows: _Rows, angles, center, shifts, verdict: _Verdict) -> Finding:
    """The angles finding, naming the scaling of the angles that fits, if one does."""
    value = verdict.moment if verdict.moment_failed else verdict.mirror
    limit = MOMENT_NOISE if verdict.moment_failed else MIRROR_LIMIT
    how = (
        "the projections' centroid does not follow a sinusoid of the angles (the Helgason-Ludwig "
        f"condition; {value:.3g} noise levels off)"
        if verdict.moment_failed
        else f"views half a turn apart do not mirror each other ({value:.3g} times the difference of neighbouring "
        "views)"
    )
    span = float(np.degrees(np.ptp(angles)))
    for factor, meaning in ALTERNATIVES:
        alt = _angles_verdict(rows, angles * factor, center, shifts)
        if alt.failed or not alt.informative:
            continue
        if meaning in ("half", "double"):
            fits = span * factor
            guess = ""
            if abs(fits - 180) <= 5 or abs(fits - 360) <= 5:
                guess = f": a {round(fits / 180) * 180}-degree scan given as {round(span / 180) * 180} degrees?"
            return Finding(
                "angles",
                "angles",
                "--angles",
                f"{how}; they fit the angles {'halved' if factor < 1 else 'doubled'} (a range of "
                f"{fits:.4g} degrees, not {span:.4g}){guess}",
                "give the angles the views were taken at",
                "check the range of --angles (stop - start)",
                value,
                limit,
                factor,
            )
        if meaning == "degrees":
            return Finding(
                "angles",
                "angles",
                "--angle-unit",
                f"{how}; they fit the angles read as degrees: the angles are degrees, read as radians",
                "convert degrees to radians (numpy.radians)",
                "give --angle-unit degree",
                value,
                limit,
                factor,
            )
        return Finding(
            "angles",
            "angles",
            "--angle-unit",
            f"{how}; they fit the angles read as radians: the angles are radians, read as degrees",
            "give the angles in radians, converted once",
            "give --angle-unit radian",
            value,
            limit,
            factor,
        )
    return Finding(
        "angles",
        "angles",
        "--angles",
        f"{how}: the angles (their range, unit or order) are probably not those of the views",
        "give the angles the views were taken at, in radians",
        "check --angles and --angle-unit",
        value,
        limit,
    )


def _check_center(verdict: _Verdict, center: float) -> list[Finding]:
    if verdict.axis is None or verdict.mirror_failed or verdict.moment_failed:
        return []
    off = abs(verdict.axis - center)
    if off <= CENTER_TOLERANCE or verdict.axis_gain < 2:
        return []
    return [
        Finding(
            "center",
            "center",
            "--center",
            f"views half a turn apart mirror each other about column {verdict.axis:.1f}, not about the "
            f"centre {center:.4g} ({off:.1f} pixels away): the rotation axis is probably near "
            f"{verdict.axis:.1f}",
            f"give center={verdict.axis:.1f} or estimate it (leveret.preprocess.find_center)",
            f"give --center {verdict.axis:.1f}, or --center auto",
            off,
            CENTER_TOLERANCE,
            verdict.axis,
        )
    ]
