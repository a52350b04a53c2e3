"""Live reconstruction while a scan runs: ``leveret live``.

- :class:`LiveReconstructor` filters and back-projects each projection as it
  arrives into watched slices (axial slices, and three orthogonal slices
  through any point at any orientation) and recomputes a moved slice from
  every projection received so far.
- :mod:`leveret.live.sources`: where frames come from (a Python iterable, a
  folder being written, a ZeroMQ stream).
- :mod:`leveret.live.server`: the web viewer (aiohttp, pushed over a websocket).
"""

from .reconstructor import Frame, LiveReconstructor, LiveStats
from .slices import Slice, axial_slices, orthogonal_slices, rotation

__all__ = ["LiveReconstructor", "Frame", "LiveStats", "Slice", "axial_slices", "orthogonal_slices", "rotation"]
