"""RabbitCT: the cone-beam back-projection benchmark's dataset file.

- :func:`read_rabbitct` / :func:`write_rabbitct`: the version-2 ``.rct`` file
  (memory-mapped reading, atomic streamed writing) as a :class:`RabbitCTData`.
- :func:`matrix_to_rabbitct` / :func:`matrix_from_rabbitct`: 3x4 projection
  matrices to and from the file's 12 column-major doubles.
- :func:`hu_from_mu` / :func:`mu_from_hu`: reconstructed values to and from
  the scored units, with the header's HU scale and offset.
- :func:`make_dataset`: a synthetic dataset (analytic head, RabbitCT-like
  perturbed short scan, FDK-pre-processed images, float64-exact references);
  :func:`reference_volume` recomputes a float64 reference for any data.
- :func:`run_benchmark`: time the back-projection of one problem size and
  score it in HU (:class:`RabbitCTResult`, :func:`hu_errors`).

The byte layout is documented in :mod:`leveret.rabbitct.fileformat`.
"""

from .fileformat import *  # noqa: F401,F403  (the names in fileformat.__all__)
from .fileformat import __all__ as _fileformat_all
from .runner import *  # noqa: F401,F403
from .runner import __all__ as _runner_all
from .synthetic import *  # noqa: F401,F403
from .synthetic import __all__ as _synthetic_all

__all__ = [*_fileformat_all, *_runner_all, *_synthetic_all]
