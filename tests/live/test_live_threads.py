"""LiveReconstructor called from several threads, on the CPU.

- One reconstructor shared by threads that add disjoint frames while another
  thread reads and moves the slices: the frames' batches then come in another
  order than when one thread adds them, so each slice sums the same float32
  terms in another order (and corrects the neighbours' weights at other
  moments): equal to the one-thread slices within float32 rounding, and every
  counter exactly.
- Reconstructors of their own in threads (other geometries, both beams):
  bit for bit what each gives alone.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from cases import live_job, live_own_instances_case, live_shared_instance_case, parallel_phantom_scan

from leveret.live import LiveReconstructor

N, ROWS = 32, 8


def test_a_reconstructor_shared_by_threads_gives_the_one_thread_slices():
    """Measured at most 4.1e-7 of the peak from the one-thread slices (five
    runs); the bound, 2e-6, leaves a margin of 5."""
    live_shared_instance_case("cpu", tol=2e-6)


def test_reconstructors_of_their_own_in_threads_give_what_each_gives_alone():
    live_own_instances_case(
        [live_job("parallel", 0, "cpu"), live_job("parallel", 1, "cpu"), live_job("cone", 0, "cpu")]
    )


def test_a_frame_buffer_is_handed_out_while_a_batch_runs():
    """frame_buffer takes the pool's lock only: a source gets buffers while
    another thread's batch holds the reconstructor."""
    angles, g, proj = parallel_phantom_scan(N, ROWS, 8)
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    inside, release = threading.Event(), threading.Event()
    real = rec._filter

    def slow_filter(lines):  # the batch stops inside the reconstructor's lock
        inside.set()
        assert release.wait(30)
        return real(lines)

    rec._filter = slow_filter
    worker = threading.Thread(target=rec.add, args=(proj[:4], angles[:4]))
    worker.start()
    try:
        assert inside.wait(30)
        got = []
        getter = threading.Thread(target=lambda: got.append(rec.frame_buffer(np.float32)))
        getter.start()
        getter.join(10)
        assert got and got[0].shape == (ROWS, N)
        assert rec.n_views == 0 and rec.missing_indices() == []  # counters read without waiting
    finally:
        release.set()
        worker.join(30)
    assert rec.n_views == 4


@pytest.mark.parametrize("name", ["live_planes", "correct"])
def test_the_live_kernels_keep_no_constant_memory(name):
    """Any number of reconstructors share the compiled live kernels: every
    table is a kernel argument, none lives in __constant__ memory (which would
    have to be lent through leveret.cuda.device_state)."""
    from leveret.cuda._module import KERNEL_DIR

    assert "__constant__" not in (KERNEL_DIR / f"{name}.cu").read_text()
