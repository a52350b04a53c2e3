"""Out-of-core reconstruction on a Dask cluster (two CPU worker processes)
equals the run in this process bit for bit (the same code per slab); a
worker killed mid-run costs only its slabs; --resume continues across the
two executors."""

from __future__ import annotations

import logging
import os
import signal
import time

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.io import SlabWriter, read_array
from leveret.execution.outofcore import reconstruct_to_file

distributed = pytest.importorskip("distributed")
pytest.importorskip("zarr")

SLAB = 3  # slices per slab: 16 slices make 6 slabs, so several are in flight on two workers


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, silence_logs=logging.ERROR, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def scan():
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 48, endpoint=False), 40, n_rows=16)
    proj = phantom.shepp_logan_3d(radius=16.0).project(g).astype(np.float32)
    return g, proj


def _local(proj, g, path, **kwargs):
    reconstruct_to_file(proj, g, path, backend="cpu", slab_slices=SLAB, **kwargs)
    return read_array(path)


def _write_input(tmp_path, proj, kind):
    """``proj`` stored as ``kind``; the path the reconstruction reads."""
    import tifffile
    import zarr

    if kind == "npy":
        np.save(tmp_path / "p.npy", proj)
        return tmp_path / "p.npy"
    if kind == "h5":
        import h5py

        with h5py.File(tmp_path / "p.h5", "w") as f:
            f["data"] = proj
        return tmp_path / "p.h5"
    if kind == "zarr":
        z = zarr.create_array(
            store=str(tmp_path / "p.zarr"), shape=proj.shape, chunks=(8, 4, proj.shape[2]), dtype=proj.dtype
        )
        z[...] = proj
        return tmp_path / "p.zarr"
    (tmp_path / "tif").mkdir()
    for k, image in enumerate(proj):
        tifffile.imwrite(tmp_path / "tif" / f"p_{k:03d}.tif", image)
    return tmp_path / "tif"


@pytest.mark.parametrize(
    "kind, output", [("npy", "r.zarr"), ("h5", "r.h5"), ("zarr", "r.npy"), ("tif", "r.zarr"), ("memory", "r.zarr")]
)
def test_dask_run_equals_the_run_in_this_process(tmp_path, scan, client, kind, output, monkeypatch):
    g, proj = scan
    ref = _local(proj, g, tmp_path / "ref.npy")
    source = proj if kind == "memory" else _write_input(tmp_path, proj, kind)
    monkeypatch.chdir(tmp_path)  # relative paths: the workers' working folder is another one
    source = source if kind == "memory" else source.name
    res = reconstruct_to_file(source, g, output, backend="cpu", slab_slices=SLAB, client=client)
    assert res.slabs_done == -(-g.n_rows // SLAB) and res.slab_slices == SLAB
    np.testing.assert_array_equal(read_array(tmp_path / output), ref)
    assert not list(tmp_path.glob(".*"))  # no partial output, no lock left


@pytest.mark.parametrize("dtype, output", [("float32", "r.h5"), ("uint16", "r.h5"), ("uint16", "r.zarr")])
def test_raw_counts_with_flats_and_darks_on_the_workers(tmp_path, scan, client, dtype, output):
    g, proj = scan
    flat = np.full(proj.shape[1:], 4000.0, np.float32)
    dark = np.full(proj.shape[1:], 100.0, np.float32)
    counts = np.round(dark + (flat - dark) * np.exp(-proj)).astype(np.uint16)
    np.save(tmp_path / "counts.npy", counts)
    ref = _local(tmp_path / "counts.npy", g, tmp_path / "ref.npy", flats=flat, darks=dark, output_dtype=dtype)
    res = reconstruct_to_file(
        tmp_path / "counts.npy",
        g,
        tmp_path / output,
        backend="cpu",
        slab_slices=SLAB,
        flats=flat,
        darks=dark,
        client=client,
        output_dtype=dtype,
    )
    np.testing.assert_array_equal(read_array(tmp_path / output), ref)  # zarr: written by the workers
    assert res.slabs_done == -(-g.n_rows // SLAB)  # uint16: slab 6:9, sampled for the range, written here


@pytest.mark.parametrize("output", ["r.zarr", "r.npy"])
def test_a_worker_killed_mid_run_costs_only_its_slabs(tmp_path, scan, client, monkeypatch, output):
    g, proj = scan
    np.save(tmp_path / "p.npy", proj)
    ref = _local(proj, g, tmp_path / "ref.npy")
    pids = client.run(os.getpid)
    # zarr: the workers write, the driver records; npy: the driver writes what the workers return
    method = "record" if output.endswith(".zarr") else "write"
    real = getattr(SlabWriter, method)
    killed = []

    def recorded(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if not killed:  # the manifest now shows the first slab: kill a worker that has one running
            for _ in range(100):  # the driver may not have handed out the next slabs yet
                busy = [w for w, keys in client.processing().items() if keys]
                if busy:
                    break
                time.sleep(0.05)
            assert busy, "no slab left in flight to interrupt"
            killed.append(busy[0])
            os.kill(pids[busy[0]], signal.SIGKILL)

    monkeypatch.setattr(SlabWriter, method, recorded)
    res = reconstruct_to_file(tmp_path / "p.npy", g, tmp_path / output, backend="cpu", slab_slices=SLAB, client=client)
    client.wait_for_workers(2)  # the nanny restarts the killed worker
    assert killed and res.slabs_done == -(-g.n_rows // SLAB)  # each slab recorded once
    np.testing.assert_array_equal(read_array(tmp_path / output), ref)


def test_cone_beam_slabs_on_the_cluster_equal_the_run_in_this_process(tmp_path, client):
    g = leveret.ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 40, endpoint=False), sid=200, sdd=400, n_rows=32, n_cols=40, pixel_size=1.0
    )
    v = leveret.VolumeGeometry((16, 32, 32), 0.5)
    np.save(tmp_path / "p.npy", phantom.shepp_logan_3d(radius=7.0).project(g).astype(np.float32))
    reconstruct_to_file(tmp_path / "p.npy", g, tmp_path / "ref.npy", volume=v, backend="cpu", slab_slices=SLAB)
    reconstruct_to_file(
        tmp_path / "p.npy", g, tmp_path / "r.zarr", volume=v, backend="cpu", slab_slices=SLAB, client=client
    )
    np.testing.assert_array_equal(read_array(tmp_path / "r.zarr"), np.load(tmp_path / "ref.npy"))


class _Stop(KeyboardInterrupt):
    """Stands for Ctrl-C after a number of slabs."""


def _stop_after(monkeypatch, method: str, n: int) -> None:
    real = getattr(SlabWriter, method)
    calls = []

    def stopping(self, *args, **kwargs):
        real(self, *args, **kwargs)
        calls.append(args)
        if len(calls) == n:
            raise _Stop

    monkeypatch.setattr(SlabWriter, method, stopping)


@pytest.mark.parametrize("first", ["dask", "local"])
def test_resume_continues_across_the_dask_and_the_local_executor(tmp_path, scan, client, monkeypatch, first):
    g, proj = scan
    np.save(tmp_path / "p.npy", proj)
    ref = _local(proj, g, tmp_path / "ref.npy")
    out = tmp_path / "r.zarr"
    with monkeypatch.context() as m:
        # the dask executor records the slabs its workers wrote, the local one writes them
        _stop_after(m, "record" if first == "dask" else "write", 2)
        with pytest.raises(_Stop):
            reconstruct_to_file(
                tmp_path / "p.npy",
                g,
                out,
                backend="cpu",
                slab_slices=SLAB,
                resume=True,
                client=client if first == "dask" else None,
            )
    assert not out.exists() and (tmp_path / ".r.zarr.partial").is_dir()
    if first == "dask":  # the interruption cancelled the slabs in flight: the client holds none
        assert [key for key in client.futures if "run_slab" in str(key)] == []
    res = reconstruct_to_file(
        tmp_path / "p.npy",
        g,
        out,
        backend="cpu",
        slab_slices=SLAB,
        resume=True,
        client=None if first == "dask" else client,
    )
    n_slabs = -(-g.n_rows // SLAB)
    assert res.slices_resumed == 2 * SLAB and res.slabs_done == n_slabs - 2
    np.testing.assert_array_equal(read_array(out), ref)


def test_retries_is_checked(scan, client, tmp_path):
    g, proj = scan
    with pytest.raises(ValueError, match="^retries: "):
        reconstruct_to_file(proj, g, tmp_path / "r.zarr", client=client, retries=-1)


def test_geometries_pickle_as_equal_values():
    import pickle

    cone = leveret.ConeGeometry.circular(
        np.linspace(0, 2 * np.pi, 9, endpoint=False), sid=200, sdd=400, n_rows=20, n_cols=30, pixel_size=1.0
    )
    for g in (
        leveret.ParallelGeometry(np.linspace(0, np.pi, 5), 8, n_rows=4, center=3.25),
        cone,
        leveret.VolumeGeometry((3, 4, 5), (1.3, 1.5, 1.5), (2.0, 1.0, -3.0)),
    ):
        assert pickle.loads(pickle.dumps(g)) == g


def _worker_environ():
    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("OMP_NUM_THREADS")


def test_a_local_cluster_leaves_glibc_malloc_tuning_alone():
    """Dask's MALLOC_TRIM_THRESHOLD_ slows the workers' zarr I/O; its one-thread BLAS setting stays."""
    from leveret.execution.executors import connect

    with connect("local", backend="cpu") as c:
        found = c.run(_worker_environ)
    assert found and set(found.values()) == {(None, "1")}


def test_each_worker_thread_plans_for_its_share_of_the_gpu():
    """A GPU worker of two threads runs two slabs at once on its GPU."""
    from leveret.execution.executors import DaskExecutor

    class Client:
        def scheduler_info(self, n_workers=None):
            return {
                "workers": {
                    "tcp://a:1": {"nthreads": 2, "memory_limit": 8 << 30},
                    "tcp://b:1": {"nthreads": 1, "memory_limit": 8 << 30},
                }
            }

        def run(self, fn, backend):
            return {
                "tcp://a:1": {"backend": "cuda", "host": 1 << 40, "gpu": 40 << 30},
                "tcp://b:1": {"backend": "cuda", "host": 1 << 40, "gpu": 30 << 30},
            }

    assert DaskExecutor(Client()).capacity("cuda") == {"backend": "cuda", "host": 4 << 30, "gpu": 20 << 30}


@pytest.mark.gpu
def test_local_cuda_cluster_equals_one_gpu_in_this_process(tmp_path):
    pytest.importorskip("dask_cuda")
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 256, endpoint=False), 256, n_rows=64)
    np.save(tmp_path / "p.npy", phantom.shepp_logan_3d(radius=110.0).project(g).astype(np.float32))
    reconstruct_to_file(tmp_path / "p.npy", g, tmp_path / "ref.npy", backend="cuda", slab_slices=8)
    ref = np.load(tmp_path / "ref.npy")
    from leveret.execution.executors import connect

    with connect("local", backend="cuda") as c:  # THREADS_PER_GPU slabs at once on each GPU
        for output in ("r.zarr", "r.h5"):  # written by the workers; by this process
            res = reconstruct_to_file(tmp_path / "p.npy", g, tmp_path / output, backend="cuda", slab_slices=8, client=c)
            assert res.plan.backend == "cuda" and res.slabs_done == 8
            # the same kernels on the same slabs: the same bits
            np.testing.assert_array_equal(read_array(tmp_path / output), ref)
