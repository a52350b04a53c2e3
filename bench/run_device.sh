#!/usr/bin/env bash
# Everything the GPU machine is for, in one call (device README: few, full calls).
# Run from the repository root with .peers (ASTRA) and .shared (the real scan)
# carried; results land in $OUT (at most 8 files come back). Switches:
# SANITIZE=0 skips compute-sanitizer, FBP=0 / CONE=0 / RADON=0 skip a benchmark, RABBITCT=1 adds one,
# BENCH_ARGS replaces bench_fbp.py's arguments; PROJECTOR=1 adds bench_projector.py (issue 5).
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 LEVERET_SHARED=$PWD/.shared
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv

echo "== GPU tests =="
python3 -m pytest -m gpu -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15

if [ "${SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck (small sizes) =="
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -p no:cacheprovider \
    "tests/operators/test_parallel_backprojection.py::test_cuda_matches_cpu_texture_mode" \
    tests/algorithms/test_fbp_cuda.py::test_cupy_in_cupy_out_equals_cpu \
    "tests/operators/test_cone_backprojection.py::test_cuda_matches_its_cpu_mirror_and_the_exact_reference" \
    tests/operators/test_projector_cuda.py::test_structured_equals_general \
    tests/operators/test_projector_cuda.py::test_structured_joseph_equals_general \
    tests/operators/test_projector_cuda.py::test_gpu_equals_cpu \
    "tests/algorithms/test_radon3d_cuda.py::test_backproject_kernel_equals_cpu" \
    tests/algorithms/test_radon3d_cuda.py::test_two_stage_stages_poisoned \
    tests/algorithms/test_radon3d_cuda.py::test_forward_kernel_equals_cpu \
    tests/algorithms/test_radon3d_cuda.py::test_backproject_falls_back_to_global_memory \
    tests/algorithms/test_radon3d_cuda.py::test_forward_kernel_global_atomics_equal_cpu \
    tests/algorithms/test_radon3d_cuda.py::test_forward_of_long_projections_on_gpu 2>&1 | tail -6 | tee "$OUT/memcheck.txt"
  echo "memcheck exit: ${PIPESTATUS[0]}" | tee -a "$OUT/memcheck.txt"
fi

echo "== texture weight probe =="
python3 bench/probe_texture_weights.py

echo "== leveret info and demo on the GPU =="
python3 -m leveret info
(cd "$OUT" && python3 -m leveret demo --output demo_gpu.png)

echo "== benchmarks =="
[ -f .peers/activate.sh ] && source .peers/activate.sh
if [ "${FBP:-1}" = 1 ]; then
  python3 bench/bench_fbp.py ${BENCH_ARGS:---gpu --astra --variants} --out "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.txt"
fi
if [ "${CONE:-1}" = 1 ]; then
  (cd bench && python3 bench_cone.py --out "$OUT/bench_cone.json") 2>&1 | tee "$OUT/bench_cone.txt"
fi
if [ "${RADON:-1}" = 1 ]; then
  (cd bench && python3 bench_radon3d.py --gpu --out "$OUT/bench_radon3d.json") 2>&1 | tee "$OUT/bench_radon3d.txt"
fi
if [ "${RABBITCT:-0}" = 1 ]; then
  (cd bench && python3 bench_rabbitct.py --out "$OUT/bench_rabbitct.json") 2>&1 | tee "$OUT/bench_rabbitct.txt"
fi
if [ "${PROJECTOR:-0}" = 1 ]; then
  (cd bench && python3 bench_projector.py --out "$OUT/bench_projector.json") 2>&1 | tee "$OUT/bench_projector.txt"
fi
if [ "${PARKERNELS:-0}" = 1 ]; then   # issue 4: every parallel kernel, bottleneck variants, ASTRA
  python3 bench/bench_parallel_kernels.py --astra --fbp ${PARKERNELS_ARGS:-} --out "$OUT/bench_parallel_kernels.json" 2>&1 | tee "$OUT/bench_parallel_kernels.txt"
fi
if [ "${PARSTACK:-0}" = 1 ]; then     # issue 4 item 5: 2048 slices of 2048^2 from 2048 angles, host to host
  python3 bench/bench_parallel_kernels.py --only-stack --roi --stack "${PARSTACK_N:-2048}" --out "$OUT/bench_parallel_stack.json" 2>&1 | tee "$OUT/bench_parallel_stack.txt"
fi
