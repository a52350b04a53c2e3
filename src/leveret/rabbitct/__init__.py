"""RabbitCT: the cone-beam back-projection benchmark's dataset file.

- :func:`read_rabbitct` / :func:`write_rabbitct`: the version-2 ``.rct`` file
  (memory-mapped reading, atomic streamed writing) as a :class:`RabbitCTData`.
- :func:`matrix_to_rabbitct` / :func:`matrix_from_rabbitct`: 3x4 projection
  matrices to and from the file's 12 column-major doubles.
- :func:`hu_from_mu` / :func:`mu_from_hu`: reconstructed values to and from
  the scored units, with the header's HU scale and offset.

The byte layout is documented in :mod:`leveret.rabbitct.fileformat`.
"""
from .fileformat import *  # noqa: F401,F403  (the names in fileformat.__all__)
from .fileformat import __all__  # noqa: F401
