// Cone-beam voxel-driven back-projection: paper 002's "kernel B", with two ways
// of reading the projections (TextureFetch: the texture unit's bilinear
// filtering, 8-bit weights; GlobalFetch: exact weights in software). One
// thread owns voxel column (i, j) and LEVERET_CONE_K
// consecutive z voxels from k0; it loops over the views of a pass and keeps
// the K partial sums in registers,
// so the volume is read and written once per pass. Matrices (index -> (uw,
// vw, w)) sit in constant memory: all threads of a warp read the same view.
//
// Arithmetic is rounded as written (no FMA contraction; the reciprocal of w
// correctly rounded, as 1/w is in IEEE float) and the homogeneous coordinates
// step along z by adding the matrix's third column, exactly as the CPU's
// texture-emulating mode computes them, so the two agree to float rounding.
//
// Bottleneck variants (paper 002's method), selected by macros at compile time:
//   LEVERET_CONE_NO_TEXTURE  replace the fetch by arithmetic on (u, v): no texture traffic
//   LEVERET_CONE_NO_UPDATE   compute everything, write the volume only if a sum is NaN
// (the "near-perfect cache hits" variant needs no macro: tiny voxels, from Python).

#ifndef LEVERET_CONE_K
#define LEVERET_CONE_K 8
#endif
#define LEVERET_CONE_MAX_VIEWS 1024

__constant__ float c_cone_mat[LEVERET_CONE_MAX_VIEWS * 12];  // row-major 3x4 per view

__device__ __forceinline__ float dot_row(const float* m, float fi, float fj, float fk)
{
    return __fadd_rn(__fadd_rn(__fadd_rn(__fmul_rn(m[0], fi), __fmul_rn(m[1], fj)),
                               __fmul_rn(m[2], fk)), m[3]);
}

// How a view's value at detector position (u, v) is read: the two kernels
// differ only here.
struct TextureFetch {
    cudaTextureObject_t projections;   // layered: x = u, y = v, layer = view
    __device__ __forceinline__ float operator()(int n, float u, float v) const
    {
#ifdef LEVERET_CONE_NO_TEXTURE
        return __fadd_rn(u, v);
#else
        return tex2DLayered<float>(projections, __fadd_rn(u, 0.5f), __fadd_rn(v, 0.5f), n);
#endif
    }
};

// Software bilinear interpolation with exact float32 weights from global
// memory (loads through the L1/texture cache, __ldg): the accuracy the texture
// unit's 8-bit weights cannot give (RabbitCT's 0.05 HU). The projections carry
// a one-pixel zero border, (rows + 2) x (cols + 2) per view, so the four
// neighbours of any sample on or next to the detector are valid addresses;
// samples farther out are masked to zero.
struct GlobalFetch {
    const float* __restrict__ projections;
    int n_rows, n_cols;
    __device__ __forceinline__ float operator()(int n, float u, float v) const
    {
        const int pitch = n_cols + 2;
        const float cols_f = (float)n_cols, rows_f = (float)n_rows;
        const bool inside = (u > -1.0f) & (u < cols_f) & (v > -1.0f) & (v < rows_f);
        const float fu = floorf(fminf(fmaxf(u, -1.0f), cols_f));
        const float fv = floorf(fminf(fmaxf(v, -1.0f), rows_f));
        const float a = __fsub_rn(u, fu), b = __fsub_rn(v, fv);
        const float* p = projections + (size_t)n * (n_rows + 2) * pitch
                         + ((int)fv + 1) * pitch + ((int)fu + 1);   // +1: the zero border
        const float t00 = __ldg(p), t01 = __ldg(p + 1), t10 = __ldg(p + pitch), t11 = __ldg(p + pitch + 1);
        const float a1 = __fsub_rn(1.0f, a), b1 = __fsub_rn(1.0f, b);
        const float value = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(a1, b1), t00), __fmul_rn(__fmul_rn(a, b1), t01)),
                                      __fadd_rn(__fmul_rn(__fmul_rn(a1, b), t10), __fmul_rn(__fmul_rn(a, b), t11)));
        return inside ? value : 0.0f;
    }
};

template <class Fetch>
__device__ __forceinline__ void backproject_column(const Fetch& fetch, float* __restrict__ out,
                                                   int nx, int ny, int nz, int n_views, int accumulate)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * LEVERET_CONE_K;
    if (i >= nx || j >= ny) return;

    const float fi = (float)i, fj = (float)j, fk0 = (float)k0;
    float sum[LEVERET_CONE_K];
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) sum[k] = 0.0f;

    for (int n = 0; n < n_views; ++n) {
        const float* m = &c_cone_mat[12 * n];
        float qu = dot_row(m, fi, fj, fk0);
        float qv = dot_row(m + 4, fi, fj, fk0);
        float qw = dot_row(m + 8, fi, fj, fk0);
        const float du = m[2], dv = m[6], dw = m[10];
#pragma unroll
        for (int k = 0; k < LEVERET_CONE_K; ++k) {
            const float inv_w = __frcp_rn(qw);
            const float value = fetch(n, __fmul_rn(qu, inv_w), __fmul_rn(qv, inv_w));
            sum[k] = __fadd_rn(sum[k], __fmul_rn(__fmul_rn(value, inv_w), inv_w));
            qu = __fadd_rn(qu, du);
            qv = __fadd_rn(qv, dv);
            qw = __fadd_rn(qw, dw);
        }
    }
    const size_t plane = (size_t)nx * ny;
    const size_t base = (size_t)k0 * plane + (size_t)j * nx + i;
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) {
#ifdef LEVERET_CONE_NO_UPDATE
        if (!(sum[k] != sum[k])) continue;   // never true for finite data: no write
#endif
        if (k0 + k < nz) {
            const size_t idx = base + (size_t)k * plane;
            out[idx] = accumulate ? out[idx] + sum[k] : sum[k];
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
backproject_cone_tex(cudaTextureObject_t projections, float* __restrict__ out,   // out: (nz, ny, nx)
                     int nx, int ny, int nz, int n_views, int accumulate)
{
    backproject_column(TextureFetch{projections}, out, nx, ny, nz, n_views, accumulate);
}

extern "C" __global__ void __launch_bounds__(256)
backproject_cone_global(const float* __restrict__ projections,   // (n_views, rows + 2, cols + 2)
                        float* __restrict__ out,                   // (nz, ny, nx)
                        int nx, int ny, int nz, int n_views, int n_rows, int n_cols, int accumulate)
{
    backproject_column(GlobalFetch{projections, n_rows, n_cols}, out, nx, ny, nz, n_views, accumulate);
}
