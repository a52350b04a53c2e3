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
// step along z by the matrix's third column (Segment), exactly as the CPU's
// kernel-mirroring mode computes them, so the two agree to float rounding.
//
// Samples that cannot read a detector pixel are skipped, a thread's K voxels
// of a view at a time (segment_visible): at RabbitCT's geometry a third of
// all (voxel, view) pairs project off the detector (the cube's corners and
// its top and bottom), and their fetches of border zeros cost the texture
// unit as much as real ones. Skipping them leaves every sum bit-identical.
//
// Bottleneck variants (paper 002's method), selected by macros at compile time:
//   LEVERET_CONE_NO_TEXTURE  replace kernel B's fetch by arithmetic on (u, v): no texture traffic
//   LEVERET_CONE_NO_UPDATE   compute everything, write the volume only if a sum is NaN
//   LEVERET_CONE_NO_CLIP     interpolate off-detector samples too (border zeros), for comparison
// (the "near-perfect cache hits" variant needs no macro: tiny voxels, from Python).

#ifndef LEVERET_CONE_K
#define LEVERET_CONE_K 16  // 16 against 8: ray 62 against 67.5 ms, kernel B at 1024^3 414 against 445 (H200, docs/performance.md)
#endif
#define LEVERET_CONE_MAX_VIEWS 1024
#ifndef LEVERET_CONE_MIN_BLOCKS
#define LEVERET_CONE_MIN_BLOCKS 4   // blocks of 256 per multiprocessor the compiler must fit (registers: <= 64)
#endif

__constant__ float c_cone_mat[LEVERET_CONE_MAX_VIEWS * 12];  // row-major 3x4 per view
__constant__ cudaTextureObject_t c_cone_views[LEVERET_CONE_MAX_VIEWS];   // ray kernels: a 2D texture per view

__device__ __forceinline__ float dot_row(const float* m, float fi, float fj, float fk)
{
    return __fadd_rn(__fadd_rn(__fadd_rn(__fmul_rn(m[0], fi), __fmul_rn(m[1], fj)),
                               __fmul_rn(m[2], fk)), m[3]);
}

// 1/w correctly rounded, as __frcp_rn's fast path computes it (the hardware
// estimate and one Newton step), without its range check and branch: those
// serve w outside [2^-126, 2^126], and the matrices leveret passes are
// normalised (w ~ 1 over the volume). Saves 6 of ~30 instructions per update.
__device__ __forceinline__ float rcp_rn(float w)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(w));
    return fmaf(r, fmaf(-w, r, 1.0f), r);
}

// Where a kernel's samples can read a detector pixel: lo < u < u_hi and lo <
// v < v_hi in the kernel's coordinates, which are the detector's indices plus
// a shift (1/2 for texture coordinates, the zero border for the quad layout);
// beyond, every neighbour is border zero. A margin of 1/16 pixel covers the
// rounding of the samples' u = (u w) / w against segment_visible's
// homogeneous tests.
struct Window {
    float lo, u_hi, v_hi;
};

__device__ __forceinline__ Window detector_window(int n_rows, int n_cols, float shift)
{
    const float margin = 0.0625f;
    return Window{shift - 1.0f - margin, shift + (float)n_cols + margin, shift + (float)n_rows + margin};
}

// A thread's K voxels in one view: the homogeneous coordinates (u w, v w, w)
// of its first voxel and their step along z (the matrix's third column).
// Exact-weight kernels take voxel k's coordinates as q + k d rounded once
// (u(k), v(k), w(k): one fma each), texture fetches and kernel "ray-hybrid"
// as the running sum q += d (step()), whose error grows with k (at K = 16 it
// tripled linear32's RMSE on RabbitCT, docs/accuracy.md) but stays far below
// the texture unit's 1/256 weights. The fma form costs nothing in the
// exact-weight kernels; in "ray-hybrid" it cost ~2 ms of 57 at 512^3 (H200),
// and beside the texture unit it spilled at 64 registers. The CPU mirror
// rounds each view as its kernel does (cpu.backproject_gpu_mirror, fma_steps).
struct Segment {
    float qu, qv, qw, du, dv, dw;
    __device__ __forceinline__ float u(int k) const { return __fmaf_rn((float)k, du, qu); }
    __device__ __forceinline__ float v(int k) const { return __fmaf_rn((float)k, dv, qv); }
    __device__ __forceinline__ float w(int k) const { return __fmaf_rn((float)k, dw, qw); }
    __device__ __forceinline__ void step()
    {
        qu = __fadd_rn(qu, du);
        qv = __fadd_rn(qv, dv);
        qw = __fadd_rn(qw, dw);
    }
};

__device__ __forceinline__ Segment view_segment(int n, float fi, float fj, float fk0)
{
    const float* m = &c_cone_mat[12 * n];
    return Segment{dot_row(m, fi, fj, fk0), dot_row(m + 4, fi, fj, fk0), dot_row(m + 8, fi, fj, fk0),
                   m[2], m[6], m[10]};
}

// Whether any of the segment's K samples (u, v) = (qu + k du, qv + k dv) /
// (qw + k dw), k = 0 .. K-1, lies inside the window. Each edge's test is a
// linear function of k in homogeneous coordinates (u <= lo  <=>  qu - lo qw
// <= 0, as w > 0), so the segment lies beyond an edge when both of its ends
// do: 11 FMAs and 8 compares per K samples, no division.
__device__ __forceinline__ bool segment_visible(const Segment& s, const Window& win)
{
#ifdef LEVERET_CONE_NO_CLIP
    return true;
#else
    // The last sample's coordinates, rounded toward zero: not the value u(K-1)
    // computes, so the compiler does not keep three registers alive to reuse
    // it (a spill in kernel "hybrid" at 64 registers); the margin covers the ulp.
    const float span = (float)(LEVERET_CONE_K - 1);
    const float eu = __fmaf_rz(span, s.du, s.qu), ev = __fmaf_rz(span, s.dv, s.qv);
    const float ew = __fmaf_rz(span, s.dw, s.qw);
    const bool left = fmaxf(fmaf(-win.lo, s.qw, s.qu), fmaf(-win.lo, ew, eu)) <= 0.0f;
    const bool right = fminf(fmaf(-win.u_hi, s.qw, s.qu), fmaf(-win.u_hi, ew, eu)) >= 0.0f;
    const bool above = fmaxf(fmaf(-win.lo, s.qw, s.qv), fmaf(-win.lo, ew, ev)) <= 0.0f;
    const bool below = fminf(fmaf(-win.v_hi, s.qw, s.qv), fmaf(-win.v_hi, ew, ev)) >= 0.0f;
    return !(left | right | above | below);
#endif
}

// How a view's value at detector position (u, v) is read: the two kernels
// differ only here.
// The texture views' matrices come with the half-texel shift of texture
// coordinates built in (u + 1/2, v + 1/2: texel centres), see the launcher.
struct TextureFetch {
    static constexpr bool exact = false;   // 8-bit weights
    cudaTextureObject_t projections;   // layered: x = u, y = v, layer = view
    __device__ __forceinline__ float operator()(int n, float u, float v) const
    {
#ifdef LEVERET_CONE_NO_TEXTURE
        return __fadd_rn(u, v);
#else
        return tex2DLayered<float>(projections, u, v, n);
#endif
    }
};

// Bilinear interpolation with exact float32 weights, as two lerps along u and
// one along v (6 operations; the CPU mirror computes the same lerps, without
// the fused multiply-adds, so the two agree to a rounding).
__device__ __forceinline__ float bilinear_exact(float t00, float t01, float t10, float t11, float a, float b)
{
    const float top = fmaf(a, t01 - t00, t00);
    const float bottom = fmaf(a, t11 - t10, t10);
    return fmaf(b, bottom - top, top);
}

// floor(x) as a float and as an int, for |x| < 2^22, without the conversion
// pipe (FRND and F2I issue at a quarter of the FP32 rate on Hopper): adding
// 1.5 x 2^23 leaves round(x) in the low mantissa bits (paper 001's rounding
// trick), and one compare turns round into floor.
__device__ __forceinline__ int floor_int(float x, float& fx)
{
    const float magic = 12582912.0f;                  // 1.5 x 2^23, bits 0x4B400000
    const float big = __fadd_rn(x, magic);
    const float r = __fsub_rn(big, magic);            // round(x), exactly
    const bool over = r > x;
    fx = over ? __fsub_rn(r, 1.0f) : r;
    return __float_as_int(big) - 0x4B400000 - (int)over;
}

// Where a sample at (u, v) reads in a view with a two-pixel zero border
// (detector indices -2 .. cols + 1): the top-left neighbour (iu, iv) and the
// fractions a, b, from the coordinate clamped to [-2, cols] x [-2, rows]. A
// sample off the detector then reads border zeros only, so no mask is needed,
// and samples on it (-1 < u < cols) are unchanged by the clamp.
struct Sample {
    int iu, iv;
    float a, b;
};

__device__ __forceinline__ Sample locate(float u, float v, int n_rows, int n_cols)
{
    const float uc = fminf(fmaxf(u, -2.0f), (float)n_cols);
    const float vc = fminf(fmaxf(v, -2.0f), (float)n_rows);
    Sample s;
    float fu, fv;
    s.iu = floor_int(uc, fu);
    s.iv = floor_int(vc, fv);
    s.a = __fsub_rn(uc, fu);   // exact: x - floor(x)
    s.b = __fsub_rn(vc, fv);
    return s;
}

// Software bilinear interpolation with exact float32 weights from global
// memory (loads through the L1/texture cache, __ldg): the accuracy the texture
// unit's 8-bit weights cannot give (RabbitCT's 0.05 HU). The projections carry
// a two-pixel zero border, (rows + 4) x (cols + 4) per view.
#define LEVERET_CONE_BORDER 2
struct GlobalFetch {
    static constexpr bool exact = true;
    const float* __restrict__ projections;
    int n_rows, n_cols;
    __device__ __forceinline__ float operator()(int n, float u, float v) const
    {
        const int pitch = n_cols + 2 * LEVERET_CONE_BORDER;
        const Sample s = locate(u, v, n_rows, n_cols);
        // One 64-bit base per view, 32-bit offsets within it (a view is < 2^31 floats).
        const float* view = projections + (size_t)n * (n_rows + 2 * LEVERET_CONE_BORDER) * pitch;
        const int top = (s.iv + LEVERET_CONE_BORDER) * pitch + (s.iu + LEVERET_CONE_BORDER);
        const int bottom = top + pitch;
        return bilinear_exact(__ldg(view + top), __ldg(view + top + 1), __ldg(view + bottom),
                              __ldg(view + bottom + 1), s.a, s.b);
    }
};

// One view's contribution to the K voxels (i, j, k0..k0+K-1) of a thread.
template <class Fetch>
__device__ __forceinline__ void accumulate_view(const Fetch& fetch, int n, float fi, float fj, float fk0,
                                                const Window& win, float (&sum)[LEVERET_CONE_K])
{
    Segment seg = view_segment(n, fi, fj, fk0);
    if (!segment_visible(seg, win)) return;
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) {
        const float qu = Fetch::exact ? seg.u(k) : seg.qu;   // see Segment
        const float qv = Fetch::exact ? seg.v(k) : seg.qv;
        const float inv_w = rcp_rn(Fetch::exact ? seg.w(k) : seg.qw);
        const float value = fetch(n, __fmul_rn(qu, inv_w), __fmul_rn(qv, inv_w));
        sum[k] = __fadd_rn(sum[k], __fmul_rn(__fmul_rn(value, inv_w), inv_w));
        if (!Fetch::exact) seg.step();
    }
}

__device__ __forceinline__ void store_column(const float (&sum)[LEVERET_CONE_K], float* __restrict__ out,
                                             int i, int j, int k0, int nx, int ny, int nz, int accumulate)
{
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

// Every kernel computes the z blocks block0 + blockIdx.z: a launch can cover
// part of the volume (a slab whose download then overlaps the rest).
template <class Fetch>
__device__ __forceinline__ void backproject_column(const Fetch& fetch, const Window& win, float* __restrict__ out,
                                                   int nx, int ny, int nz, int n_views, int accumulate, int block0)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = (blockIdx.z + block0) * LEVERET_CONE_K;
    if (i >= nx || j >= ny) return;

    const float fi = (float)i, fj = (float)j, fk0 = (float)k0;
    float sum[LEVERET_CONE_K];
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) sum[k] = 0.0f;
    for (int n = 0; n < n_views; ++n) accumulate_view(fetch, n, fi, fj, fk0, win, sum);
    store_column(sum, out, i, j, k0, nx, ny, nz, accumulate);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS)
backproject_cone_tex(cudaTextureObject_t projections, float* __restrict__ out,   // out: (nz, ny, nx)
                     int nx, int ny, int nz, int n_views, int n_rows, int n_cols, int accumulate, int block0)
{
    backproject_column(TextureFetch{projections}, detector_window(n_rows, n_cols, 0.5f), out, nx, ny, nz, n_views,
                       accumulate, block0);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS)
backproject_cone_global(const float* __restrict__ projections,   // (n_views, rows + 4, cols + 4)
                        float* __restrict__ out,                   // (nz, ny, nx)
                        int nx, int ny, int nz, int n_views, int n_rows, int n_cols, int accumulate, int block0)
{
    backproject_column(GlobalFetch{projections, n_rows, n_cols}, detector_window(n_rows, n_cols, 0.0f), out, nx, ny,
                       nz, n_views, accumulate, block0);
}

// ---------------------------------------------------------------------------
// Ray-aligned passes (issue 3): kernels R (texture), Q (exact weights from a
// quad layout) and their hybrid RQ.
//
// At 512^3 a voxel spans ~2.6 detector pixels, so the only reuse of detector
// samples between voxels is along the ray: voxels at different depths on one
// ray project to the same pixel. Kernel B's 32 lanes lie along x whatever the
// view; for views whose rays run along y they spread over ~80 pixels. Here
// the launcher groups a call's views into passes of similar direction (the
// central ray's azimuth modulo 180 degrees) and maps a warp's lanes onto a
// digital line along the pass's direction: "x-major" (|tan phi| <= 1) lane l
// of the warp at (a, b) = (i, j) takes voxel (a, (b + round(l slope)) mod ny);
// "y-major" swaps the roles of x and y. For fixed a, b -> (b + shift) mod n is
// a bijection, so every pass writes every voxel exactly once. The price: the
// volume's stores are no longer coalesced (a y-major warp writes 32 rows,
// one float each; a block's 8 warps complete each 32-byte sector, so L2
// merges them before DRAM: ~8x the L2 store/load requests of kernel B, about
// 134 M sector requests per pass at 512^3, ~1 ms of L2 time per pass that
// overlaps other blocks' compute) and the volume is read and written once
// per pass (passes of ~32 views: 16 at 512^3 with 496 views, ~5 ms of HBM).
//
// Kernel Q replaces the texture fetch by one 16-byte load from a per-view
// "quad" layout built by cone_quads: quad (r, c) = (P[r][c], P[r][c+1] -
// P[r][c], P[r+1][c], P[r+1][c+1] - P[r+1][c]) over the view with a 2-pixel
// zero border ((rows + 4) x (cols + 4) quads). The border offset is folded
// into the matrices, so after clamping u to [0, cols + 2] and v to [0, rows +
// 2] every sample reads inside the layout and off-detector samples read
// zeros. Floor by directed rounding: __fadd_rd(x, 2^23) = 2^23 + floor(x)
// exactly for 0 <= x < 2^23, and fma(floor(v), pitch, that) = 2^23 + offset,
// also exact (< 2^24), whose bit pattern minus 0x4B000000 is the quad index
// (the subtraction folded into the view's base pointer). Per update: 3 adds
// (z step), the reciprocal (3: rcp_rn), 2 multiplies, 4 min/max, 2 directed adds, 3 adds
// (floor and fractions), 1 fma (offset), 1 IMAD.WIDE (address), one LDG.128,
// 4 interpolation ops, 2 for the weight and the sum: ~27 issue slots against
// 62 for kernel "global" and ~30 for kernel B.
//
// Predictions (512^3, RabbitCT-like, H200), written before any run:
//   R: kernel B is 100 ms, 70 ms when every fetch hits (tiny voxels). Lanes
//      along rays shrink a warp's footprint from ~32 x 2.6 |sin phi| + fan
//      (~60 px on average) to the fan's ~10-15 px; if the 30 ms of misses
//      scale with the footprint, R runs in 75-80 ms plus ~5 ms of extra
//      volume passes: 80-85 ms. 1024^3: texture fill rate bound, ~530 ms
//      plus passes: no gain expected (kernel B is at 92-94 % of the ceiling).
//   Q: issue-bound at ~27 instructions per update (25 with LEVERET_CONE_FAST_RCP), 85 % of issue like the
//      global kernel: 66.6 G x 26 / (33.4 T/s x 0.85) = 61 ms, plus the quad
//      pre-pass (9.5 GB written, ~3 ms) and passes (~5 ms): 65-70 ms;
//      1024^3: ~8x, 520-560 ms.
//   RQ: the texture unit and the issue slots work at once; at a third of the
//      views in software, ~55-60 ms if neither saturates the shared L1/TEX
//      pipeline (unknown: both use it).
// Measured (H200, 2026-11-24, bench_cone.py --ray; docs/performance.md), ms
// at 512^3 / 1024^3, 496 views in one call: kernel B 99.8 / 557, global 149 /
// 1154; R 106 / 753 in passes of 32 views, 87.1 / 592 in passes of 124; Q
// 111.7 / 729 (32), 91.1 / 644 (124), 91.6 with lanes along x (passes of 32);
// RQ 101-104 / 662. One FDK chunk of 32 views: B 8.65 / 36.4, R 7.39 / 50.1,
// Q 7.66 / 47.2. The predictions were 20-70 % optimistic: lanes along the rays
// help the texture path at 512^3 (87 against 100 ms) but cost at 1024^3,
// where kernel B's fetches already hit; each pass's uncoalesced volume stores
// and quad layout cost 1-1.7 ms at 512^3 (Q: 112 ms in 16 passes, 91 in 4);
// Q's lanes along the rays gain nothing over lanes along x. Q is the fastest
// exact-weight kernel (1.6-1.8x "global"), R the fastest at 512^3.

#ifndef LEVERET_CONE_RAY_BY
#define LEVERET_CONE_RAY_BY 8      // warps per block of the ray kernels (blockDim = 32 x this)
#endif

// Kernel Q's 1/w: correctly rounded (rcp_rn, 3 instructions) by default, so
// it rounds as the global kernel and the CPU mirror do; LEVERET_CONE_FAST_RCP:
// the bare hardware estimate (1 instruction, ~1 ulp), for measurement.
__device__ __forceinline__ float rcp_quad(float w)
{
#ifdef LEVERET_CONE_FAST_RCP
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(w));
    return r;
#else
    return rcp_rn(w);
#endif
}

// One software view's contribution, from its quad layout. `view` points at the
// view's quads minus 0x4B000000 quads (see above); u_max = cols + 2, v_max =
// rows + 2, pitch = cols + 4 (quads per row), all in the bordered layout.
template <bool FMA_STEPS>   // voxel k's coordinates in one fma (else running sums), see Segment
__device__ __forceinline__ void accumulate_view_quad(const float4* __restrict__ view, int n, float fi, float fj,
                                                     float fk0, float pitch, float u_max, float v_max,
                                                     const Window& win, float (&sum)[LEVERET_CONE_K])
{
    Segment seg = view_segment(n, fi, fj, fk0);
    if (!segment_visible(seg, win)) return;
    const float magic = 8388608.0f;   // 2^23, bits 0x4B000000
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) {
        const float r = rcp_quad(FMA_STEPS ? seg.w(k) : seg.qw);
        const float u = fminf(fmaxf(__fmul_rn(FMA_STEPS ? seg.u(k) : seg.qu, r), 0.0f), u_max);
        const float v = fminf(fmaxf(__fmul_rn(FMA_STEPS ? seg.v(k) : seg.qv, r), 0.0f), v_max);
        const float bu = __fadd_rd(u, magic);          // 2^23 + floor(u), exactly
        const float bv = __fadd_rd(v, magic);
        const float fv = __fsub_rn(bv, magic);         // floor(v)
        const float a = __fsub_rn(u, __fsub_rn(bu, magic));
        const float b = __fsub_rn(v, fv);
        const int idx = __float_as_int(__fmaf_rn(fv, pitch, bu));   // 0x4B000000 + offset
        const float4 p = __ldg(view + idx);
        const float top = __fmaf_rn(a, p.y, p.x);
        const float bottom = __fmaf_rn(a, p.w, p.z);
        const float value = __fmaf_rn(b, __fsub_rn(bottom, top), top);
        sum[k] = __fmaf_rn(value, __fmul_rn(r, r), sum[k]);
        if (!FMA_STEPS) seg.step();
    }
}

// The ray kernels read view n of a pass through its own 2D texture object,
// c_cone_views[n], over the projections in device memory (pitch-linear, see
// cuda/texture.py: no copy into a layered CUDA array, which cost 6.4 of 60 ms
// at 512^3). n is the loop counter, so the compiler knows the handle is the
// same in every lane: indexed by the hybrid's conditionally incremented count
// of texture views instead, each fetch took the per-lane-handle path, 16 %
// more instructions at 1.7x the cycles between issues (Nsight Compute, H200).
// Same 8-bit weights as the layered textures: sums bit-identical.
struct ViewFetch {
    static constexpr bool exact = false;
    __device__ __forceinline__ float operator()(int n, float u, float v) const
    {
        return tex2D<float>(c_cone_views[n], u, v);
    }
};

// MODE 0: every view through its texture (R); 1: every view from quads (Q);
// 2: views n with n mod period < count from quads, the others through their
// textures, the quads packed in pass order (RQ).
template <int MODE>
__device__ __forceinline__ void backproject_ray(const float4* __restrict__ quads,
                                                float* __restrict__ out, int nx, int ny, int nz, int n_views,
                                                int y_major, float slope, int period, int count, int pitch,
                                                int view_quads, int n_rows, int n_cols, int accumulate,
                                                int block0)
{
    const int lane = threadIdx.x;   // blockDim.x == 32: a warp's lanes along the line
    const int a = blockIdx.x * 32 + lane;
    const int b0 = blockIdx.y * blockDim.y + threadIdx.y;
    const int na = y_major ? ny : nx, nb = y_major ? nx : ny;
    if (a >= na || b0 >= nb) return;
    int shift = __float2int_rn(__fmul_rn((float)lane, slope)) % nb;
    if (shift < 0) shift += nb;
    const int b = b0 + shift >= nb ? b0 + shift - nb : b0 + shift;
    const int i = y_major ? b : a, j = y_major ? a : b;
    const int k0 = (blockIdx.z + block0) * LEVERET_CONE_K;
    const float fi = (float)i, fj = (float)j, fk0 = (float)k0;
    const float pitch_f = (float)pitch, u_max = (float)(n_cols + 2), v_max = (float)(n_rows + 2);
    const Window tex_window = detector_window(n_rows, n_cols, 0.5f);
    const Window quad_window = detector_window(n_rows, n_cols, 2.0f);   // the quad layout's border
    // The quads' base less 0x4B000000 quads: the kernel adds the float's bit pattern.
    const float4* base = reinterpret_cast<const float4*>(reinterpret_cast<size_t>(quads)
                                                         - (size_t)0x4B000000u * sizeof(float4));

    float sum[LEVERET_CONE_K];
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) sum[k] = 0.0f;
    if (MODE == 0) {
        for (int n = 0; n < n_views; ++n) accumulate_view(ViewFetch{}, n, fi, fj, fk0, tex_window, sum);
    } else if (MODE == 1) {
        for (int n = 0; n < n_views; ++n)
            accumulate_view_quad<true>(base + (size_t)n * view_quads, n, fi, fj, fk0, pitch_f, u_max, v_max,
                                       quad_window, sum);
    } else {
        int phase = 0, slot = 0;
        for (int n = 0; n < n_views; ++n) {
            if (phase < count)
                accumulate_view_quad<false>(base + (size_t)(slot++) * view_quads, n, fi, fj, fk0, pitch_f, u_max,
                                            v_max, quad_window, sum);
            else
                accumulate_view(ViewFetch{}, n, fi, fj, fk0, tex_window, sum);
            if (++phase == period) phase = 0;
        }
    }
    store_column(sum, out, i, j, k0, nx, ny, nz, accumulate);
}

#define LEVERET_CONE_RAY_ARGS                                                                              \
    const float4 *__restrict__ quads, float *__restrict__ out, int nx, int ny, int nz, int n_views,          \
        int y_major, float slope, int period, int count, int pitch, int view_quads, int n_rows, int n_cols,  \
        int accumulate, int block0
#define LEVERET_CONE_RAY_PASS \
    quads, out, nx, ny, nz, n_views, y_major, slope, period, count, pitch, view_quads, n_rows, n_cols, \
        accumulate, block0

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS) backproject_cone_ray_tex(LEVERET_CONE_RAY_ARGS)
{
    backproject_ray<0>(LEVERET_CONE_RAY_PASS);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS) backproject_cone_ray_quad(LEVERET_CONE_RAY_ARGS)
{
    backproject_ray<1>(LEVERET_CONE_RAY_PASS);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS) backproject_cone_ray_hybrid(LEVERET_CONE_RAY_ARGS)
{
    backproject_ray<2>(LEVERET_CONE_RAY_PASS);
}

// The quad layout of n views (see above): quads (n, rows + 4, cols + 4) from
// projections[views[m]] (rows x cols each). Grid (ceil((cols + 4) / 128), rows + 4, n).
extern "C" __global__ void cone_quads(const float* __restrict__ projections, const int* __restrict__ views,
                                      float4* __restrict__ quads, int n_rows, int n_cols)
{
    const int pitch = n_cols + 4;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y;
    if (c >= pitch) return;
    const float* p = projections + (size_t)views[blockIdx.z] * n_rows * n_cols;
    float t[2][2];
#pragma unroll
    for (int dr = 0; dr < 2; ++dr)
#pragma unroll
        for (int dc = 0; dc < 2; ++dc) {
            const int rr = r + dr - 2, cc = c + dc - 2;
            t[dr][dc] = (rr >= 0 && rr < n_rows && cc >= 0 && cc < n_cols) ? __ldg(p + (size_t)rr * n_cols + cc) : 0.0f;
        }
    quads[((size_t)blockIdx.z * (n_rows + 4) + r) * pitch + c] =
        make_float4(t[0][0], __fsub_rn(t[0][1], t[0][0]), t[1][0], __fsub_rn(t[1][1], t[1][0]));
}

// ---------------------------------------------------------------------------
// Kernel S: software interpolation from shared memory, and the hybrid kernel.
//
// A block owns a box of voxels (blockDim.x x blockDim.y columns, K slices).
// For each view it stages the detector pixels the box projects to (its "tile":
// the box's 8 corners bound the footprint, since u and v are ratios of linear
// functions with w > 0) in shared memory with coalesced loads, then every
// thread interpolates its K samples from the tile with exact float32 weights:
// the same arithmetic as GlobalFetch (and the CPU mirror), fed from shared
// memory instead of the L1/texture cache. That moves the interpolation off
// the texture units; the hybrid kernel reads TEX_VIEWS of every round of
// STAGE + TEX_VIEWS views through the texture unit, while the tiles of the
// other STAGE views load, so texture units, shared memory and ALUs all work.
//
// Predicted (512^3, RabbitCT-like, 16x16 threads, K = 8): a tile holds about
// 1000 pixels (max 2600) per 2048 updates, ~0.5 coalesced loads per update,
// ~45 instructions per update: 90 ms if issue-bound, so a 40 % share beside
// the texture kernel (103 ms) should approach 60 ms. Measured on an H200
// (docs/performance.md): 204-343 ms alone, hybrid 123-180 ms, slower than
// kernel B alone (99 ms). Nsight Compute: every path is bound by the same
// L1/TEX data pipeline -- kernel B at 99.7 % of it (91.8 % hits), the tile
// reads (4 shared loads per update, bank conflicts) and the global loads
// (4 per update) spend as much of it per update as a bilinear fetch -- and
// the software paths issue 60-86 instructions per update. Kept, tested, as
// the measured answer to "a second path beside the texture units".

#ifndef LEVERET_CONE_STAGE
#define LEVERET_CONE_STAGE 2        // views staged per round (<= 4: one warp finds their tiles)
#endif
#ifndef LEVERET_CONE_TEX_VIEWS
#define LEVERET_CONE_TEX_VIEWS 2    // hybrid kernel: views per round through the texture unit
#endif

// The pixels [u0, u0 + wb) x [v0, v0 + hb) of a view, in detector indices
// (-2, -1 and cols, cols + 1 are the zero border); hb == 0: too large for the tile
// capacity, read from global memory instead.
struct Tile {
    int u0, v0, wb, hb;
};

struct TileFetch {
    static constexpr bool exact = true;
    const float* tile;
    Tile t;
    int n_rows, n_cols;
    __device__ __forceinline__ float operator()(int, float u, float v) const
    {
        const Sample s = locate(u, v, n_rows, n_cols);
        // The tile covers every neighbour by construction; the clamp keeps a
        // mistake in shared memory rather than elsewhere (tests would see it).
        const int du = min(max(s.iu - t.u0, 0), t.wb - 2);
        const int dv = min(max(s.iv - t.v0, 0), t.hb - 2);
        const float* p = tile + dv * t.wb + du;
        return bilinear_exact(p[0], p[1], p[t.wb], p[t.wb + 1], s.a, s.b);
    }
};

// Warp 0: the tiles of views n0 .. n0 + n_stage - 1 for the voxel box
// [i0, i1] x [j0, j1] x [k0, k1]; lane = 8 x view + corner.
__device__ void find_tiles(Tile* tiles, int lane, int n0, int n_stage, int i0, int i1, int j0, int j1,
                           int k0, int k1, int n_rows, int n_cols, int capacity)
{
    const int s = lane >> 3, c = lane & 7;
    float u = 0.0f, v = 0.0f;
    if (s < n_stage) {
        const float* m = &c_cone_mat[12 * (n0 + s)];
        const float fi = (float)((c & 1) ? i1 : i0), fj = (float)((c & 2) ? j1 : j0);
        const float fk = (float)((c & 4) ? k1 : k0);
        const float w = m[8] * fi + m[9] * fj + m[10] * fk + m[11];
        u = (m[0] * fi + m[1] * fj + m[2] * fk + m[3]) / w;
        v = (m[4] * fi + m[5] * fj + m[6] * fk + m[7]) / w;
    }
    float u_lo = u, u_hi = u, v_lo = v, v_hi = v;
#pragma unroll
    for (int offset = 1; offset < 8; offset <<= 1) {
        u_lo = fminf(u_lo, __shfl_xor_sync(0xffffffffu, u_lo, offset));
        u_hi = fmaxf(u_hi, __shfl_xor_sync(0xffffffffu, u_hi, offset));
        v_lo = fminf(v_lo, __shfl_xor_sync(0xffffffffu, v_lo, offset));
        v_hi = fmaxf(v_hi, __shfl_xor_sync(0xffffffffu, v_hi, offset));
    }
    if (c == 0 && s < n_stage) {
        // Half a pixel of margin covers the per-voxel coordinates' rounding;
        // clamped as locate() clamps.
        const float cols_f = (float)n_cols, rows_f = (float)n_rows;
        const int lo_u = (int)floorf(fminf(fmaxf(u_lo - 0.5f, -2.0f), cols_f));
        const int hi_u = (int)floorf(fminf(fmaxf(u_hi + 0.5f, -2.0f), cols_f));
        const int lo_v = (int)floorf(fminf(fmaxf(v_lo - 0.5f, -2.0f), rows_f));
        const int hi_v = (int)floorf(fminf(fmaxf(v_hi + 0.5f, -2.0f), rows_f));
        Tile t{lo_u, lo_v, hi_u - lo_u + 2, hi_v - lo_v + 2};
        if (t.wb * t.hb > capacity) t.hb = 0;
        tiles[s] = t;
    }
}

template <int STAGE, int TEX_VIEWS>
__device__ __forceinline__ void backproject_staged(cudaTextureObject_t texture, const float* __restrict__ padded,
                                                   float* __restrict__ out, int nx, int ny, int nz, int n_views,
                                                   int n_rows, int n_cols, int capacity, int accumulate, int block0)
{
    extern __shared__ float s_tiles[];   // STAGE x capacity floats
    __shared__ Tile s_tile[STAGE];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = (blockIdx.z + block0) * LEVERET_CONE_K;
    const bool active = (i < nx) & (j < ny);   // idle threads still load tiles and meet the barriers
    const int i0 = blockIdx.x * blockDim.x, i1 = min(i0 + (int)blockDim.x, nx) - 1;
    const int j0 = blockIdx.y * blockDim.y, j1 = min(j0 + (int)blockDim.y, ny) - 1;
    const int k1 = min(k0 + LEVERET_CONE_K, nz) - 1;
    const int tid = threadIdx.x + blockDim.x * threadIdx.y;
    const int lane = tid & 31, warp = tid >> 5, n_warps = (blockDim.x * blockDim.y) >> 5;
    const int pitch = n_cols + 2 * LEVERET_CONE_BORDER;
    const size_t view_stride = (size_t)(n_rows + 2 * LEVERET_CONE_BORDER) * pitch;
    const float fi = (float)i, fj = (float)j, fk0 = (float)k0;
    const GlobalFetch global{padded, n_rows, n_cols};
    const Window window = detector_window(n_rows, n_cols, 0.0f), tex_window = detector_window(n_rows, n_cols, 0.5f);

    float sum[LEVERET_CONE_K];
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) sum[k] = 0.0f;

    for (int n0 = 0; n0 < n_views; n0 += STAGE + TEX_VIEWS) {
        const int n_stage = min(STAGE, n_views - n0);
        __syncthreads();   // the previous round's tiles are consumed
        if (warp == 0)
            find_tiles(s_tile, lane, n0, n_stage, i0, i1, j0, j1, k0, k1, n_rows, n_cols, capacity);
        __syncthreads();
        for (int s = 0; s < n_stage; ++s) {
            const Tile t = s_tile[s];
            const float* src = padded + (size_t)(n0 + s) * view_stride
                               + (size_t)(t.v0 + LEVERET_CONE_BORDER) * pitch + (t.u0 + LEVERET_CONE_BORDER);
            float* dst = s_tiles + s * capacity;
            for (int r = warp; r < t.hb; r += n_warps)      // a row per warp: coalesced
                for (int c = lane; c < t.wb; c += 32)
                    dst[r * t.wb + c] = __ldg(src + (size_t)r * pitch + c);
        }
        if (TEX_VIEWS > 0 && active) {   // texture views while the tiles' loads are in flight
            const int n_end = min(n0 + STAGE + TEX_VIEWS, n_views);
            for (int n = n0 + STAGE; n < n_end; ++n)
                accumulate_view(TextureFetch{texture}, n, fi, fj, fk0, tex_window, sum);
        }
        __syncthreads();
        if (active) {
            for (int s = 0; s < n_stage; ++s) {
                const Tile t = s_tile[s];
                if (t.hb == 0)
                    accumulate_view(global, n0 + s, fi, fj, fk0, window, sum);
                else
                    accumulate_view(TileFetch{s_tiles + s * capacity, t, n_rows, n_cols}, n0 + s, fi, fj, fk0, window,
                                    sum);
            }
        }
    }
    if (active) store_column(sum, out, i, j, k0, nx, ny, nz, accumulate);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS)
backproject_cone_shared(const float* __restrict__ padded,   // (n_views, rows + 4, cols + 4)
                        float* __restrict__ out,             // (nz, ny, nx)
                        int nx, int ny, int nz, int n_views, int n_rows, int n_cols, int capacity, int accumulate,
                        int block0)
{
    backproject_staged<LEVERET_CONE_STAGE, 0>(0, padded, out, nx, ny, nz, n_views, n_rows, n_cols, capacity,
                                              accumulate, block0);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS)
backproject_cone_hybrid(cudaTextureObject_t texture, const float* __restrict__ padded, float* __restrict__ out,
                        int nx, int ny, int nz, int n_views, int n_rows, int n_cols, int capacity, int accumulate,
                        int block0)
{
    backproject_staged<LEVERET_CONE_STAGE, LEVERET_CONE_TEX_VIEWS>(texture, padded, out, nx, ny, nz, n_views,
                                                                   n_rows, n_cols, capacity, accumulate, block0);
}
