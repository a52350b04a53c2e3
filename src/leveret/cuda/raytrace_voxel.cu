// Structured Joseph's transpose, voxel-driven with a warp per voxel column
// (Projector's transpose="voxel", its default where it applies): the same
// weights as the forward (raytrace_joseph.cu), evaluated per voxel instead of
// per ray, so no atomics and each voxel written once.
//
// Voxel (i, j, k) receives, per view, from every detector column whose xy line
// passes within one voxel of the voxel's centre on the plane of that column's
// dominant axis (plane i of an x-dominant column, in-plane index j; plane j of
// a y-dominant one, in-plane index i), with in-plane weight wu = 1 - |fu - j|,
// and from every row of that column whose z on the plane lies within one voxel
// of k, weight 1 - |z - k|: the value y w of the ray (w: its plane-to-plane
// length, folded in by joseph_voxel_values, exactly as the atomic transpose
// spreads it). On the plane, z is affine in the row, z_r = zA + r zS (flat
// detector), so the rows come from one row coordinate t = (k - zA) / zS: the
// rows r within h = 1 / |zS| of t, weight wu max(0, 1 - |zS| |r - t|), read
// in a window of floor(2 h) + 1 rows (joseph_voxel_rows).
//
// A warp owns a patch of JV_PATCH x JV_PATCH voxel columns; its lanes are 32
// consecutive z voxels, each lane KZ voxels 32 apart (KZ a template parameter:
// the launcher takes the instance whose z tiles of 32 KZ voxels cover nz with
// the least idle lanes, raytrace.py's voxel_kz). The (view, column,
// plane) work (candidate columns, tau, fu, zA, zS, in float64 from
// joseph_voxel_columns' per-column numbers) is uniform across the warp, and
// the lanes' rows are adjacent entries of the column's values (layout (view,
// column, row), padded): one or two cache lines per load. With patches of
// 2 x 2 a column's z interpolation on a plane serves both in-plane neighbours
// (weights w[0], w[1]) and its set-up all four columns, at the cost of 4 KZ
// sums in registers: raytrace.py builds this file twice, one column per warp
// and 2 x 2, and takes 2 x 2 where the registers hold its sums for the row
// windows the detector needs (voxel_patch; measured in docs/performance.md).
// Per voxel: the row coordinate stepped in 32.32 fixed point (exact steps; the
// fraction into a float's mantissa), then per row of the window one load and
// two operations (the weight clamped to [0, 1] by the multiply-add itself,
// fma_sat).
// The z fractions are float64-accurate where the forward's float32 march
// (fmaf(dtau, mz, fr)) rounds: the two differ by that march's rounding, well
// inside 1e-5 (the tests' adjoint bound); joseph_float32_bound covers both.
//
// The row index is clamped to [-(JV_HMAX + 2), n_rows + JV_HMAX + 1]: a
// clamped row window then lies wholly in the zero padding (JV_PAD_LO,
// JV_PAD_HI rows), as the true one lies wholly outside the detector, so voxels
// above or below the detector's reach, and lanes beyond nz, read zeros at the
// cost of two integer operations instead of taking a slower path. The 2 x 2
// build at 16 z voxels skips the clamp for a (view, column, plane) whose rows
// all lie inside that range (joseph_voxel_rule). The launcher
// checks h < JV_HMAX + 1 (rows at least an eighth of a voxel apart in z).
//
// The constants come from raytrace.py (KERNEL_CONSTANTS, passed as -D options),
// which also sizes the launch from them:
//   LEVERET_JV_PATCH       a warp's voxel columns: JV_PATCH x JV_PATCH
//   LEVERET_JV_WARPS_X     a block's 8 warps (patches): JV_WARPS_X along x, 8 / JV_WARPS_X along y
//   LEVERET_JV_MIN_BLOCKS  blocks per multiprocessor the register allocation must allow
//   LEVERET_JV_HMAX        the most rows per voxel (either side) the padding covers
#include "raytrace_common.cuh"

#ifndef LEVERET_JV_PATCH
#error "LEVERET_JV_PATCH undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#endif
#ifndef LEVERET_JV_WARPS_X
#error "LEVERET_JV_WARPS_X undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#endif
#ifndef LEVERET_JV_MIN_BLOCKS
#error "LEVERET_JV_MIN_BLOCKS undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#endif
#ifndef LEVERET_JV_HMAX
#error "LEVERET_JV_HMAX undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#endif
#define JV_PATCH LEVERET_JV_PATCH
#define JV_WX LEVERET_JV_WARPS_X
#define JV_WY (8 / JV_WX)
#define JV_HMAX LEVERET_JV_HMAX
#define JV_PAD_LO (2 * JV_HMAX + 2)
#define JV_PAD_HI (2 * JV_HMAX + 3)
static_assert(JV_HMAX == 7, "joseph_voxel_rule dispatches windows of 1-6, 8, 12 and 2 JV_HMAX + 2 rows");
#define JV_NCOL 8   // float64 numbers per (view, column): see joseph_voxel_columns

// Per (view, column), from joseph_column (the forward's set-up): dominant axis
// (1: y), 1 / a_m, p_m, a_u, p_u (voxel-centre units), z slope per unit tau of
// row 0 (Mz0) and its change per row (Mz1), source z (voxel-centre units); per
// view, which dominant axes its columns have (flags: 1 x, 2 y).
extern "C" __global__ void joseph_voxel_columns(double* __restrict__ cols, int* __restrict__ flags,
                                                const double* __restrict__ params, const double* __restrict__ g,
                                                int nx, int ny, int n_views, int n_cols)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // view n_cols + col
    if (t >= (long long)n_views * n_cols) return;
    const int col = (int)(t % n_cols), view = (int)(t / n_cols);
    const double* par = params + 12 * view;
    const double u = (double)col;
    const JosephColumn j = joseph_column(par, g, u, nx, ny);
    double* c = cols + t * JV_NCOL;
    c[0] = j.my ? 1.0 : 0.0;
    c[1] = __ddiv_rn(1.0, j.am);
    c[2] = j.pm;
    c[3] = j.au;
    c[4] = j.pu;
    c[5] = mul(mul(add(mul(par[9], u), par[11]), j.c.inv_qxy), g[7]);
    c[6] = mul(mul(par[10], j.c.inv_qxy), g[7]);
    c[7] = j.pzc;
    atomicOr(flags + view, j.my ? 2 : 1);   // the view has y- (2) or x-dominant (1) columns: zeroed by the launcher
}

// y w per ray in joseph_voxel_gather's layout (view, column, JV_PAD_LO + row), zero
// padding rows; w as the forward's joseph_step, the product as the atomic
// transpose's value. Tiles of 32 columns x 32 padded rows through shared
// memory, so that both the reads (along columns) and the writes (along rows)
// are coalesced; a thread sets up its column once (joseph_column) for its 4
// rows. Grid (ceil(n_cols / 32), ceil(rows_p / 32), n_views), block (32, 8).
extern "C" __global__ void joseph_voxel_values(float* __restrict__ values, const float* __restrict__ proj, int nx,
                                               int ny, int nz, const double* __restrict__ params,
                                               const double* __restrict__ g, int n_views, int n_rows, int n_cols)
{
    __shared__ float tile[32][33];
    const int rows_p = n_rows + JV_PAD_LO + JV_PAD_HI;
    const int view = blockIdx.z, c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const double* par = params + 12 * view;
    for (int cc = threadIdx.x; cc < 32; cc += blockDim.x) {   // any block shape covers the tile
        const int col = c0 + cc;
        if (col >= n_cols) break;
        const JosephColumn jc = joseph_column(par, g, (double)col, nx, ny);
        for (int r = threadIdx.y; r < 32; r += blockDim.y) {
            const int row = r0 + r - JV_PAD_LO;
            float value = 0.0f;
            if (0 <= row && row < n_rows) {
                const float w = joseph_step(jc, par, g, (double)col, (double)row, nz);
                value = proj[((long long)view * n_rows + row) * n_cols + col] * w;
            }
            tile[r][cc] = value;
        }
    }
    __syncthreads();
    for (int c = threadIdx.y; c < 32; c += blockDim.y)
        for (int x = threadIdx.x; x < 32; x += blockDim.x) {
            const int rp = r0 + x;
            if (c0 + c < n_cols && rp < rows_p)
                values[((long long)view * n_cols + c0 + c) * rows_p + rp] = tile[x][c];
        }
}

// The hardware's reciprocal estimate (relative error < 2^-22; no range-check
// branch); the host build divides.
__device__ __forceinline__ float rcp_approx(float x)
{
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return 1.0f / x;
#endif
}

// The column coordinate of world point (x, y) from a view's float32 numbers
// (joseph_voxel_gather's vf: source x, y and the view parameters 8, 5, 3, 6,
// i.e. M^-1's entries (1, 2), (0, 2), (0, 0), (1, 0)): no float64 conversions
// per call. The column u whose vertical plane holds (x, y) solves
// u = (m12 dx - m02 dy) / (m00 dy - m10 dx), d = point - source.
__device__ __forceinline__ float column_of_f(const float4& a, const float2& b, float x, float y)
{
    const float dx = x - a.x, dy = y - a.y;
    return (a.z * dx - a.w * dy) * rcp_approx(b.x * dy - b.y * dx);
}

// A lane's KZ voxels k0 + 32 q from one (view, column, plane): W rows of the
// column's values (offset coloff), the first row index clamped to [tlo, thi]
// (see the top of this file), row coordinate t in 32.32 fixed point stepped
// by dt per voxel (two interleaved chains: shorter dependencies). The rows
// with weight are those within h = 1 / |zS| of t. An even W = 2 n + 2 reads
// rows T - n .. T + n + 1 around T = floor(t) (enough for h < n + 1); an odd
// W = 2 m + 1 reads rows T - m .. T + m around the nearest row T (enough for
// h <= m + 1/2): t comes in shifted by half a row. So floor(2 h) + 1 rows
// serve, one fewer than the even window where h lies in [m, m + 1/2]. The
// fraction f = lo 2^-32 becomes F = 1 + f by placing lo's top 23 bits in a
// float's mantissa (two integer operations instead of a conversion). Row
// weight 1 - |zS| |d - f|: even windows (1 + |zS| (1 + d)) - |zS| F for
// d <= 0 and (1 - |zS| (1 + d)) + |zS| F for d >= 1; odd windows (t - T =
// F - 3/2) 1 - |zS| |F - 3/2| for d = 0, (1 + |zS| (d + 3/2)) - |zS| F
// below, (1 - |zS| (d + 3/2)) + |zS| F above. With JV_PATCH 1 the in-plane
// weight scales the row weights and the voxel sums them directly; else the z
// sum goes to the patch's voxel columns with their weights w[b].
template <int W, int KZ, bool CLAMP>
__device__ __forceinline__ void joseph_voxel_rows(const float* __restrict__ values, int coloff, long long t,
                                                  long long dt, float zS, const float (&w)[JV_PATCH], int tlo,
                                                  int thi, float (*acc[JV_PATCH])[KZ])
{
    constexpr bool ODD = W % 2 == 1;
    constexpr int LO = ODD ? -(W / 2) : 1 - W / 2, HI = ODD ? W / 2 : W / 2;   // rows T + LO .. T + HI
    const float s = JV_PATCH == 1 ? w[0] : 1.0f;   // scale of the row weights
    const float zw = zS * s;
    long long tq[2] = {t, t + dt};
    const long long dt2 = 2 * dt;
#pragma unroll
    for (int q = 0; q < KZ; ++q) {
        const long long tc = tq[q & 1];
        tq[q & 1] += dt2;
        const int T = (int)(tc >> 32);
        const float F = __int_as_float(0x3f800000 | ((unsigned)tc >> 9));
        const float* p = values + (coloff + (CLAMP ? min(max(T, tlo), thi) : T));
        float sum = 0.0f;
        float& out = JV_PATCH == 1 ? (*acc[0])[q] : sum;
        if (W == 1) {   // its own statement: the 8- and 12-deep builds' code as it was measured
            out = fmaf(fma_sat(-zw, fabsf(F - 1.5f), s), p[0], out);
        }
#pragma unroll
        for (int d = LO; d <= HI; ++d) {
            if (W == 1) break;
            const float wr = ODD ? (d == 0 ? fma_sat(-zw, fabsf(F - 1.5f), s)
                                           : d > 0 ? fma_sat(zw, F, s - zw * (d + 1.5f))
                                                   : fma_sat(-zw, F, s + zw * (d + 1.5f)))
                                 : (d >= 1 ? fma_sat(zw, F, s - zw * (1 + d)) : fma_sat(-zw, F, s + zw * (1 + d)));
            out = fmaf(wr, p[d], out);
        }
        if (JV_PATCH > 1) {
#pragma unroll
            for (int b = 0; b < JV_PATCH; ++b) (*acc[b])[q] = fmaf(w[b], sum, (*acc[b])[q]);
        }
    }
}

// World coordinates a warp's patch needs per rule, fixed over the views: the
// planes' centres and the in-plane window's ends (1.5 voxels beyond the first
// and last in-plane voxel centre), plane axis x (MY false) or y (MY true).
struct PatchLine {
    float plane[JV_PATCH], lo, hi;
};

template <bool MY>
__device__ __forceinline__ PatchLine patch_line(const double* __restrict__ g, int i0, int j0)
{
    PatchLine L;
    const int pa = MY ? 1 : 0, ia = MY ? 0 : 1;   // axes of the plane and of the in-plane index
    const int p0 = MY ? j0 : i0, b0 = MY ? i0 : j0;
#pragma unroll
    for (int a = 0; a < JV_PATCH; ++a) L.plane[a] = (float)(g[2 + pa] + ((double)(p0 + a) + 0.5) / g[5 + pa]);
    L.lo = (float)(g[2 + ia] + ((double)b0 - 0.5) / g[5 + ia]);
    L.hi = (float)(g[2 + ia] + ((double)(b0 + JV_PATCH) + 0.5) / g[5 + ia]);
    return L;
}

// One view's candidate columns of one rule for a warp's patch at (i0, j0):
// MY false, x-dominant columns on planes i0 + a (in-plane j0 + b); MY true,
// y-dominant columns on planes j0 + a (in-plane i0 + b). acc[b][a][q]: voxel
// (i0 + a, j0 + b, k0 + 32 q). Plane after plane, candidates: the columns
// between those of the window's ends on the plane, padded by 0.01, each
// tested exactly. Only one plane's column numbers are live at a time (with
// 2 x 2 columns at 12 and 16 z voxels the sums fill the registers); each
// sum still takes its columns in the same order.
template <bool MY, int KZ>
__device__ __forceinline__ void joseph_voxel_rule(const float4& va, const float2& vb, const PatchLine& L,
                                                  int i0, int j0, int k0, const double* vcols,
                                                  const float* __restrict__ values, int voff, int rows_p, int n_rows,
                                                  int n_cols, float (&acc)[JV_PATCH][JV_PATCH][KZ])
{
    const int p0 = MY ? j0 : i0, b0 = MY ? i0 : j0;
    const int tlo = -(JV_HMAX + 2), thi = n_rows + JV_HMAX + 1;
#pragma unroll
    for (int a = 0; a < JV_PATCH; ++a) {   // plane by plane: only one plane's column numbers live at a time
        const float c0 = MY ? column_of_f(va, vb, L.lo, L.plane[a]) : column_of_f(va, vb, L.plane[a], L.lo);
        const float c1 = MY ? column_of_f(va, vb, L.hi, L.plane[a]) : column_of_f(va, vb, L.plane[a], L.hi);
        const float lo = fminf(c0, c1), hi = fmaxf(c0, c1);
        if (!(hi >= -1.0f && lo <= (float)n_cols)) continue;   // also NaN (no column)
        const int ua = max(0, (int)ceilf(fmaxf(lo, -2.0f) - 0.01f));
        const int ub = min(n_cols - 1, (int)floorf(fminf(hi, (float)n_cols + 1.0f) + 0.01f));
        for (int u = ua; u <= ub; ++u) {
            // The column's eight numbers in four 16-byte loads issued together.
            const double2* c2 = (const double2*)(vcols + (long long)u * JV_NCOL);
            const double2 cA = c2[0], cB = c2[1], cC = c2[2], cD = c2[3];   // (my, 1/am) (pm, au) (pu, Mz0) (Mz1, pzc)
            // The NaN tests (never true) make all four loads precede the branch:
            // the compiler does not hoist loads above a branch, and loads issued
            // one after another would wait out each latency in turn.
            if (((cA.x != 0.0) != MY) | (cB.x != cB.x) | (cC.x != cC.x) | (cD.x != cD.x)) continue;
            const int coloff = voff + u * rows_p;   // 32-bit offsets: a batch holds < 2^31 values
            const double tau = ((double)(p0 + a) - cB.x) * cA.y;
            if (!(tau >= 0.0)) continue;   // cone rays start at the source
            // The in-plane offset from the first voxel in float64, then small: float32.
            const float fu = (float)(cC.x + tau * cB.y - (double)b0);
            float w[JV_PATCH];
            bool any = false;
#pragma unroll
            for (int b = 0; b < JV_PATCH; ++b) {
                w[b] = fmaxf(0.0f, 1.0f - fabsf(fu - (float)b));
                any |= w[b] > 0.0f;
            }
            if (!any) continue;
            const double zA = cD.y + tau * cC.y, zS = tau * cD.x;
            if (zS == 0.0) continue;
            // 1 / zS: the float32 estimate and one Newton step in float64 (relative
            // error ~1e-14; a correctly rounded float64 division costs ~25 instructions).
            const double r0 = (double)rcp_approx((float)zS);
            const double inv = fma(r0, fma(-zS, r0, 1.0), r0);
            // h, nh and inside serve one branch each below; declared here, as in the kernel the
            // 8- and 12-deep builds were measured with (their PTX is unchanged).
            const double h = fabs(inv);   // rows per voxel
            const int nh = h <= 0.5 ? -1 : min((int)h, JV_HMAX);   // builds other than 16: 2 nh + 2 rows, or 1
            const float zSa = (float)fabs(zS);
            // Row coordinate of voxel k0 and its step per 32 voxels, 32.32 fixed point.
            // |t0| < 2^30 (the launcher checks: voxel_row_extent), so t + 31 dt fits 64 bits.
            const double t0 = ((double)k0 - zA) * inv;
            const long long t = __double2ll_rn(t0 * 4294967296.0);
            const long long dt = __double2ll_rn(32.0 * inv * 4294967296.0);
            float (*dst[JV_PATCH])[KZ];
#pragma unroll
            for (int b = 0; b < JV_PATCH; ++b) dst[b] = MY ? &acc[a][b] : &acc[b][a];
            const double tw0 = ((double)(k0 & ~31) - zA) * inv, tw1 = tw0 + (double)(32 * KZ - 1) * inv;
            const bool inside = fmin(tw0, tw1) >= (double)(tlo + 1) && fmax(tw0, tw1) <= (double)(thi - 1);
            const long long half = 1LL << 31;   // odd windows: t shifted by half a row
            // The window is the same across the warp (a (view, column, plane) number): no
            // divergence. A window wider than needed reads rows of weight zero (fewer
            // instances to compile): 6 rows serve 5, 8 serve 7, 12 serve 9-11, 16 the rest.
            if (KZ == 16) {
                // floor(2 h) + 1 rows. 2 x 2 columns (taken where rows are sparse,
                // voxel_patch) read the rows unclamped where the warp's row coordinates,
                // from its first voxel's to its last's (t is affine in k), all lie a row
                // inside [tlo, thi] and at most 2 rows serve a voxel.
                const int nw = min((int)(2.0 * h) + 1, 2 * JV_HMAX + 2);
                if (JV_PATCH > 1 && nw <= 2 && inside) {
                    if (nw == 1)
                        joseph_voxel_rows<1, KZ, false>(values, coloff, t + half, dt, zSa, w, tlo, thi, dst);
                    else
                        joseph_voxel_rows<2, KZ, false>(values, coloff, t, dt, zSa, w, tlo, thi, dst);
                    continue;
                }
                switch (nw) {
                case 1: joseph_voxel_rows<1, KZ, true>(values, coloff, t + half, dt, zSa, w, tlo, thi, dst); break;
                case 2: joseph_voxel_rows<2, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 3: joseph_voxel_rows<3, KZ, true>(values, coloff, t + half, dt, zSa, w, tlo, thi, dst); break;
                case 4: joseph_voxel_rows<4, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 5:
                case 6: joseph_voxel_rows<6, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 7:
                case 8: joseph_voxel_rows<8, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 9:
                case 10:
                case 11:
                case 12: joseph_voxel_rows<12, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                default: joseph_voxel_rows<2 * JV_HMAX + 2, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst);
                }
            } else {
                // 2 floor(h) + 2 rows (1 for h up to 1/2): the odd window of 3 rows, and
                // the unclamped path, measured slower in these builds.
                switch (nh) {
                case -1: joseph_voxel_rows<1, KZ, true>(values, coloff, t + half, dt, zSa, w, tlo, thi, dst); break;
                case 0: joseph_voxel_rows<2, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 1: joseph_voxel_rows<4, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 2: joseph_voxel_rows<6, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 3: joseph_voxel_rows<8, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                case 4:
                case 5: joseph_voxel_rows<12, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst); break;
                default: joseph_voxel_rows<2 * JV_HMAX + 2, KZ, true>(values, coloff, t, dt, zSa, w, tlo, thi, dst);
                }
            }
        }
    }
}

// Blocks of 8 warps on a JV_WX x JV_WY arrangement of patches (neighbouring
// voxel columns read the same detector columns: L1 hits); grid
// (ceil(nx / (JV_WX JV_PATCH)), ceil(ny / (JV_WY JV_PATCH)), z tiles of 32 KZ
// voxels from k_base, a multiple of 32: the launcher covers only the slices
// some ray reaches, raytrace.py's voxel_z_range).
// volT: the z-fastest volume (ny, nx, nz); values, cols and flags for the
// views [0, n_views) of this batch, vf their float32 numbers for column_of_f
// (8 per view); accumulate: add to volT.
template <int KZ>
__device__ __forceinline__ void joseph_voxel_gather(
    float* __restrict__ volT, const float* __restrict__ values, const double* __restrict__ cols,
    const int* __restrict__ flags, const float* __restrict__ vf, const double* __restrict__ g, int nx, int ny,
    int nz, int n_views, int n_rows, int n_cols, int accumulate, int k_base)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i0 = (blockIdx.x * JV_WX + warp % JV_WX) * JV_PATCH, j0 = (blockIdx.y * JV_WY + warp / JV_WX) * JV_PATCH;
    if (i0 >= nx || j0 >= ny) return;   // whole warps; no barrier below
    const int k0 = k_base + blockIdx.z * (32 * KZ) + lane;
    const int rows_p = n_rows + JV_PAD_LO + JV_PAD_HI;
    float acc[JV_PATCH][JV_PATCH][KZ];
#pragma unroll
    for (int b = 0; b < JV_PATCH; ++b)
#pragma unroll
        for (int a = 0; a < JV_PATCH; ++a)
#pragma unroll
            for (int q = 0; q < KZ; ++q) acc[b][a][q] = 0.0f;
    const PatchLine Lx = patch_line<false>(g, i0, j0), Ly = patch_line<true>(g, i0, j0);
    for (int view = 0; view < n_views; ++view) {
        const float4 va = ((const float4*)vf)[2 * view];
        const float2 vb = ((const float2*)vf)[4 * view + 2];
        const double* vcols = cols + (long long)view * n_cols * JV_NCOL;
        const int voff = view * n_cols * rows_p + JV_PAD_LO;
        const int has = flags[view];
        if (has & 1)
            joseph_voxel_rule<false, KZ>(va, vb, Lx, i0, j0, k0, vcols, values, voff, rows_p, n_rows, n_cols, acc);
        if (has & 2)
            joseph_voxel_rule<true, KZ>(va, vb, Ly, i0, j0, k0, vcols, values, voff, rows_p, n_rows, n_cols, acc);
    }
#pragma unroll
    for (int b = 0; b < JV_PATCH; ++b)
#pragma unroll
        for (int a = 0; a < JV_PATCH; ++a) {
            if (i0 + a >= nx || j0 + b >= ny) continue;
            float* const out = volT + ((long long)(j0 + b) * nx + i0 + a) * nz;
#pragma unroll
            for (int q = 0; q < KZ; ++q) {
                const int k = k0 + 32 * q;
                if (k < nz) out[k] = accumulate ? out[k] + acc[b][a][q] : acc[b][a][q];
            }
        }
}

// One entry point per z depth KZ (raytrace.py: VOXEL_KZ lists them, voxel_kz picks one).
#define JV_GATHER(KZ)                                                                                              \
    extern "C" __global__ void __launch_bounds__(256, LEVERET_JV_MIN_BLOCKS) joseph_voxel_gather_kz##KZ(           \
        float* __restrict__ volT, const float* __restrict__ values, const double* __restrict__ cols,               \
        const int* __restrict__ flags, const float* __restrict__ vf, const double* __restrict__ g, int nx, int ny, \
        int nz, int n_views, int n_rows, int n_cols, int accumulate, int k_base)                                   \
    {                                                                                                              \
        joseph_voxel_gather<KZ>(volT, values, cols, flags, vf, g, nx, ny, nz, n_views, n_rows, n_cols, accumulate,  \
                                k_base);                                                                           \
    }
JV_GATHER(1)
JV_GATHER(4)
JV_GATHER(8)
JV_GATHER(12)
JV_GATHER(16)
