// Host (CPU) build of radon3d.cu for tests/cuda/test_radon3d_host.py: the
// global-memory back-projection kernels and both forward kernels (shared
// histogram and global atomics) run from their own source, one "thread" at a
// time, so their index arithmetic, bounds and launch grid can be checked
// against the Numba kernels on a machine without a GPU (compiled with
// -ffp-contract=off; the _rn intrinsics are the plain operators). __ldg checks that
// every read lies inside the array the test registered (a read outside sets
// g_bad_reads); atomics are plain adds. The shared-memory back-projection uses
// inline PTX and is left out (LEVERET_RADON3D_HOST): the NumPy mirror in
// tests/algorithms/test_radon3d_kernel_mirror.py checks it.
#include "host_cuda.h"
using std::floor; using std::fma;
#define __align__(n)     // smem_raw below is aligned
#define LEVERET_RADON3D_HOST 1

static const char* g_lo[2];
static const char* g_hi[2];
static long long g_bad_reads = 0;
template <typename T> static inline T __ldg(const T* p)
{
    const char* c = reinterpret_cast<const char*>(p);
    bool ok = false;
    for (int k = 0; k < 2; ++k) ok = ok || (c >= g_lo[k] && c + sizeof(T) <= g_hi[k]);
    if (!ok) { ++g_bad_reads; return T(0); }
    return *p;
}
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
template <typename T> static inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
alignas(16) unsigned char smem_raw[1 << 20];
#include RADON3D_CU

static void allow(int k, const void* p, long long bytes)
{
    g_lo[k] = static_cast<const char*>(p);
    g_hi[k] = g_lo[k] + bytes;
}

extern "C" long long bad_reads() { return g_bad_reads; }

// The global back-projection kernels over the launcher's grid (gx, gy, gz), blocks of RADON_BX x RADON_BY.
extern "C" void run_bp_global(int f64, int zpt, const void* proj, long long proj_bytes, long long proj_bstride,
                              const double* table, long long table_rows, int table_bstride, void* out,
                              int nx, int ny, int nb, int n_dirs, int n_samples, int b_offset, int accumulate,
                              unsigned gx, unsigned gy, unsigned gz)
{
    allow(0, proj, proj_bytes);
    allow(1, table, table_rows * 4 * (long long)sizeof(double));
    blockDim.x = RADON_BX; blockDim.y = RADON_BY; blockDim.z = 1;
    for (unsigned bz = 0; bz < gz; ++bz) for (unsigned by = 0; by < gy; ++by) for (unsigned bx = 0; bx < gx; ++bx)
        for (unsigned ty = 0; ty < RADON_BY; ++ty) for (unsigned tx = 0; tx < RADON_BX; ++tx) {
            blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz; threadIdx.x = tx; threadIdx.y = ty;
            if (f64 && zpt == 4) radon3d_bp_global_f64_z4((const double*)proj, proj_bstride, table, table_bstride, (double*)out, nx, ny, nb, n_dirs, n_samples, b_offset, accumulate);
            else if (f64) radon3d_bp_global_f64_z1((const double*)proj, proj_bstride, table, table_bstride, (double*)out, nx, ny, nb, n_dirs, n_samples, b_offset, accumulate);
            else if (zpt == 4) radon3d_bp_global_f32_z4((const float*)proj, proj_bstride, table, table_bstride, (float*)out, nx, ny, nb, n_dirs, n_samples, b_offset, accumulate);
            else radon3d_bp_global_f32_z1((const float*)proj, proj_bstride, table, table_bstride, (float*)out, nx, ny, nb, n_dirs, n_samples, b_offset, accumulate);
        }
}

// grid (n_dirs, ceil(nz / k_per_block)); one thread per block (blockDim.x = 1) runs a
// block's strided loops whole, so the shared histogram's zeroing, scatter and flush
// happen in order. out must be zeroed by the caller, as the launcher does.
extern "C" void run_forward(int f64, int shared, const void* vol, void* out, const double* table, int nx, int ny,
                            int nz, int n_dirs, int n_samples, int k_per_block)
{
    blockDim.x = 1; blockDim.y = 1; blockDim.z = 1; threadIdx.x = 0; threadIdx.y = 0;
    const unsigned gy = (nz + k_per_block - 1) / k_per_block;
    for (unsigned by = 0; by < gy; ++by) for (int q = 0; q < n_dirs; ++q) {
        blockIdx.x = q; blockIdx.y = by; blockIdx.z = 0;
        if (f64 && shared) radon3d_fwd_f64((const double*)vol, table, (double*)out, nx, ny, nz, n_samples, k_per_block);
        else if (f64) radon3d_fwd_global_f64((const double*)vol, table, (double*)out, nx, ny, nz, n_samples, k_per_block);
        else if (shared) radon3d_fwd_f32((const float*)vol, table, (float*)out, nx, ny, nz, n_samples, k_per_block);
        else radon3d_fwd_global_f32((const float*)vol, table, (float*)out, nx, ny, nz, n_samples, k_per_block);
    }
}
