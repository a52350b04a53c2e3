"""Projection angles from files, arrays or ``start:stop:count`` specs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from .._validate import choice, finite_vector, positive_int
from ._common import library_errors

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SPEC = re.compile(rf"^\s*({_NUMBER}):({_NUMBER}):(\d+)(?::(endpoint))?\s*$")

_UNITS = {"degree": np.pi / 180, "degrees": np.pi / 180, "deg": np.pi / 180, "radian": 1.0, "radians": 1.0, "rad": 1.0}


def read_angles(path_or_values, *, unit: str = "degree") -> np.ndarray:
    """Projection angles in radians, from a file, a spec string or values.

    ``path_or_values`` is one of:

    - a text file: numbers separated by whitespace (one per line or several
      per line); ``#`` starts a comment running to the end of the line;
    - a ``.npy`` file holding a 1D array;
    - ``"start:stop:count"``: ``count`` angles from ``start`` in steps of
      ``(stop - start) / count``, **stop excluded** (``numpy.linspace(...,
      endpoint=False)``): ``"0:180:180"`` gives 0, 1, ..., 179 degrees;
    - ``"start:stop:count:endpoint"``: the same with **stop included**:
      ``"-88.2:91.8:91:endpoint"`` gives -88.2, -86.2, ..., 91.8;
    - a sequence or 1D array of numbers.

    An existing file wins over a spec string of the same spelling.

    Parameters
    ----------
    path_or_values : str, os.PathLike, or array_like
        See above.
    unit : {"degree", "radian"}
        Unit of the values read (also "degrees", "deg", "radians", "rad").

    Returns
    -------
    numpy.ndarray
        float64, shape (n_angles,), radians, in the order given.

    Raises
    ------
    ValueError
        Naming ``path_or_values`` (missing file, no numbers, non-finite or
        non-numeric values, not 1D, a bad spec) or ``unit``.
    """
    scale = _UNITS[choice("unit", unit, tuple(_UNITS))]
    name = "path_or_values"
    if isinstance(path_or_values, (str, os.PathLike)):
        p = Path(os.fspath(path_or_values))
        m = _SPEC.match(os.fspath(path_or_values)) if isinstance(path_or_values, str) else None
        if p.is_file():
            values = _read_angle_file(p)
        elif m:
            count = positive_int(f"{name} (count)", int(m.group(3)))
            values = np.linspace(float(m.group(1)), float(m.group(2)), count, endpoint=m.group(4) is not None)
        else:
            raise ValueError(
                f"{name}: {os.fspath(path_or_values)!r} is neither an existing file nor a "
                "'start:stop:count' or 'start:stop:count:endpoint' spec"
            )
    else:
        values = path_or_values
    return finite_vector(name, values) * scale  # a new, writable array


def _read_angle_file(p: Path) -> np.ndarray:
    if p.suffix.lower() == ".npy":
        with library_errors(p, "a .npy file"):
            values = np.load(p, allow_pickle=False)
        if values.ndim != 1:
            raise ValueError(f"path_or_values: {str(p)!r} holds shape {values.shape}, expected 1D")
        return values
    with library_errors(p, "a text file of numbers"):
        text = p.read_text()
    tokens = [tok for line in text.splitlines() for tok in line.split("#", 1)[0].split()]
    try:
        return np.array([float(t) for t in tokens])
    except ValueError as exc:
        raise ValueError(f"path_or_values: {str(p)!r} is not a list of numbers: {exc}") from None
