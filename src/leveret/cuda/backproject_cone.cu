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
#ifndef LEVERET_CONE_MIN_BLOCKS
#define LEVERET_CONE_MIN_BLOCKS 4   // blocks of 256 per multiprocessor the compiler must fit (registers: <= 64)
#endif

__constant__ float c_cone_mat[LEVERET_CONE_MAX_VIEWS * 12];  // row-major 3x4 per view

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

// How a view's value at detector position (u, v) is read: the two kernels
// differ only here.
// The texture views' matrices come with the half-texel shift of texture
// coordinates built in (u + 1/2, v + 1/2: texel centres), see the launcher.
struct TextureFetch {
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
                                                float (&sum)[LEVERET_CONE_K])
{
    const float* m = &c_cone_mat[12 * n];
    float qu = dot_row(m, fi, fj, fk0);
    float qv = dot_row(m + 4, fi, fj, fk0);
    float qw = dot_row(m + 8, fi, fj, fk0);
    const float du = m[2], dv = m[6], dw = m[10];
#pragma unroll
    for (int k = 0; k < LEVERET_CONE_K; ++k) {
        const float inv_w = rcp_rn(qw);
        const float value = fetch(n, __fmul_rn(qu, inv_w), __fmul_rn(qv, inv_w));
        sum[k] = __fadd_rn(sum[k], __fmul_rn(__fmul_rn(value, inv_w), inv_w));
        qu = __fadd_rn(qu, du);
        qv = __fadd_rn(qv, dv);
        qw = __fadd_rn(qw, dw);
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
__device__ __forceinline__ void backproject_column(const Fetch& fetch, float* __restrict__ out,
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
    for (int n = 0; n < n_views; ++n) accumulate_view(fetch, n, fi, fj, fk0, sum);
    store_column(sum, out, i, j, k0, nx, ny, nz, accumulate);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS)
backproject_cone_tex(cudaTextureObject_t projections, float* __restrict__ out,   // out: (nz, ny, nx)
                     int nx, int ny, int nz, int n_views, int accumulate, int block0)
{
    backproject_column(TextureFetch{projections}, out, nx, ny, nz, n_views, accumulate, block0);
}

extern "C" __global__ void __launch_bounds__(256, LEVERET_CONE_MIN_BLOCKS)
backproject_cone_global(const float* __restrict__ projections,   // (n_views, rows + 4, cols + 4)
                        float* __restrict__ out,                   // (nz, ny, nx)
                        int nx, int ny, int nz, int n_views, int n_rows, int n_cols, int accumulate, int block0)
{
    backproject_column(GlobalFetch{projections, n_rows, n_cols}, out, nx, ny, nz, n_views, accumulate, block0);
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
        // Half a pixel of margin covers the per-voxel coordinates' rounding
        // (incremental along z); clamped as locate() clamps.
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
            for (int n = n0 + STAGE; n < n_end; ++n) accumulate_view(TextureFetch{texture}, n, fi, fj, fk0, sum);
        }
        __syncthreads();
        if (active) {
            for (int s = 0; s < n_stage; ++s) {
                const Tile t = s_tile[s];
                if (t.hb == 0)
                    accumulate_view(global, n0 + s, fi, fj, fk0, sum);
                else
                    accumulate_view(TileFetch{s_tiles + s * capacity, t, n_rows, n_cols}, n0 + s, fi, fj, fk0, sum);
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
