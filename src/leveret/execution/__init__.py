"""Running a reconstruction job: the slab driver and its plans, the
executors that run slabs here or on a Dask cluster, and termination
signals turned into a clean stop.

The dependency rule: this package runs the algorithms and preprocessing
below it (``leveret.algorithms``, ``leveret.preprocess``, ``leveret.io``,
and the GPU plumbing of ``leveret.cuda``: device sets, streamed chunks,
pinned memory); only ``leveret.live`` and ``leveret.cli`` import it.
Nothing below imports anything above (tests/test_layers.py checks it).

- :mod:`.outofcore`: :func:`reconstruct_to_file`, :func:`plan` (the driver).
- :mod:`.slab`: one slab's rows, preprocessing and reconstruction.
- :mod:`.pipeline`: the staged pipeline that runs the slabs in this process
  (read, preprocess, upload, reconstruct, download, compress, write, sync).
- :mod:`.executors`: slabs on Dask workers.
- :mod:`.memory`: slab plans within the host's and the GPU's limits.
- :mod:`.signals`: SIGTERM and SIGHUP as exceptions while a command runs.
"""

__all__ = ["OutOfCoreResult", "plan", "reconstruct_to_file"]


def __getattr__(name: str):
    """The driver's names, imported at first use: ``leveret`` imports
    :mod:`.signals` before anything else, and that must stay light."""
    if name in __all__:
        from . import outofcore

        return getattr(outofcore, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
