"""Small real data shipped with leveret, for examples, the guide and tests.

:func:`savu_scan` returns a real parallel-beam synchrotron scan of 91
projections of 135 x 160 pixels (3.5 MiB in the package), from the test data
of Savu, the tomography pipeline of Diamond Light Source, under the Apache
License 2.0 (``README.md`` and ``LICENSE-savu-image-test.txt`` beside the data).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..geometry import ParallelGeometry, VolumeGeometry

__all__ = ["Scan", "savu_scan"]

# Rotation axis of the savu scan in column pixels: leveret.preprocess.find_center
# on the line integrals of the 16 middle rows (59..74, as `leveret center` takes them)
# gives 85.87 (confidence 0.93).
SAVU_CENTER = 85.87


@dataclass(frozen=True)
class Scan:
    """A raw parallel-beam scan with its geometry (arrays are read-only).

    Attributes
    ----------
    projections : ndarray of uint16, shape (n_angles, n_rows, n_cols)
        Raw detector counts, in acquisition order.
    flat, dark : ndarray of float32, shape (n_rows, n_cols)
        Flat field (beam, no sample) and dark field (no beam).
    angles : ndarray of float64, shape (n_angles,)
        Projection angles in radians.
    center : float
        Rotation axis in column pixels (pixel centres at integers).
    geometry : ParallelGeometry
        The scan's geometry with ``center``, unit pixels.
    volume : VolumeGeometry
        A suggested reconstruction grid: ``geometry.default_volume()``.
    name : str
        Where the data come from.
    """

    projections: np.ndarray
    flat: np.ndarray
    dark: np.ndarray
    angles: np.ndarray
    center: float
    geometry: ParallelGeometry
    volume: VolumeGeometry
    name: str

    def line_integrals(self) -> np.ndarray:
        """``-log((projections - dark) / (flat - dark))`` as float32, ready for FBP."""
        from ..preprocess import minus_log, normalize

        return minus_log(normalize(self.projections, self.flat, self.dark))

    def write(self, folder) -> Path:
        """Write the scan as files the ``leveret`` command reads; returns the folder.

        ``folder/projections/raw_00000.tiff ...`` (uint16), ``folder/flat.tiff``
        and ``folder/dark.tiff`` (float32), ``folder/angles.txt`` (degrees,
        one per line). The folder is made if missing; existing files of these
        names are replaced.
        """
        import tifffile

        folder = Path(folder)
        (folder / "projections").mkdir(parents=True, exist_ok=True)
        for k, image in enumerate(self.projections):
            tifffile.imwrite(folder / "projections" / f"raw_{k:05d}.tiff", image)
        tifffile.imwrite(folder / "flat.tiff", self.flat)
        tifffile.imwrite(folder / "dark.tiff", self.dark)
        np.savetxt(folder / "angles.txt", np.degrees(self.angles), fmt="%.10g")
        return folder

    def __repr__(self) -> str:
        return (
            f"Scan({self.name!r}: projections {self.projections.shape} {self.projections.dtype}, "
            f"flat and dark {self.flat.shape}, {self.angles.size} angles from "
            f"{np.degrees(self.angles[0]):.1f} to {np.degrees(self.angles[-1]):.1f} deg, "
            f"center {self.center:g})"
        )


@functools.lru_cache(maxsize=1)
def _savu_arrays() -> tuple:
    with resources.files(__name__).joinpath("savu_image_test.npz").open("rb") as f:
        data = np.load(f)
        arrays = (
            data["projections"],
            data["flat"].astype(np.float32),
            data["dark"].astype(np.float32),
            np.radians(data["angles_degree"]),
        )
    for a in arrays:  # shared by every call through the cache
        a.setflags(write=False)
    return arrays


def savu_scan() -> Scan:
    """The savu-image-test scan: a small real synchrotron scan, raw.

    91 projections of 135 rows x 160 columns over 180 degrees (-88.2 to 91.8
    in steps of 2, so the first and last are 180 degrees apart), one flat and
    one dark field. The rotation axis is not at the detector centre (column
    79.5) but at column 85.87: a reconstruction with the centre in the middle
    shows crescent artefacts. One flat-minus-dark pixel is 0 (a dead pixel).

    Source: the test data of Savu (Diamond Light Source,
    https://github.com/DiamondLightSource/Savu, ``test_data/data/image_test``),
    Copyright 2014 Diamond Light Source Ltd., Apache License 2.0.

    Returns
    -------
    Scan
        Projections, flat, dark, angles (radians), the centre, a
        ``ParallelGeometry`` (unit pixels) and a suggested volume.

    Examples
    --------
    >>> import leveret
    >>> scan = leveret.datasets.savu_scan()
    >>> scan.projections.shape, scan.geometry.center
    ((91, 135, 160), 85.87)
    >>> volume = leveret.fbp(scan.line_integrals(), scan.geometry)   # (135, 160, 160)
    >>> folder = scan.write("savu")        # TIFFs and angles.txt for the command line
    """
    projections, flat, dark, angles = _savu_arrays()
    geometry = ParallelGeometry(angles, projections.shape[2], n_rows=projections.shape[1], center=SAVU_CENTER)
    return Scan(
        projections=projections,
        flat=flat,
        dark=dark,
        angles=angles,
        center=SAVU_CENTER,
        geometry=geometry,
        volume=geometry.default_volume(),
        name="savu-image-test (Diamond Light Source, Apache-2.0)",
    )
