// Live reconstruction's back-projections (launcher: live_planes.py; CPU
// mirror: leveret/cpu/live_planes.py).
// - parallel_points_* / cone_points_*: onto arbitrary 3D points (the pixels of
//   a slice at any orientation), one thread per point, looping over the views;
// - plane_f32 / plane_f16 / plane_tex: parallel beam onto a plane whose pixel
//   positions are computed, not read;
// - store_f32 / store_f16: filtered views copied into the store.
// q holds filtered projections (n_stored, n_rows, n_cols) as float or half;
// views[k] picks the stored view of step k and coef[k] its weight.
// Samples are bilinear with zero outside the detector, as the CPU mirror
// computes them (in float32 here, float64 there). No constant memory: every
// table is a kernel argument, so any number of callers may share the module.

#ifndef LEVERET_LIVE_BLOCK
#error "live_planes.cu needs its constants from leveret.cuda.live_planes.DEFINES"
#endif

__device__ __forceinline__ float load(const float* q, long long i) { return q[i]; }
// fp16 values arrive as their 16 bits (no header needed): converted by the hardware.
__device__ __forceinline__ float load(const unsigned short* q, long long i) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(q[i]));
    return f;
}

template <typename T>
__device__ __forceinline__ float bilinear(const T* q, long long base, int n_rows, int n_cols,
                                          float row, float col, int pitch) {
    float fr = floorf(row), fc = floorf(col);
    int r0 = (int)fr, c0 = (int)fc;
    float b = row - fr, a = col - fc;
    float out = 0.0f;
    if (r0 >= 0 && r0 < n_rows) {
        long long o = base + (long long)r0 * pitch;
        if (c0 >= 0 && c0 < n_cols) out += (1.0f - a) * (1.0f - b) * load(q, o + c0);
        if (c0 + 1 >= 0 && c0 + 1 < n_cols) out += a * (1.0f - b) * load(q, o + c0 + 1);
    }
    if (b != 0.0f && r0 + 1 >= 0 && r0 + 1 < n_rows) {   // b == 0: on a row (axial slices on the grid)
        long long o = base + (long long)(r0 + 1) * pitch;
        if (c0 >= 0 && c0 < n_cols) out += (1.0f - a) * b * load(q, o + c0);
        if (c0 + 1 >= 0 && c0 + 1 < n_cols) out += a * b * load(q, o + c0 + 1);
    }
    return out;
}

// Parallel beam: column = x a[k] + y b[k] + c[k] (params[3k..3k+2]); the row
// depends on z only: row = z * row_scale + row_offset.
template <typename T>
__device__ void parallel_points(const T* q, const float* points, const int* views, const float* params,
                                const float* coef, float* out, int n_points, int n_views, int n_rows,
                                int n_cols, float row_scale, float row_offset) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_points) return;
    float x = points[3 * p], y = points[3 * p + 1], z = points[3 * p + 2];
    float row = z * row_scale + row_offset;
    long long view_size = (long long)n_rows * n_cols;
    float acc = 0.0f;
    for (int k = 0; k < n_views; ++k) {
        float col = fmaf(x, params[3 * k], fmaf(y, params[3 * k + 1], params[3 * k + 2]));
        acc += coef[k] * bilinear(q, views[k] * view_size, n_rows, n_cols, row, col, n_cols);
    }
    out[p] += acc;
}

// Cone beam: (u w, v w, w) = P_k (x, y, z, 1) with the normalised matrices
// (params[12k..12k+11]); each sample is weighted by 1 / w^2.
template <typename T>
__device__ void cone_points(const T* q, const float* points, const int* views, const float* params,
                            const float* coef, float* out, int n_points, int n_views, int n_rows,
                            int n_cols) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_points) return;
    float x = points[3 * p], y = points[3 * p + 1], z = points[3 * p + 2];
    long long view_size = (long long)n_rows * n_cols;
    float acc = 0.0f;
    for (int k = 0; k < n_views; ++k) {
        const float* m = params + 12 * k;
        float w = m[8] * x + m[9] * y + m[10] * z + m[11];
        if (w <= 0.0f) continue;
        float inv = 1.0f / w;
        float u = (m[0] * x + m[1] * y + m[2] * z + m[3]) * inv;
        float v = (m[4] * x + m[5] * y + m[6] * z + m[7]) * inv;
        acc += coef[k] * bilinear(q, views[k] * view_size, n_rows, n_cols, v, u, n_cols) * inv * inv;
    }
    out[p] += acc;
}

#define PARALLEL_ARGS const float* points, const int* views, const float* params, const float* coef, \
    float* out, int n_points, int n_views, int n_rows, int n_cols, float row_scale, float row_offset
#define PARALLEL_CALL points, views, params, coef, out, n_points, n_views, n_rows, n_cols, row_scale, row_offset
#define CONE_ARGS const float* points, const int* views, const float* params, const float* coef, \
    float* out, int n_points, int n_views, int n_rows, int n_cols
#define CONE_CALL points, views, params, coef, out, n_points, n_views, n_rows, n_cols

extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK) parallel_points_f32(const float* q, PARALLEL_ARGS) { parallel_points(q, PARALLEL_CALL); }
extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK) parallel_points_f16(const unsigned short* q, PARALLEL_ARGS) { parallel_points(q, PARALLEL_CALL); }
extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK) cone_points_f32(const float* q, CONE_ARGS) { cone_points(q, CONE_CALL); }
extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK) cone_points_f16(const unsigned short* q, CONE_ARGS) { cone_points(q, CONE_CALL); }

// Parallel beam onto a plane: pixel (j, i) of an (h, w) slice lies at
// g[0..2] + i g[3..5] + j g[6..8] (world x, y, z); its detector column in
// view k is (x cos + y sin) / det_spacing + center, with (cos, sin) /
// det_spacing in params[3k], params[3k+1] and the weight in params[3k+2];
// its row is z / row_spacing + row_offset (the same in every view). The
// points are computed, not read: one launch per slice and batch.
#define TEX_CHUNK 256   // views whose parameters a block stages in shared memory at a time

// g (12 floats): ox, oy, oz, ux, uy, uz, vx, vy, vz, center, row_scale, row_offset.
// Exact float32 bilinear weights, from views at view_stride elements with
// rows pitch elements apart (the padded FFT output, or a pitched store block).
template <typename T>
__device__ void plane_exact(const T* q, long long view_stride, int pitch, int n_rows, int n_cols,
                            const int* views, const float* params, int n_views, const float* __restrict__ gp,
                            float* out, int h, int w) {
    __shared__ int s_view[TEX_CHUNK];
    __shared__ float3 s_par[TEX_CHUNK];
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    const float x = gp[0] + i * gp[3] + j * gp[6], y = gp[1] + i * gp[4] + j * gp[7];
    const float z = gp[2] + i * gp[5] + j * gp[8], center = gp[9];
    const float row = fmaf(z, gp[10], gp[11]);
    float acc = 0.0f;
    for (int k0 = 0; k0 < n_views; k0 += TEX_CHUNK) {
        const int m = min(TEX_CHUNK, n_views - k0);
        __syncthreads();
        for (int t = threadIdx.x; t < m; t += blockDim.x) {
            s_view[t] = views[k0 + t];
            s_par[t] = make_float3(params[3 * (k0 + t)], params[3 * (k0 + t) + 1], params[3 * (k0 + t) + 2]);
        }
        __syncthreads();
        for (int k = 0; k < m; ++k) {
            const float3 p = s_par[k];
            const float col = fmaf(x, p.x, fmaf(y, p.y, center));
            acc = fmaf(p.z, bilinear(q, s_view[k] * view_stride, n_rows, n_cols, row, col, pitch), acc);
        }
    }
    if (i < w) out[(long long)j * w + i] += acc;
}

extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK)
plane_f32(const float* q, long long view_stride, int pitch, int n_rows, int n_cols, const int* views,
          const float* params, int n_views, const float* __restrict__ gp, float* out, int h, int w)
{ plane_exact(q, view_stride, pitch, n_rows, n_cols, views, params, n_views, gp, out, h, w); }

extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK)
plane_f16(const unsigned short* q, long long view_stride, int pitch, int n_rows, int n_cols, const int* views,
          const float* params, int n_views, const float* __restrict__ gp, float* out, int h, int w)
{ plane_exact(q, view_stride, pitch, n_rows, n_cols, views, params, n_views, gp, out, h, w); }

// The same sum through the texture unit: one 2D texture object per stored
// view (float or half texels on the pitched store, linear filtering, border
// zero); tex[k] is view k's object, params[3k..3k+2] as above. Each block
// stages a chunk of the views' objects and parameters in shared memory, so
// the loop issues one texture fetch and no global load per view and pixel.
// The interpolation weights have the texture unit's 8-bit fractions.
extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK)
plane_tex(const unsigned long long* __restrict__ tex, const float* __restrict__ params, int n_views,
          const float* __restrict__ gp, float* out, int h, int w)
{
    __shared__ unsigned long long s_tex[TEX_CHUNK];
    __shared__ float3 s_par[TEX_CHUNK];
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    const float x = gp[0] + i * gp[3] + j * gp[6], y = gp[1] + i * gp[4] + j * gp[7];
    const float z = gp[2] + i * gp[5] + j * gp[8], center = gp[9] + 0.5f;   // texel centres at +0.5
    const float row = fmaf(z, gp[10], gp[11]) + 0.5f;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n_views; k0 += TEX_CHUNK) {
        const int m = min(TEX_CHUNK, n_views - k0);
        __syncthreads();
        for (int t = threadIdx.x; t < m; t += blockDim.x) {
            s_tex[t] = tex[k0 + t];
            s_par[t] = make_float3(params[3 * (k0 + t)], params[3 * (k0 + t) + 1], params[3 * (k0 + t) + 2]);
        }
        __syncthreads();
#pragma unroll 4
        for (int k = 0; k < m; ++k) {
            const float3 p = s_par[k];
            const float col = fmaf(x, p.x, fmaf(y, p.y, center));
            acc = fmaf(p.z, tex2D<float>((cudaTextureObject_t)s_tex[k], col, row), acc);
        }
    }
    if (i < w) out[(long long)j * w + i] += acc;
}

// Copy filtered float32 views (rows src_pitch apart, views src_stride apart)
// into the store (float or half, its own pitch and view stride).
__device__ __forceinline__ void put(float* d, long long i, float v) { d[i] = v; }
__device__ __forceinline__ void put(unsigned short* d, long long i, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    d[i] = h;
}

template <typename T>
__device__ void store_views(const float* __restrict__ src, long long src_stride, int src_pitch,
                            T* __restrict__ dst, long long dst_stride, int dst_pitch, int n_cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y, v = blockIdx.z;
    if (c >= n_cols) return;
    put(dst, v * dst_stride + (long long)r * dst_pitch + c, src[v * src_stride + (long long)r * src_pitch + c]);
}

extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK)
store_f32(const float* src, long long src_stride, int src_pitch, float* dst, long long dst_stride, int dst_pitch,
          int n_cols)
{ store_views(src, src_stride, src_pitch, dst, dst_stride, dst_pitch, n_cols); }

extern "C" __global__ void __launch_bounds__(LEVERET_LIVE_BLOCK)
store_f16(const float* src, long long src_stride, int src_pitch, unsigned short* dst, long long dst_stride,
          int dst_pitch, int n_cols)
{ store_views(src, src_stride, src_pitch, dst, dst_stride, dst_pitch, n_cols); }
