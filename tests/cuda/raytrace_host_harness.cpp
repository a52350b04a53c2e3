// Host (CPU) build of the raytrace_*.cu kernels for tests/cuda/test_raytrace_host.py:
// the CUDA built-ins the kernels use are given plain C++ meanings (one "thread"
// at a time, atomics as plain adds, the IEEE-rounded intrinsics as the
// operators, compiled with -ffp-contract=off), so the kernels' own source can
// be checked against the Numba operators on a machine without a GPU. The
// structured kernels run with blockDim.x = 1: one thread does all of a block's
// work between the (empty) barriers. Built with the kernel folder on the
// include path and raytrace.py's KERNEL_CONSTANTS as -D options (host_build.py).
#include "host_cuda.h"
static inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
static inline long long __double2ll_rn(double a) { return std::llrint(a); }
template <typename T> static inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
static inline int atomicOr(int* p, int v) { int o = *p; *p = o | v; return o; }
// One lane at a time: a warp vote is the lane's own predicate (the kernels'
// voted branches compute the same values either way), a warp's min or max
// its own value (Siddon's transpose then steps through the lane's own segments).
static inline bool __all_sync(unsigned, bool p) { return p; }
static inline int __reduce_min_sync(unsigned, int v) { return v; }
static inline int __reduce_max_sync(unsigned, int v) { return v; }
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct double2 { double x, y; };
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
double smem[1 << 16];
#include "raytrace_general.cu"
#include "raytrace_siddon.cu"
#include "raytrace_joseph.cu"
#include "raytrace_voxel.cu"
#include "raytrace_layout.cu"
extern "C" void run_general(int which, void* vol, void* proj, int nx, int ny, int nz, const double* params,
                            const double* g, int n_views, int n_rows, int n_cols, int kind, int is2d)
{
    long long n = (long long)n_views * n_rows * n_cols;
    blockDim.x = 256;
    for (long long r = 0; r < n; ++r) {
        blockIdx.x = (unsigned)(r / 256); threadIdx.x = (unsigned)(r % 256);
        switch (which) {
        case 0: siddon_forward_f64((double*)vol, (double*)proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d); break;
        case 1: siddon_adjoint_f64((double*)vol, (double*)proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d); break;
        case 2: joseph_forward_f64((double*)vol, (double*)proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d); break;
        case 3: joseph_adjoint_f64((double*)vol, (double*)proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d); break;
        }
    }
}
extern "C" void run_structured(int adj, double* volT, double* proj, int nx, int ny, int nz, const double* params,
                               const double* g, int n_views, int n_rows, int n_cols)
{
    blockDim.x = 1; threadIdx.x = 0;
    for (int v = 0; v < n_views; ++v) for (int c = 0; c < n_cols; ++c) {
        blockIdx.x = c; blockIdx.y = v;
        if (adj) structured_siddon_adjoint_f64(volT, proj, nx, ny, nz, params, g, n_rows, n_cols);
        else structured_siddon_forward_f64(volT, proj, nx, ny, nz, params, g, n_rows, n_cols);
    }
}
// The transpose runs in z slabs of z_slab slices, as raytrace.py launches it.
extern "C" void run_structured_fast(int adj, float* volT, float* proj, int nx, int ny, int nz, const double* params,
                                    const double* g, int n_views, int n_rows, int n_cols, int z_slab)
{
    blockDim.x = 1; threadIdx.x = 0;
    for (int z0 = 0; z0 < nz; z0 += z_slab)
        for (int v = 0; v < n_views; ++v) for (int c = 0; c < n_cols; ++c) {
            blockIdx.x = c; blockIdx.y = v;
            if (adj)
                structured_siddon_adjoint_fast(volT, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, 1, z0,
                                               z0 + z_slab < nz ? z0 + z_slab : nz);
            else if (z0 == 0)
                structured_siddon_forward_fast(volT, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, 1);
        }
}
extern "C" void run_joseph_fast(int adj, float* vol, float* proj, int nx, int ny, int nz, const double* params,
                                const double* g, int n_views, int n_rows, int n_cols, int kind, int is2d)
{
    long long n = (long long)n_views * n_rows * n_cols;
    blockDim.x = 256;
    for (long long r = 0; r < n; ++r) {
        blockIdx.x = (unsigned)(r / 256); threadIdx.x = (unsigned)(r % 256);
        if (adj) joseph_adjoint_fast(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d);
        else joseph_forward_fast(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d);
    }
}
extern "C" void run_structured_joseph(int adj, float* volP, float* proj, int nx, int ny, int nz, const double* params,
                                      const double* g, int n_views, int n_rows, int n_cols)
{
    blockDim.x = 1; threadIdx.x = 0;
    for (int v = 0; v < n_views; ++v) for (int c = 0; c < n_cols; ++c) {
        blockIdx.x = c; blockIdx.y = v;   // view groups of one
        if (adj == 2) structured_joseph_adjoint_band(volP, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, 1);
        else if (adj) structured_joseph_adjoint_fast(volP, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, 1);
        else structured_joseph_forward_fast(volP, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, 1);
    }
}
// Structured Joseph's voxel transpose: the column numbers and the values for
// all views, then every thread of the gather's grid (blocks of 8 warps on
// JV_WX x JV_WY patches of voxel columns, n_tiles z tiles of 32 kz voxels from
// k_base) in turn, into the z-fastest volume volT (ny, nx, nz).
extern "C" void run_joseph_voxel(float* volT, const float* proj, int nx, int ny, int nz, const double* params,
                                 const double* g, int n_views, int n_rows, int n_cols, const float* vf, int kz,
                                 int k_base, int n_tiles)
{
    const int rows_p = n_rows + JV_PAD_LO + JV_PAD_HI;
    double* cols = new double[(size_t)n_views * n_cols * JV_NCOL];
    int* flags = new int[n_views]();
    float* values = new float[(size_t)n_views * n_cols * rows_p];
    blockDim.x = 1; blockDim.y = 1; threadIdx.x = 0; threadIdx.y = 0;
    for (long long t = 0; t < (long long)n_views * n_cols; ++t) {
        blockIdx.x = (unsigned)t;
        joseph_voxel_columns(cols, flags, params, g, nx, ny, n_views, n_cols);
    }
    blockDim.x = 1; blockDim.y = 1;   // one "thread" per tile: its loops cover it, the barrier separates nothing
    for (int v = 0; v < n_views; ++v)
        for (int by = 0; by < (rows_p + 31) / 32; ++by)
            for (int bx = 0; bx < (n_cols + 31) / 32; ++bx) {
                blockIdx.x = bx; blockIdx.y = by; blockIdx.z = v;
                joseph_voxel_values(values, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols);
            }
    blockDim.x = 256; blockDim.y = 1; blockDim.z = 1;
    for (int bz = 0; bz < n_tiles; ++bz)
        for (int by = 0; by < (ny + JV_WY * JV_PATCH - 1) / (JV_WY * JV_PATCH); ++by)
            for (int bx = 0; bx < (nx + JV_WX * JV_PATCH - 1) / (JV_WX * JV_PATCH); ++bx)
                for (int t = 0; t < 256; ++t) {
                    blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz; threadIdx.x = t;
                    switch (kz) {   // the instances raytrace.py's VOXEL_KZ lists
                    case 1: joseph_voxel_gather_kz1(volT, values, cols, flags, vf, g, nx, ny, nz, n_views, n_rows, n_cols, 0, k_base); break;
                    case 4: joseph_voxel_gather_kz4(volT, values, cols, flags, vf, g, nx, ny, nz, n_views, n_rows, n_cols, 0, k_base); break;
                    case 8: joseph_voxel_gather_kz8(volT, values, cols, flags, vf, g, nx, ny, nz, n_views, n_rows, n_cols, 0, k_base); break;
                    case 12: joseph_voxel_gather_kz12(volT, values, cols, flags, vf, g, nx, ny, nz, n_views, n_rows, n_cols, 0, k_base); break;
                    case 16: joseph_voxel_gather_kz16(volT, values, cols, flags, vf, g, nx, ny, nz, n_views, n_rows, n_cols, 0, k_base); break;
                    default: return;   // no such instance: the output stays poisoned
                    }
                }
    delete[] cols; delete[] values; delete[] flags;
}
// The z-fastest copy kernels, one "thread" per block (blockDim (1, 1): the loops
// cover the tile, the barrier separates nothing).
extern "C" void run_zfast(int to, int padded, const float* src, float* dst, int nx, int ny, int nz)
{
    blockDim.x = 1; blockDim.y = 1; blockDim.z = 1; threadIdx.x = 0; threadIdx.y = 0; threadIdx.z = 0;
    for (int j = 0; j < ny; ++j)
        for (int by = 0; by < (nz + 31) / 32; ++by)
            for (int bx = 0; bx < (nx + 31) / 32; ++bx) {
                blockIdx.x = bx; blockIdx.y = by; blockIdx.z = j;
                if (padded) {
                    if (to) to_zpad_f32(src, dst, nx, ny, nz);
                    else from_zpad_f32(src, dst, nx, ny, nz);
                } else {
                    if (to) to_zfast_f32(src, dst, nx, ny, nz);
                    else from_zfast_f32(src, dst, nx, ny, nz);
                }
            }
}
