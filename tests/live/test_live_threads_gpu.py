"""LiveReconstructor called from several threads on the GPU (and on several
GPUs where there are), as tests/live/test_live_threads.py does on the CPU.

- Reconstructors of their own in threads started together, each with another
  geometry (parallel beam: detector, angles and rotation axis; cone beam: the
  circle), made and fed frames a few times over: bit for bit what each gives
  alone (where two one-thread runs agree bit for bit; otherwise within ten
  times their spread plus float32 rounding). A table, plan, texture or buffer
  that two reconstructors shared would show in the other's slices.
- One reconstructor shared by threads adding disjoint frames while another
  moves and reads the slices: the batches come in another order than from
  one thread, so the slices sum the same float32 terms in another order:
  equal to the one-thread slices within 1e-5 of the peak (the bound the GPU
  slices meet against leveret.fbp, tests/live/test_planes_gpu.py), the
  counters exactly.
"""

from __future__ import annotations

import pytest
from cases import live_job, live_own_instances_case, live_shared_instance_case

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def _on_a_stream_of_its_own(job):
    """``job`` run with a non-blocking stream of its own as the current one, as
    a service running one request per thread would: the reconstructor's
    tables must be complete before its own streams read them."""

    def run():
        import cupy

        with cupy.cuda.Stream(non_blocking=True) as stream:
            out = job()
            stream.synchronize()
        return out

    return run


@pytest.mark.parametrize("own_stream", [False, True])
def test_reconstructors_of_their_own_in_threads_on_one_gpu_give_what_each_gives_alone(own_stream):
    jobs = [live_job("parallel", i, "cuda") for i in range(4)] + [live_job("cone", i, "cuda") for i in range(2)]
    if own_stream:
        jobs = [_on_a_stream_of_its_own(job) for job in jobs]
    live_own_instances_case(jobs, rounds=3)


def test_reconstructors_on_several_gpus_called_from_threads_of_another_gpu():
    """Each reconstructor made on GPU i % n, then called from a thread whose
    current GPU is 0: it runs on its own GPU, bit for bit as alone."""
    n = _gpus()
    if n < 2:
        pytest.skip("needs two GPUs")
    jobs = [live_job("parallel", i, "cuda", device=i % n) for i in range(4)]
    jobs += [live_job("cone", i, "cuda", device=(i + 1) % n) for i in range(2)]
    live_own_instances_case(jobs, rounds=2)


def test_a_reconstructor_shared_by_threads_gives_the_one_thread_slices_on_the_gpu():
    live_shared_instance_case("cuda", tol=1e-5)
