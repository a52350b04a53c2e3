// Parallel-beam voxel-driven back-projection through the texture unit.
//
// One thread per output pixel and a pass of up to LEVERET_PAR_MAX_ANGLES
// projections whose (a, b, c) rows sit in constant memory: every thread of a
// warp reads the same row, so the constant cache broadcasts it. The texture
// coordinate is rounded exactly as the CPU reference computes it (no FMA
// contraction), so a CPU that quantises the interpolation weight like the
// texture unit reproduces these kernels.
//
// Two layouts of the layered texture (x = column, y = angle, layer):
//   backproject_parallel_tex   float texels, one slice per layer
//   backproject_parallel_tex2  float2 texels, slices 2L and 2L+1 in layer L:
//                              one fetch filters both, and 64-bit texels
//                              filter at ~60 % of the 32-bit rate, so this
//                              moves ~1.2x the slice-updates per second.

#ifndef LEVERET_PAR_MAX_ANGLES
#error "backproject_parallel.cu: compile with the launcher's DEFINES (leveret.cuda.backproject_parallel.DEFINES)"
#endif
// LEVERET_PAR_MAX_ANGLES: projections whose rows fit in constant memory at once.

__constant__ float4 c_par_table[LEVERET_PAR_MAX_ANGLES];  // (a, b, c, unused)

__device__ __forceinline__ float texture_coordinate(float fi, float fj, float4 g)
{
    return __fadd_rn(__fadd_rn(__fmul_rn(fi, g.x), __fmul_rn(fj, g.y)), g.z);
}

extern "C" __global__ void __launch_bounds__(256)
backproject_parallel_tex(cudaTextureObject_t sinos,
                         float* __restrict__ out,        // (n_slices, ny, nx)
                         int nx, int ny, int n_angles, int angle0, int accumulate)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int layer = blockIdx.z;
    if (i >= nx || j >= ny) return;

    const float fi = (float)i, fj = (float)j;
    float acc = 0.0f;
#pragma unroll 8
    for (int n = 0; n < n_angles; ++n) {
        const float u = texture_coordinate(fi, fj, c_par_table[n]);
        acc += tex2DLayered<float>(sinos, u, (float)(angle0 + n) + 0.5f, layer);
    }
    const size_t idx = ((size_t)layer * ny + j) * nx + i;
    out[idx] = accumulate ? out[idx] + acc : acc;
}

extern "C" __global__ void __launch_bounds__(256)
backproject_parallel_tex2(cudaTextureObject_t sinos,
                          float* __restrict__ out,       // (n_slices, ny, nx)
                          int nx, int ny, int n_slices, int n_angles, int angle0, int accumulate)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int layer = blockIdx.z;
    if (i >= nx || j >= ny) return;

    const float fi = (float)i, fj = (float)j;
    float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll 8
    for (int n = 0; n < n_angles; ++n) {
        const float u = texture_coordinate(fi, fj, c_par_table[n]);
        const float2 v = tex2DLayered<float2>(sinos, u, (float)(angle0 + n) + 0.5f, layer);
        acc0 += v.x;
        acc1 += v.y;
    }
    const size_t plane = (size_t)ny * nx;
    const size_t idx = (size_t)(2 * layer) * plane + (size_t)j * nx + i;
    out[idx] = accumulate ? out[idx] + acc0 : acc0;
    if (2 * layer + 1 < n_slices)
        out[idx + plane] = accumulate ? out[idx + plane] + acc1 : acc1;
}

// ===========================================================================
// The load-balancing kernel family of Chilingaryan et al. (2018), Sect. 5-7:
//   backproject_parallel_texz{1,2,4}_q{4,8}  texture kernels with the Z-order
//       thread mapping: 4 projections in parallel per block, NQ pixels per
//       thread; float (1), float2 / half2 (2) or half4 (4) texels, so one
//       fetch filters 1, 2 or 4 slices.
//   backproject_parallel_tile{1,2,4}_t{32,64}  (tex_num = 0: the ALU kernel)
//       the sinogram bins a TS x TS tile needs are cached in shared memory
//       and interpolated in software with exact float32 weights, NV slices
//       per block.
//   the same tile kernels with 0 < tex_num <= tex_den: the hybrid, whose
//       texture blocks run beside the ALU blocks, so the texture units and
//       the ALUs / shared memory work at the same time.
// Which one runs for a problem: ParallelBackprojection.default_config and
// the tuning cache (cuda/tuning.py); their speeds: docs/performance.md.
// ===========================================================================

// (fp16 texels are read as float2/float4: the texture unit converts and filters them)

template <int NV> struct TexVec;
template <> struct TexVec<1> {
    static __device__ __forceinline__ void add(float* acc, cudaTextureObject_t t, float u, float v, int layer) {
        acc[0] += tex2DLayered<float>(t, u, v, layer);
    }
};
template <> struct TexVec<2> {
    static __device__ __forceinline__ void add(float* acc, cudaTextureObject_t t, float u, float v, int layer) {
        const float2 r = tex2DLayered<float2>(t, u, v, layer);   // float2 or half2 texels
        acc[0] += r.x; acc[1] += r.y;
    }
};
template <> struct TexVec<4> {
    static __device__ __forceinline__ void add(float* acc, cudaTextureObject_t t, float u, float v, int layer) {
        const float4 r = tex2DLayered<float4>(t, u, v, layer);   // half4 texels
        acc[0] += r.x; acc[1] += r.y; acc[2] += r.z; acc[3] += r.w;
    }
};

// Writes NV slice values of one pixel; slice index = NV * layer + s.
template <int NV>
__device__ __forceinline__ void store_pixel(float* __restrict__ out, const float* acc, int x, int y,
                                            int nx, int ny, int n_slices, int layer, int accumulate)
{
    if (x >= nx || y >= ny) return;
    const size_t plane = (size_t)ny * nx;
#pragma unroll
    for (int s = 0; s < NV; ++s) {
        const int k = NV * layer + s;
        if (k < n_slices) {
            const size_t idx = (size_t)k * plane + (size_t)y * nx + x;
            out[idx] = accumulate ? out[idx] + acc[s] : acc[s];
        }
    }
}

// --- Texture kernel with Z-order remapping, 4 projections in parallel (Alg. 2-4) ---
// Block: 256 threads, one 16 x (4 NQ) pixel tile. Thread t: bits 0-3 are its
// place in a 4x4 square along the Z curve, bits 4-5 the square along x (a warp
// covers 8x4 pixels: fetch locality for 2x2 texel quads), bits 6-7 the
// projection phase mp: the thread adds projections mp, mp+4, ... to NQ pixels
// (rows y, y+4, ...). A warp shares mp, so the constant cache broadcasts.
// Partial sums of the 4 phases meet in shared memory; each thread then writes
// one or more whole pixels, x-contiguous (coalesced).
// The coordinate is computed per pixel exactly as backproject_parallel_tex
// does (texture_coordinate), so the CPU's linear8 / nearest reproduce it.
template <int NV, int NQ>
__device__ __forceinline__ void texz_body(cudaTextureObject_t sinos, float* __restrict__ out,
                                          int nx, int ny, int n_slices, int n_angles, int angle0,
                                          int accumulate)
{
    __shared__ float red[4 * 64 * NQ * NV];
    const int t = threadIdx.x;
    const int pixeln = t & 3, squaren = (t >> 2) & 3, blockn = (t >> 4) & 3, mp = t >> 6;
    const int lx = 4 * blockn + 2 * (squaren & 1) + (pixeln & 1);
    const int ly = 2 * (squaren >> 1) + (pixeln >> 1);
    const int x0 = blockIdx.x * 16, y0 = blockIdx.y * (4 * NQ);
    const int layer = blockIdx.z;
    const float fi = (float)(x0 + lx);

    float acc[NQ][NV];
#pragma unroll
    for (int q = 0; q < NQ; ++q)
#pragma unroll
        for (int s = 0; s < NV; ++s) acc[q][s] = 0.0f;

#pragma unroll 4
    for (int n = mp; n < n_angles; n += 4) {
        const float4 g = c_par_table[n];
        const float v = (float)(angle0 + n) + 0.5f;
#pragma unroll
        for (int q = 0; q < NQ; ++q) {
            const float u = texture_coordinate(fi, (float)(y0 + ly + 4 * q), g);
            TexVec<NV>::add(acc[q], sinos, u, v, layer);
        }
    }
    // pixel index inside the tile: row-major 16 wide
#pragma unroll
    for (int q = 0; q < NQ; ++q)
#pragma unroll
        for (int s = 0; s < NV; ++s)
            red[((mp * 64 * NQ) + (ly + 4 * q) * 16 + lx) * NV + s] = acc[q][s];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < NQ / 4; ++r) {
        const int pix = t + 256 * r;
        float sum[NV];
#pragma unroll
        for (int s = 0; s < NV; ++s)
            sum[s] = (red[(pix) * NV + s] + red[(64 * NQ + pix) * NV + s])
                   + (red[(128 * NQ + pix) * NV + s] + red[(192 * NQ + pix) * NV + s]);
        store_pixel<NV>(out, sum, x0 + (pix & 15), y0 + (pix >> 4), nx, ny, n_slices, layer, accumulate);
    }
}

#define LEVERET_TEXZ(NAME, NV, NQ)                                                              \
extern "C" __global__ void __launch_bounds__(256)                                               \
NAME(cudaTextureObject_t sinos, float* __restrict__ out, int nx, int ny, int n_slices,          \
     int n_angles, int angle0, int accumulate)                                                  \
{ texz_body<NV, NQ>(sinos, out, nx, ny, n_slices, n_angles, angle0, accumulate); }

LEVERET_TEXZ(backproject_parallel_texz1_q4, 1, 4)
LEVERET_TEXZ(backproject_parallel_texz1_q8, 1, 8)
LEVERET_TEXZ(backproject_parallel_texz2_q4, 2, 4)
LEVERET_TEXZ(backproject_parallel_texz2_q8, 2, 8)
LEVERET_TEXZ(backproject_parallel_texz4_q4, 4, 4)

// --- Shared-memory / ALU kernel (Alg. 6, advanced caching Alg. 9, Sect. 6.6) and the
//     hybrid (Sect. 7.1) ---
// Block: 256 threads, one TS x TS tile (TS = 32: 4 pixels per thread; 64: 16).
// Thread t has a base pixel (bx, by) inside a 16x16 square along the Z curve
// (Chilingaryan et al. (2018), Fig. 13) and pixels (bx + 16 rx, by + 16 ry).
// Caching stage: SD projections at a time, ST = 256 / SD threads per row. For
// projection n the tile touches detector columns x = c' + i a + j b over
// [hmin, hmin + span]; the block caches columns hm + k, k in [0, cw), with
// hm = floor(hmin) - 1 computed in float64 (global float64 table) so that the
// float32 offset inside the cache is exact to ~1e-6 pixel whatever the image
// size. Advanced caching: bin k holds (q[hm+k], q[hm+k+1] - q[hm+k]), one
// 8-byte (NV=1) or 16-byte (NV=2) shared load per update, interpolation is a
// single FMA. Outside the detector the cache holds zeros, so the edges blend
// with zero exactly as the CPU reference and the texture's border mode do.
// Floor: h + 2^23 rounded towards -inf (__fadd_rd) leaves floor(h) in the
// mantissa; the integer comes out with one integer subtract and the float with
// one float subtract, no F2I/FRND (Chilingaryan et al. (2018), Sect. 6.6). Exact for
// 0 <= h < 2^23; the published "h - 0.499999 then round-to-nearest" variant
// misrounds fractions above 1 - 1e-6, directed rounding does not.
// Hybrid: blocks whose linear index b has (b % den) < num take the texture
// path on the same tile (same mapping, texture linear filtering = CPU
// linear8); the others the ALU path. num = 0: pure ALU; num = den: pure
// texture with the tile mapping.

__device__ __forceinline__ int floor_rd(float h, float& fl)
{
    const float t = __fadd_rd(h, 8388608.0f);   // 2^23: the fraction bits fall off, rounded down
    fl = __fsub_rn(t, 8388608.0f);               // exact
    return __float_as_int(t) - 0x4B000000;        // 0x4B000000 = bits of 2^23
}

// One cached bin: values of the NV slices and their differences to the next bin.
struct __align__(16) Bin4 { float4 v; float4 d; };
template <int NV> struct CacheVec;
template <> struct CacheVec<1> { typedef float2 T; };   // (q, dq)
template <> struct CacheVec<2> { typedef float4 T; };   // (q0, q1, dq0, dq1)
template <> struct CacheVec<4> { typedef Bin4 T; };     // two 16-byte loads per update of 4 slices

template <int NV>
__device__ __forceinline__ void cache_bin(typename CacheVec<NV>::T* dst, const float* __restrict__ sinos,
                                          int n_slices, int n_angles_total, int n_cols, int layer,
                                          int angle, long long col)
{
    float v0[NV], v1[NV];
#pragma unroll
    for (int s = 0; s < NV; ++s) {
        const int k = NV * layer + s;
        v0[s] = 0.0f; v1[s] = 0.0f;
        if (k < n_slices) {
            const float* row = sinos + ((size_t)k * n_angles_total + angle) * n_cols;
            if (col >= 0 && col < n_cols) v0[s] = __ldg(row + col);
            if (col + 1 >= 0 && col + 1 < n_cols) v1[s] = __ldg(row + col + 1);
        }
    }
    if constexpr (NV == 1) {
        float2 c; c.x = v0[0]; c.y = __fsub_rn(v1[0], v0[0]);
        *dst = c;
    } else if constexpr (NV == 2) {
        float4 c; c.x = v0[0]; c.y = v0[1];
        c.z = __fsub_rn(v1[0], v0[0]); c.w = __fsub_rn(v1[1], v0[1]);
        *dst = c;
    } else {
        Bin4 c;
        c.v = make_float4(v0[0], v0[1], v0[2], v0[3]);
        c.d = make_float4(__fsub_rn(v1[0], v0[0]), __fsub_rn(v1[1], v0[1]),
                          __fsub_rn(v1[2], v0[2]), __fsub_rn(v1[3], v0[3]));
        *dst = c;
    }
}

template <int NV>
__device__ __forceinline__ void interp_add(float* acc, const typename CacheVec<NV>::T* cache, int i, float w, bool nearest)
{
    if constexpr (NV == 1) {
        const float2 c = cache[i];
        acc[0] += nearest ? c.x : __fmaf_rn(w, c.y, c.x);
    } else if constexpr (NV == 2) {
        const float4 c = cache[i];
        acc[0] += nearest ? c.x : __fmaf_rn(w, c.z, c.x);
        acc[1] += nearest ? c.y : __fmaf_rn(w, c.w, c.y);
    } else {
        const float4 v = cache[i].v;
        if (nearest) {
            acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
        } else {
            const float4 d = cache[i].d;
            acc[0] += __fmaf_rn(w, d.x, v.x); acc[1] += __fmaf_rn(w, d.y, v.y);
            acc[2] += __fmaf_rn(w, d.z, v.z); acc[3] += __fmaf_rn(w, d.w, v.w);
        }
    }
}

template <int NV, int TS, int SD, bool NEAREST>
__device__ __forceinline__ void tile_body(cudaTextureObject_t tex, const float* __restrict__ sinos,
                                          const double4* __restrict__ table64, float* __restrict__ out,
                                          int nx, int ny, int n_slices, int n_cols, int n_angles_total,
                                          int n_angles, int angle0, int accumulate, int cw,
                                          int tex_num, int tex_den)
{
    constexpr int R = TS / 16;          // 16x16 squares per tile side
    constexpr int ST = 256 / SD;        // threads caching one projection row
    typedef typename CacheVec<NV>::T CV;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    CV* cache = reinterpret_cast<CV*>(smem_raw);
    __shared__ float4 s_geo[SD];        // (a, b, offset in cache, unused), float32

    const int t = threadIdx.x;
    const int bx = 4 * ((t >> 4) & 3) + 2 * ((t >> 2) & 1) + (t & 1);
    const int by = 4 * (t >> 6) + 2 * ((t >> 3) & 1) + ((t >> 1) & 1);
    const int x0 = blockIdx.x * TS, y0 = blockIdx.y * TS;
    const int layer = blockIdx.z;
    const int block_id = blockIdx.y * gridDim.x + blockIdx.x;

    float acc[R][R][NV];
#pragma unroll
    for (int ry = 0; ry < R; ++ry)
#pragma unroll
        for (int rx = 0; rx < R; ++rx)
#pragma unroll
            for (int s = 0; s < NV; ++s) acc[ry][rx][s] = 0.0f;

    if ((block_id % tex_den) < tex_num) {
        // texture path, coordinates as backproject_parallel_tex computes them
#pragma unroll 2
        for (int n = 0; n < n_angles; ++n) {
            const float4 g = c_par_table[n];
            const float v = (float)(angle0 + n) + 0.5f;
#pragma unroll
            for (int ry = 0; ry < R; ++ry)
#pragma unroll
                for (int rx = 0; rx < R; ++rx) {
                    const float u = texture_coordinate((float)(x0 + bx + 16 * rx), (float)(y0 + by + 16 * ry), g);
                    TexVec<NV>::add(acc[ry][rx], tex, u, v, layer);   // float, float2/half2, half4
                }
        }
    } else {
        const int mp = t / ST, md = t % ST;
        for (int pb = 0; pb < n_angles; pb += SD) {
            const int nload = min(SD, n_angles - pb);
            if (mp < nload) {
                const int n = angle0 + pb + mp;
                const double4 g = table64[n];   // (a, b, c - 0.5, cm)
                const double hb = g.z + (double)x0 * g.x + (double)y0 * g.y;   // column of the tile's corner
                const double hm = floor(hb + g.w) - 1.0;                       // one bin of margin
                if (md == 0)
                    s_geo[mp] = make_float4((float)g.x, (float)g.y, (float)(hb - hm), 0.0f);
                const long long col0 = (long long)hm;
                for (int k = md; k < cw; k += ST)
                    cache_bin<NV>(cache + mp * cw + k, sinos, n_slices, n_angles_total, n_cols, layer, n, col0 + k);
            }
            __syncthreads();
#pragma unroll 2
            for (int pi = 0; pi < nload; ++pi) {
                const float4 g = s_geo[pi];
                const float h0 = __fmaf_rn((float)bx, g.x, __fmaf_rn((float)by, g.y, g.z));
                const CV* row = cache + pi * cw;
#pragma unroll
                for (int ry = 0; ry < R; ++ry)
#pragma unroll
                    for (int rx = 0; rx < R; ++rx) {
                        float h = __fmaf_rn((float)(16 * rx), g.x, __fmaf_rn((float)(16 * ry), g.y, h0));
                        if (NEAREST) h = __fadd_rn(h, 0.5f);
                        float fl;
                        const int i = floor_rd(h, fl);
                        interp_add<NV>(acc[ry][rx], row, i, __fsub_rn(h, fl), NEAREST);
                    }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int ry = 0; ry < R; ++ry)
#pragma unroll
        for (int rx = 0; rx < R; ++rx)
            store_pixel<NV>(out, acc[ry][rx], x0 + bx + 16 * rx, y0 + by + 16 * ry, nx, ny, n_slices, layer, accumulate);
}

#define LEVERET_TILE(NAME, NV, TS, SD, NEAREST)                                                 \
extern "C" __global__ void __launch_bounds__(256)                                               \
NAME(cudaTextureObject_t tex, const float* __restrict__ sinos, const double4* __restrict__ table64,\
     float* __restrict__ out, int nx, int ny, int n_slices, int n_cols, int n_angles_total,     \
     int n_angles, int angle0, int accumulate, int cw, int tex_num, int tex_den)                \
{ tile_body<NV, TS, SD, NEAREST>(tex, sinos, table64, out, nx, ny, n_slices, n_cols,            \
                                 n_angles_total, n_angles, angle0, accumulate, cw, tex_num, tex_den); }

LEVERET_TILE(backproject_parallel_tile1_t32, 1, 32, 16, false)
LEVERET_TILE(backproject_parallel_tile1_t64, 1, 64, 8, false)
LEVERET_TILE(backproject_parallel_tile2_t32, 2, 32, 16, false)
LEVERET_TILE(backproject_parallel_tile2_t64, 2, 64, 8, false)
LEVERET_TILE(backproject_parallel_tile1_t32_nearest, 1, 32, 16, true)
LEVERET_TILE(backproject_parallel_tile2_t32_nearest, 2, 32, 16, true)
LEVERET_TILE(backproject_parallel_tile2_t64_nearest, 2, 64, 8, true)
LEVERET_TILE(backproject_parallel_tile4_t32, 4, 32, 16, false)
