// Host (CPU) build of ray_weights.cu for tests/cuda/test_ray_weights.py: the
// kernel runs from its own source, one "thread" at a time over its launch
// grid (raytrace.py's BLOCK-wide blocks, grid_y rows of blocks striding the
// rows as on the GPU), compiled with -ffp-contract=off.
#include "host_cuda.h"
static dim gridDim;
#include RAY_WEIGHTS_CU
extern "C" void run_ray_length_weight(const float* y, float* out, const double* frames, int n_views, int n_rows,
                                      int n_cols, int block, int grid_y)
{
    blockDim.x = block; gridDim.y = grid_y;
    for (int by = 0; by < grid_y; ++by)
        for (int bx = 0; bx < (n_cols + block - 1) / block; ++bx)
            for (int t = 0; t < block; ++t) {
                blockIdx.x = bx; blockIdx.y = by; threadIdx.x = t;
                ray_length_weight(y, out, frames, n_rows, n_cols, (long long)n_views * n_rows);
            }
}
