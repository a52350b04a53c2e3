// Host (CPU) build of tv.cu for tests/cuda/test_tv_host.py: the kernels run
// from their own source, one "thread" at a time over a launch grid of `grid`
// blocks of `block` threads (fewer blocks than voxels exercises the
// grid-stride loops), compiled with -ffp-contract=off like the Numba mirror
// they are compared with.
#include "host_cuda.h"
static dim gridDim;
#include TV_CU

static void launch_grid(int grid, int block)
{
    gridDim.x = grid; gridDim.y = 1; blockDim.x = block; blockDim.y = 1;
}

#define HOST_ENTRY_POINTS(T, SUFFIX)                                                                         \
extern "C" void run_primal_##SUFFIX(const T* a, const T* b, int has_b, T c, T s, const T* s_arr,            \
                                     int has_s_arr, const T* q, T* out, T lo, T hi, int nz, int ny, int nx, \
                                     int ndim, int grid, int block)                                         \
{                                                                                                            \
    launch_grid(grid, block);                                                                                \
    for (int bx = 0; bx < grid; ++bx)                                                                        \
        for (int t = 0; t < block; ++t) {                                                                    \
            blockIdx.x = bx; threadIdx.x = t;                                                                \
            tv_primal_##SUFFIX(a, b, has_b, c, s, s_arr, has_s_arr, q, out, lo, hi, nz, ny, nx, ndim);     \
        }                                                                                                    \
}                                                                                                            \
extern "C" void run_dual_##SUFFIX(const T* z0, const T* z1, int has_z1, T c0, T c1, const T* r, T* q,       \
                                   T* r_out, int has_r_out, T sigma, T beta, T bound, int nz, int ny,       \
                                   int nx, int ndim, int grid, int block)                                   \
{                                                                                                            \
    launch_grid(grid, block);                                                                                \
    for (int bx = 0; bx < grid; ++bx)                                                                        \
        for (int t = 0; t < block; ++t) {                                                                    \
            blockIdx.x = bx; threadIdx.x = t;                                                                \
            tv_dual_##SUFFIX(z0, z1, has_z1, c0, c1, r, q, r_out, has_r_out, sigma, beta, bound, nz, ny,   \
                             nx, ndim);                                                                      \
        }                                                                                                    \
}                                                                                                            \
extern "C" void run_norm_sum_##SUFFIX(const T* x, double* partials, int nz, int ny, int nx, int ndim,       \
                                       int grid, int block)                                                 \
{                                                                                                            \
    launch_grid(grid, block);                                                                                \
    for (int bx = 0; bx < grid; ++bx)                                                                        \
        for (int t = 0; t < block; ++t) {                                                                    \
            blockIdx.x = bx; threadIdx.x = t;                                                                \
            tv_norm_sum_##SUFFIX(x, partials, nz, ny, nx, ndim);                                             \
        }                                                                                                    \
}

HOST_ENTRY_POINTS(float, f32)
HOST_ENTRY_POINTS(double, f64)
