#!/usr/bin/env bash
# Run on a GPU machine from the repository root: the GPU tests, compute-sanitizer
# memcheck on a small set of them, then the benchmarks, each writing its table
# (.txt) and JSON into the output folder.
#
# usage: bash bench/run.sh [--out DIR] [--no-tests] [--no-sanitize] [--bench LIST] [--sanitize-tests FILE]
#
#   --out DIR             output folder (default: $OUT if set, else bench-out); made if missing
#   --no-tests            skip the GPU test suite (pytest -m gpu)
#   --no-sanitize         skip compute-sanitizer
#   --sanitize-tests FILE pytest node ids to run under compute-sanitizer, one per
#                         line (default: the list in this script, small problems
#                         covering every kernel family)
#   --bench LIST          comma-separated benchmarks (default: fbp,cone,projector,radon3d,parallel_kernels);
#                         also: rabbitct, stack (the 2048-slice scan, 64 GiB of host
#                         memory), cone_threshold, outofcore, preprocess (Paganin and ring
#                         removal on 2048^3, httomolibgpu beside), helical; "none" runs no benchmark
#
# ASTRA rows appear where `import astra` works in the Python that runs this
# (python3, or $PYTHON). Results are copied to bench/results/<gpu>/ by hand.
set -uo pipefail
OUT=${OUT:-bench-out} TESTS=1 SANITIZE=1 BENCH=fbp,cone,projector,radon3d,parallel_kernels SANITIZE_FILE=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --no-sanitize) SANITIZE=0; shift ;;
    --sanitize-tests) SANITIZE_FILE=$2; shift 2 ;;
    --bench) BENCH=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
status=0

if [ "$TESTS" = 1 ]; then
  echo "== GPU tests =="
  $PY -m pytest -m gpu -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if [ "$SANITIZE" = 1 ]; then
  echo "== compute-sanitizer memcheck =="
  if [ -n "$SANITIZE_FILE" ]; then
    mapfile -t NODES < "$SANITIZE_FILE"
  else
    NODES=(
      tests/operators/test_parallel_backprojection.py::test_cuda_matches_cpu_texture_mode
      tests/algorithms/test_fbp_cuda.py::test_cupy_in_cupy_out_equals_cpu
      tests/operators/test_cone_backprojection.py::test_cuda_matches_its_cpu_mirror_and_the_exact_reference
      tests/cuda/test_raytrace_gpu.py::test_structured_siddon_equals_general
      tests/cuda/test_raytrace_gpu.py::test_structured_siddon_transpose_in_any_view_group_and_slab
      tests/cuda/test_raytrace_gpu.py::test_structured_joseph_equals_general
      tests/operators/test_projector_cuda.py::test_gpu_equals_cpu
      tests/cuda/test_raytrace_gpu.py::test_structured_siddon_opts_in_to_more_shared_memory_on_wide_grids
      tests/cuda/test_raytrace_gpu.py::test_structured_siddon_float32_march_against_float64
      tests/cuda/test_raytrace_gpu.py::test_voxel_transpose_every_depth_and_patch
      tests/cuda/test_raytrace_gpu.py::test_structured_joseph_voxel_transpose_equals_atomic
      tests/operators/test_projector_unmatched_adjoint.py::test_voxel_adjoint_cuda_equals_cpu
      tests/cuda/test_ray_weights.py::test_gpu_weights_equal_the_cpu_weights
      tests/algorithms/test_radon3d_cuda.py::test_backproject_kernel_equals_cpu
      tests/algorithms/test_radon3d_cuda.py::test_two_stage_stages_poisoned
      tests/algorithms/test_radon3d_cuda.py::test_forward_kernel_equals_cpu
      tests/algorithms/test_radon3d_cuda.py::test_backproject_falls_back_to_global_memory
      tests/algorithms/test_radon3d_cuda.py::test_forward_kernel_global_atomics_equal_cpu
      tests/algorithms/test_radon3d_cuda.py::test_forward_of_long_projections_on_gpu
    )
  fi
  compute-sanitizer --tool memcheck --error-exitcode 9 $PY -m pytest -m gpu -q -p no:cacheprovider -x \
    "${NODES[@]}" 2>&1 | tail -8 | tee "$OUT/memcheck.txt"
  rc=${PIPESTATUS[0]}
  echo "memcheck exit: $rc" | tee -a "$OUT/memcheck.txt"
  [ "$rc" = 0 ] || status=1
fi

bench() {   # bench NAME SCRIPT ARGS...: run one benchmark, table to NAME.txt, JSON to NAME.json
  local name=$1 script=$2; shift 2
  echo "== $name =="
  $PY "bench/$script" "$@" --out "$OUT/$name.json" 2>&1 | tee "$OUT/$name.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
IFS=, read -ra LIST <<< "$BENCH"
for b in "${LIST[@]}"; do
  case "$b" in
    fbp) bench bench_fbp bench_fbp.py --gpu --astra --floor ;;
    cone) bench bench_cone bench_cone.py --sizes 512 1024 ;;
    cone_threshold) bench bench_cone_auto_threshold bench_cone.py --auto-threshold ;;
    projector) bench bench_projector bench_projector.py ;;
    radon3d) bench bench_radon3d bench_radon3d.py --gpu ;;
    parallel_kernels) bench bench_parallel_kernels bench_parallel_kernels.py --astra --fbp ;;
    stack) bench bench_parallel_kernels_stack bench_parallel_kernels.py --only-stack --roi --stack 2048 ;;
    rabbitct) bench bench_rabbitct bench_rabbitct.py --size 256 ;;
    outofcore) bench bench_outofcore bench_outofcore.py --backend cuda --sizes 512 1024 ;;
    preprocess) bench bench_preprocess bench_preprocess.py --split ;;
    helical) bench bench_helical bench_helical.py ;;
    none) ;;
    *) echo "run.sh: unknown benchmark $b" >&2; status=2 ;;
  esac
done
exit $status
