"""Running the slabs of an out-of-core reconstruction on a Dask cluster.

:func:`leveret.execution.outofcore.reconstruct_to_file` plans the slabs and owns the
output (its lock, the partial output and the resume manifest); in this
process the slabs go through the staged pipeline of
:mod:`leveret.execution.pipeline`, on a cluster through an executor that only
runs :func:`leveret.execution.slab.reconstruct_slab` on them and hands back
each slab as it finishes. Each slab's input rows are checksummed as they are
read (:func:`rows_source`), which the driver records with the slab, so that a
resumed run can check that the input of the finished slabs did not change.

- :class:`DaskExecutor` submits them to a ``distributed.Client``: each task
  carries the input's reader (its path and layout, never the data) and the
  slab's slice range, and the worker reads the detector rows it needs
  itself. A zarr output is written by the workers, each slab into its own
  chunks of the partial store; the other formats have one writer, this
  process, which takes the finished slabs as they come. A worker that dies
  costs only its unfinished slabs: Dask runs them again elsewhere.

:func:`connect` opens a client for the command's ``--scheduler``: an address
of a running scheduler (``tcp://host:8786``), or ``"local"`` for a cluster on
this host (one worker per GPU with dask-cuda, else CPU worker processes).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from pathlib import Path
from typing import Iterator

import numpy as np

log = logging.getLogger(__name__)

#: Seconds :func:`connect` waits for a scheduler to answer.
CONNECT_TIMEOUT = 5.0
#: Threads of each GPU worker of ``--scheduler local``: two slabs at once on
#: each GPU, so that one's reading and writing overlap the other's
#: reconstruction (each plans for half the GPU's free memory).
THREADS_PER_GPU = 2
#: Slabs in flight per worker thread: enough to keep every worker busy while
#: a finished slab travels, few enough that finished slabs never pile up in
#: the workers' memory.
SLABS_PER_THREAD = 2


class OutOfMemoryOnDevice:
    """A task's answer when the GPU ran out of memory (the driver splits the
    slab); returned rather than raised so that Dask does not retry it as is."""

    def __init__(self, message: str):
        self.message = message


# -- what a task carries to read its rows ----------------------------------------------------------


class MemmapSource:
    """A memory-mapped array (``.npy``, uncompressed TIFF, raw) by file name,
    dtype, shape and offset: it pickles as those, and maps the file again
    wherever it is unpickled."""

    def __init__(self, filename, dtype, shape, offset: int, order: str):
        self.filename, self.dtype, self.shape = os.fspath(filename), np.dtype(dtype), tuple(shape)
        self.offset, self.order = int(offset), order

    def __getitem__(self, key) -> np.ndarray:
        mapped = np.memmap(
            self.filename, dtype=self.dtype, mode="r", offset=self.offset, shape=self.shape, order=self.order
        )
        return np.array(mapped[key])

    def __repr__(self) -> str:
        return f"MemmapSource({self.filename!r}, shape={self.shape}, dtype={self.dtype})"


def remote_source(projections):
    """What a task may carry to read ``projections`` in another process: the
    lazy reader itself when it holds only a path (TIFF stacks, HDF5 datasets
    and frames, zarr arrays), a :class:`MemmapSource` for a memory-mapped
    file, each with absolute paths (a worker's working folder is not this
    process's); None for an array in this process's memory (its rows then
    travel with each task)."""
    import copy

    from ..io._common import LazyStack

    if isinstance(projections, LazyStack):
        reader = copy.copy(projections)
        if hasattr(reader, "files"):  # a TIFF stack
            reader.files = [Path(os.path.abspath(f)) for f in reader.files]
        if hasattr(reader, "path"):  # an HDF5 dataset, or frames of one
            reader.path = type(reader.path)(os.path.abspath(reader.path))
        return reader
    if type(projections).__module__.startswith("zarr"):
        root = getattr(projections.store, "root", None)  # a local store: opened again by absolute path
        if root is None:
            return projections
        import zarr

        return zarr.open_array(os.path.abspath(root), mode="r", path=projections.path or None)
    if isinstance(projections, np.memmap) and projections.filename is not None:
        import mmap

        if isinstance(projections.base, mmap.mmap):  # the whole mapping, not a view of it
            order = "F" if projections.flags.f_contiguous and not projections.flags.c_contiguous else "C"
            return MemmapSource(
                os.path.abspath(projections.filename), projections.dtype, projections.shape, projections.offset, order
            )
    return None


class Rows:
    """Detector rows ``r0:r0 + len`` of every projection, read here and sent
    with a task (for projections held in memory), indexed as the whole."""

    def __init__(self, r0: int, data: np.ndarray):
        self.r0, self.data = int(r0), data

    def __getitem__(self, key) -> np.ndarray:
        angles, rows, cols = key
        return self.data[angles, rows.start - self.r0 : rows.stop - self.r0, cols]


# -- the task --------------------------------------------------------------------------------------


def read_rows(source, geometry, volume, region, *, border: int = 0):
    """The detector rows ``region = (k0, k1)`` needs (with ``border`` rows of
    context each side, :func:`leveret.execution.slab.slab_rows`), read from
    ``source``: ``(rows, data)``, or ``(None, None)`` when the slab projects
    off the detector."""
    from .slab import slab_rows

    rows = slab_rows(geometry, volume, region, border=border)
    if rows is None:
        return None, None
    return rows, np.asarray(source[:, rows[0] : rows[1], :])


def rows_source(rows, data) -> dict | None:
    """What a slab was made from (:func:`leveret.io.slabs.made_from`): its
    detector rows ``(r0, r1)`` and the CRC-32 of their values as read; None
    for a slab off the detector, made from nothing."""
    from ..io.slabs import made_from

    return None if rows is None else made_from(data, rows)


def build_slab(rows, data, geometry, volume, region, **kwargs):
    """Reconstruct ``region`` from its rows (:func:`read_rows`): the slab, or
    :class:`OutOfMemoryOnDevice` when the GPU ran out of memory."""
    from .slab import _free_gpu_pool, is_gpu_out_of_memory, reconstruct_slab

    k0, k1 = region
    if rows is None:  # the slab projects off the detector: nothing measured there
        return np.zeros((k1 - k0, volume.ny, volume.nx), np.float32)
    try:
        return reconstruct_slab(data, geometry, volume, region, rows=rows, **kwargs)
    except Exception as exc:
        if not is_gpu_out_of_memory(exc):
            raise
        _free_gpu_pool()
        return OutOfMemoryOnDevice(str(exc))


def run_slab(source, geometry, volume, region, *, store=None, output_dtype="float32", value_range=None, **kwargs):
    """Reconstruct ``region = (k0, k1)``, reading its rows from ``source`` (a
    Dask task): ``(result, made_from)``.

    ``result``: the slab as stored (``output_dtype`` over ``value_range``,
    :func:`leveret.io.quantize.quantize`); with ``store`` (a zarr store's
    path) it is written there and ``region`` is returned. A GPU out of memory
    gives :class:`OutOfMemoryOnDevice`. ``made_from`` is :func:`rows_source`
    of the rows read. ``source`` is anything indexed as ``source[:, r0:r1, :]``:
    the projections, or :class:`Rows` of them.
    """
    from ..io.quantize import quantize
    from .slab import border_rows

    rows, data = read_rows(source, geometry, volume, region, border=border_rows(kwargs.get("phase")))
    made_from = rows_source(rows, data)
    slab = build_slab(rows, data, geometry, volume, region, **kwargs)
    if isinstance(slab, OutOfMemoryOnDevice):
        return slab, made_from
    if np.dtype(output_dtype) != np.float32:  # here, where the slab is: fewer bytes go back
        slab = quantize(slab, output_dtype, value_range)
    if store is None:
        return slab, made_from
    from ..io.slabs import write_region

    write_region(store, region[0], slab)
    return region, made_from


# -- executors -------------------------------------------------------------------------------------


class DaskExecutor:
    """Run the slabs on a Dask cluster through ``client`` (a ``distributed.Client``).

    Parameters
    ----------
    client : distributed.Client
    retries : int
        Times Dask runs a slab again after it raised (a worker's file system
        hiccup, a lost connection). A slab whose worker died is run again
        anyway.
    """

    name = "dask"

    def __init__(self, client, *, retries: int = 2):
        if isinstance(retries, bool) or not isinstance(retries, (int, np.integer)) or retries < 0:
            raise ValueError(f"retries: expected a number of retries >= 0, got {retries!r}")
        self.client = client
        self.retries = int(retries)
        self._futures: dict = {}
        self._waiting: deque = deque()
        self._store = None
        self._made_from: dict = {}

    def capacity(self, backend: str) -> dict:
        """What the smallest worker offers: ``backend`` resolved there, and
        memory per worker thread (host, and GPU when CUDA)."""
        info = (
            self.client.scheduler_info(n_workers=-1)["workers"]
            if _takes_n_workers(self.client)
            else self.client.scheduler_info()["workers"]
        )
        if not info:
            raise ValueError(
                f"client: the Dask cluster at {self.client.scheduler.address} has no workers; "
                "start some with 'dask worker ADDRESS' or 'dask cuda worker ADDRESS'"
            )
        try:
            found = self.client.run(_worker_capacity, backend)
        except ImportError as exc:
            raise ValueError(
                f"client: a Dask worker cannot import leveret ({exc}); install the same leveret on every worker"
            ) from None
        backends = {v["backend"] for v in found.values()}
        if len(backends) > 1:
            raise ValueError(
                f"backend: the Dask workers resolve {backend!r} differently ({sorted(backends)}); "
                "give backend='cuda' or 'cpu'"
            )
        threads = {w: max(1, int(i.get("nthreads", 1))) for w, i in info.items()}
        host = min(
            (i.get("memory_limit") or found.get(w, {}).get("host", 0) or 0) / threads[w] for w, i in info.items()
        )
        # a worker's threads run slabs at once on its GPU: each plans for its share
        gpus = [v["gpu"] // threads.get(w, 1) for w, v in found.items() if v["gpu"] is not None]
        return {"backend": backends.pop(), "host": int(host), "gpu": min(gpus) if gpus else None}

    def start(self, projections, geometry, volume, *, store=None, **kwargs) -> None:
        source = remote_source(projections)
        self._projections = None if source is not None else projections
        self._source = source
        self._store = None if store is None else os.path.abspath(store)
        for name in ("flats", "darks"):  # sent to every worker once, not with each task
            if kwargs.get(name) is not None:
                kwargs[name] = self.client.scatter(np.asarray(kwargs[name]), broadcast=True, hash=True)
        self._args = (geometry, volume)
        self._kwargs = kwargs
        threads = sum(self.client.nthreads().values()) or 1
        self._window = SLABS_PER_THREAD * threads
        from distributed import as_completed

        self._done = as_completed()
        log.info("dask: %d worker thread(s); dashboard %s", threads, self.client.dashboard_link)

    def submit(self, region, *, first: bool = False) -> None:
        """Queue ``region``; ``first``: before the slabs not yet sent to the cluster."""
        (self._waiting.appendleft if first else self._waiting.append)(tuple(region))
        self._fill()

    def _fill(self) -> None:
        while self._waiting and len(self._futures) < self._window:
            region = self._waiting.popleft()
            source = self._source
            if source is None:  # an in-memory array: its rows go with the task
                from .slab import border_rows, slab_rows

                rows = slab_rows(*self._args, region, border=border_rows(self._kwargs.get("phase")))
                source = None if rows is None else Rows(rows[0], np.asarray(self._projections[:, rows[0] : rows[1], :]))
            geometry, volume = self._args
            future = self.client.submit(
                run_slab,
                source,
                geometry,
                volume,
                region,
                store=self._store,
                retries=self.retries,
                pure=False,
                **self._kwargs,
            )
            self._futures[future] = region
            self._done.add(future)

    def completed(self) -> Iterator[tuple[tuple[int, int], object]]:
        """``(region, slab)`` (or ``(region, region)`` for a slab written by its
        worker) as slabs finish, in any order; slabs submitted meanwhile included."""
        while self._futures:
            future = next(self._done)
            region = self._futures.pop(future)
            result, self._made_from[region] = future.result()  # raises the task's error after its retries
            future.release()
            self._fill()
            yield region, result

    def made_from(self, region) -> dict | None:
        """:func:`rows_source` of the rows slab ``region`` was made from (once it is completed)."""
        return self._made_from.pop(tuple(region), None)

    def cancel(self) -> None:
        """Cancel the slabs not finished yet (a running one finishes on its worker)."""
        self._waiting.clear()
        futures, self._futures = list(self._futures), {}
        if futures:
            with contextlib.suppress(Exception):  # a client already closed has nothing running
                self.client.cancel(futures)


def _takes_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _worker_capacity(backend: str) -> dict:
    """Run on each worker: the backend ``backend`` resolves to there, its
    available host memory and free GPU memory."""
    from ..backends import resolve
    from ..cuda import gpu_free_bytes
    from ..resources import host_available_bytes

    resolved = resolve(backend)
    return {
        "backend": resolved,
        "host": int(host_available_bytes()),
        "gpu": int(gpu_free_bytes()) if resolved == "cuda" else None,
    }


# -- the command's --scheduler ---------------------------------------------------------------------


def _missing_distributed() -> ValueError:
    return ValueError(
        'scheduler: running on a Dask cluster needs the distributed package; pip install "leveret[cluster]"'
    )


@contextlib.contextmanager
def connect(scheduler: str, *, backend: str = "auto", timeout: float = CONNECT_TIMEOUT):
    """A ``distributed.Client`` for ``scheduler``, closed (with the cluster
    it started) on leaving the ``with`` block.

    Parameters
    ----------
    scheduler : str
        ``"local"``: start a cluster on this host, a ``dask_cuda.LocalCUDACluster``
        (one worker per GPU, of ``THREADS_PER_GPU`` threads) when ``backend`` resolves to CUDA, else a
        ``distributed.LocalCluster`` of CPU worker processes. Otherwise the
        address of a running scheduler, ``tcp://host:8786``.
    backend : {"auto", "cuda", "cpu"}
    timeout : float
        Seconds to wait for the scheduler to answer.

    Raises
    ------
    ValueError
        ``distributed`` (or for CUDA, ``dask_cuda``) is not installed, the
        address is malformed, or no scheduler answers there in time; the
        message starts with ``scheduler:``.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise _missing_distributed() from None
    text = str(scheduler).strip()
    cluster = None
    if text.lower() == "local":
        from ..backends import resolve

        if resolve(backend) == "cuda":
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                raise ValueError(
                    'scheduler: a local cluster of GPU workers needs dask-cuda; pip install "leveret[cluster]"'
                ) from None
            with worker_environment():
                cluster = LocalCUDACluster(threads_per_worker=THREADS_PER_GPU)
        else:
            with worker_environment():
                cluster = _local_cpu_cluster(LocalCluster)
        try:
            client = Client(cluster)
        except BaseException:
            cluster.close()  # its worker processes would outlive the failed connection
            raise
    else:
        address = _check_address(text)
        _probe(address, timeout)  # a clear error now, not a client half made
        client = Client(address, timeout=f"{timeout}s")
    from ..io.atomic import register_cleanup, unregister_cleanup

    if cluster is not None:  # an interrupted command stops the workers it started
        register_cleanup(id(cluster), cluster.close)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            unregister_cleanup(id(cluster))
            cluster.close()


def worker_environment():
    """A ``dask.config.set`` context in which the worker processes a cluster
    starts keep glibc's own malloc tuning: Dask's nanny otherwise sets
    ``MALLOC_TRIM_THRESHOLD_=65536`` in them, which also fixes the mmap
    threshold, so that every chunk-sized buffer the zarr reads and writes
    make is mapped and faulted in afresh (a slab's zarr write measured 1.5x
    slower). The other variables Dask sets (one OpenMP/BLAS thread) stay.

    A nanny also leaves its variables in this process's ``os.environ``,
    which every later worker inherits: Dask's own value is taken out of it
    here (a value the user set is left alone)."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    dasks = environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    if dasks is not None and os.environ.get("MALLOC_TRIM_THRESHOLD_") == str(dasks):
        del os.environ["MALLOC_TRIM_THRESHOLD_"]
    return dask.config.set({"distributed.nanny.pre-spawn-environ": environ})


#: Most CPU worker processes ``--scheduler local`` starts (each slab already uses several cores).
LOCAL_CPU_WORKERS = 4


def _local_cpu_cluster(LocalCluster):
    """CPU worker processes on this host, the cores shared out among them (each
    worker's Numba threads), so that concurrent slabs do not oversubscribe them."""
    cores = os.cpu_count() or 1
    n = max(1, min(LOCAL_CPU_WORKERS, cores))
    return LocalCluster(
        n_workers=n, threads_per_worker=1, processes=True, env={"NUMBA_NUM_THREADS": str(max(1, cores // n))}
    )


def check_address(text: str) -> str:
    """``text`` as a scheduler address (``tcp://`` added when no scheme is
    given); ValueError naming ``scheduler`` if it is none."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise _missing_distributed() from None
    return _check_address(text)


def _check_address(text: str) -> str:
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    expected = f"scheduler: expected 'local' or a Dask scheduler's address such as tcp://HOST:8786, got {text!r}"
    address = text if "://" in text else f"tcp://{text}"
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except (ValueError, TypeError):
        raise ValueError(expected) from None
    from distributed.comm.registry import backends

    if scheme not in backends or not host or not port:
        raise ValueError(expected)
    return address


def _probe(address: str, timeout: float) -> None:
    import asyncio

    from distributed.core import rpc

    async def identity():
        remote = rpc(address, timeout=timeout)
        try:
            return await asyncio.wait_for(remote.identity(), timeout)
        finally:
            await remote.close_rpc()

    try:
        reply = asyncio.run(identity())
    except (OSError, asyncio.TimeoutError, EOFError):
        raise ValueError(
            f"scheduler: no Dask scheduler answered at {address} within {timeout:g} s; "
            "start one with 'dask scheduler', or give 'local'"
        ) from None
    except Exception as exc:  # something answered, but not a scheduler
        raise ValueError(f"scheduler: {address} did not answer as a Dask scheduler ({exc})") from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise ValueError(
            f"scheduler: {address} is not a Dask scheduler (it is a "
            f"{reply.get('type') if isinstance(reply, dict) else 'different service'})"
        )
