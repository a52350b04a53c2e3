// Cone-beam voxel-driven back-projection: the "kernel B" of Zinsser and Keck
// (2013), with two ways of reading the projections (TextureFetch: the texture
// unit's bilinear filtering, 8-bit weights; GlobalFetch: exact weights in
// software), and the ray-aligned kernels further down. One thread owns voxel
// column (i, j) and LEVERET_CONE_K consecutive z voxels from k0; it loops over
// the views of a pass and keeps the K partial sums in registers, so the volume
// is read and written once per pass. Matrices (index -> (uw, vw, w)) sit in
// constant memory: all threads of a warp read the same view.
//
// Arithmetic is rounded as written (no FMA contraction; the reciprocal of w
// correctly rounded, as 1/w is in IEEE float) and the homogeneous coordinates
// step along z by the matrix's third column (Segment), exactly as the CPU
// mirror (leveret.cpu.backproject_cone.backproject_gpu_mirror) computes them,
// so the two agree to float rounding.
//
// Samples that cannot read a detector pixel are skipped, a thread's K voxels
// of a view at a time (segment_visible): in a typical circular scan a large
// share of (voxel, view) pairs project off the detector (the cube's corners,
// its top and bottom), and their fetches of border zeros would cost the
// texture unit as much as real ones. Skipping them leaves every sum unchanged.
//
// The launcher (backproject_cone.py) passes every constant below as a -D
// option, from one Python source (leveret.cpu.cone_plan and the
// launcher's DEFINES); there are no defaults here to drift from it.

#if !defined(LEVERET_CONE_K) || !defined(LEVERET_CONE_MAX_VIEWS) || !defined(LEVERET_CONE_MIN_BLOCKS) || \
    !defined(LEVERET_CONE_BORDER)
#error "backproject_cone.cu: compile with the launcher's DEFINES (leveret.cuda.backproject_cone.DEFINES)"
#endif
// LEVERET_CONE_K: z voxels per thread; LEVERET_CONE_MAX_VIEWS: views per
// constant-memory load; LEVERET_CONE_MIN_BLOCKS: blocks of 256 threads per
// multiprocessor the register allocation must allow; LEVERET_CONE_BORDER:
// zero pixels around each view for the "global" kernel.

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
// (u(k), v(k), w(k): one fma each): a running sum's error grows with k and
// would dominate their error (docs/accuracy.md). Texture fetches and kernel
// "ray-hybrid" take the running sum q += d (step()), whose error stays far
// below the texture unit's 1/256 weights; in "ray-hybrid" the fma form would
// cost time and registers beside the texture path. The CPU mirror rounds each
// view as its kernel does (cone_plan.fma_steps).
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
    // The last sample's coordinates, rounded toward zero: not the value u(K-1)
    // computes, so the compiler does not keep three registers alive to reuse
    // it (register pressure); the margin covers the ulp.
    const float span = (float)(LEVERET_CONE_K - 1);
    const float eu = __fmaf_rz(span, s.du, s.qu), ev = __fmaf_rz(span, s.dv, s.qv);
    const float ew = __fmaf_rz(span, s.dw, s.qw);
    const bool left = fmaxf(fmaf(-win.lo, s.qw, s.qu), fmaf(-win.lo, ew, eu)) <= 0.0f;
    const bool right = fminf(fmaf(-win.u_hi, s.qw, s.qu), fmaf(-win.u_hi, ew, eu)) >= 0.0f;
    const bool above = fmaxf(fmaf(-win.lo, s.qw, s.qv), fmaf(-win.lo, ew, ev)) <= 0.0f;
    const bool below = fminf(fmaf(-win.v_hi, s.qw, s.qv), fmaf(-win.v_hi, ew, ev)) >= 0.0f;
    return !(left | right | above | below);
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
        return tex2DLayered<float>(projections, u, v, n);
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
// 1.5 x 2^23 leaves round(x) in the low mantissa bits (the rounding trick of
// Chilingaryan et al. (2018)), and one compare turns round into floor.
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
// a LEVERET_CONE_BORDER-pixel zero border (two: locate() clamps to it).
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
// Ray-aligned passes: kernels R ("ray", texture), Q ("quad", exact weights
// from a quad layout) and their hybrid RQ ("ray-hybrid").
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
// per pass (so passes hold ~100 views: cone_plan.VIEWS_PER_PASS).
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
        const float r = rcp_rn(FMA_STEPS ? seg.w(k) : seg.qw);
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
// cuda/texture.py: no copy into a layered CUDA array). n is the loop counter,
// so the compiler knows the handle is the same in every lane: indexed by a
// conditionally incremented count of texture views instead, each fetch would
// take the slower per-lane-handle path. Same 8-bit weights as the layered
// textures: sums bit-identical.
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
