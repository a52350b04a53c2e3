// Structured Joseph (float32): the structured path of Thompson and Lionheart
// (2014) applied to Joseph's model. For a circular scan without detector tilt
// the rays of one detector column share their xy line, and where no ray is steeper in z than along its dominant xy
// axis (structured_ratio <= 1: the launcher checks) every row samples the
// same planes of that axis (x or y) at the same horizontal lengths tau_s, with
// the same in-plane xy index fu_s. Per block (view, column) the planes' tau_s
// (relative to a centre plane), the in-plane weights 1 - a_s, a_s (a_s the
// fraction of fu_s) and the element offset of the plane's first in-plane
// voxel are computed once in float64 and kept in shared memory, one 16-byte
// entry per plane; per row only the z index iz_c + fr + dtau_s mz (fr in
// [0, 1): no float32 number holds a large coordinate, so the bound of
// joseph_fast holds, raytrace.py: joseph_float32_bound) and the
// plane-to-plane length w = L / |a_m| are new.
//
// The volume is a padded z-fastest copy volP (ny + 2, nx + 2,
// joseph_padded_nz(nz, JZ_PAD)) with zero borders (one voxel in x and y,
// JZ_PAD in z below, at least JZ_PAD above): adjacent rows
// read/write adjacent z voxels, and no sample needs a bounds test. Planes
// that a column does not sample (behind the source, or the in-plane index
// outside (-1, n)) point at the zero border with weights (1, 0). A row's
// plane range is its z range in float64 padded by one plane; with at most
// one z voxel per plane (the ratio test) and float32 rounding, its samples
// stay within z (-2 - 1e-3, nz + 1 + 1e-3), so they and their upper
// neighbours fall in [-3, nz + 2]: JZ_PAD >= 3. It is 8, so that with
// joseph_padded_nz a multiple of 8 every column's z = 0 starts a 32-byte
// sector (the band transpose below). A zero border contributes
// exactly what the float64 model's range tests drop (nothing); in the
// transpose the border collects values nobody reads.
//
// One sample is a broadcast 16-byte shared load, four float32 operations for
// the z index and fraction, four global loads and six multiply-adds; the
// plane-to-plane length multiplies the ray sum once (forward) or the ray's
// value once (transpose), so both directions have the weights
// w * wu_c * wv_c with the same float32 factors: the transpose (atomicAdd)
// is exact. Blocks run in groups of `view_group` views per column
// (grouped_block). The transpose without atomics is in raytrace_voxel.cu;
// below, the band transpose, which adds per voxel instead of per sample.
#include "raytrace_common.cuh"

#ifndef LEVERET_JOSEPH_PAD_Z
#error "LEVERET_JOSEPH_PAD_Z undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#elif LEVERET_JOSEPH_PAD_Z < 3
#error "LEVERET_JOSEPH_PAD_Z: the samples reach z in [-3, nz + 2] (see above)"
#endif
#define JZ_PAD LEVERET_JOSEPH_PAD_Z

struct JPlane {
    float dtau, wu0, wu1;
    int base;   // element offset in volP of (plane, in-plane index, z = 0)
};

// A column's strides in volP (ny + 2, nx + 2, joseph_padded_nz) along its
// plane axis (s_m) and its in-plane axis (s_u), and the offset of voxel (0, 0, 0).
struct JStrides {
    int s_m, s_u, origin;
};

__device__ __forceinline__ JStrides joseph_strides(const JosephColumn& jc, int nx, int nz)
{
    const int pnx = nx + 2, pnz = joseph_padded_nz(nz, JZ_PAD);
    return {jc.my ? pnx * pnz : pnz, jc.my ? pnz : pnx * pnz, (pnx + 1) * pnz + JZ_PAD};
}

template <bool ADJ>
__device__ void structured_joseph(float* volP, float* proj, int nx, int ny, int nz,
                                  const double* __restrict__ params, const double* __restrict__ g,
                                  int n_views, int n_rows, int n_cols, int view_group)
{
    extern __shared__ double smem[];
    int col, view;
    if (!grouped_block(view_group, n_views, col, view)) return;
    const double* par = params + 12 * view;
    const double u = (double)col;
    const JosephColumn jc = joseph_column(par, g, u, nx, ny);
    const long long out0 = (long long)view * n_rows * n_cols + col;
    const int nm = jc.nm, nu = jc.nu;
    const double am = jc.am, au_ = jc.au, pm = jc.pm, pu = jc.pu, pzc = jc.pzc;
    const JStrides st = joseph_strides(jc, nx, nz);
    const int s_m = st.s_m, s_u = st.s_u, origin = st.origin;
    const long long s_u64 = s_u;   // to the upper in-plane neighbour
    JPlane* planes = (JPlane*)smem;
    for (int sp = threadIdx.x; sp < nm; sp += blockDim.x) {
        float dtau, a;
        int iu;
        bool ok;
        joseph_plane(jc, sp, dtau, a, iu, ok);
        JPlane e;
        e.dtau = dtau;
        e.wu0 = 1.0f - a;
        e.wu1 = a;
        e.base = origin + sp * s_m + iu * s_u;
        planes[sp] = e;
    }
    __syncthreads();
    // The column's planes (tau >= 0, in-plane index in (-1, nu)), padded by one plane.
    double cw0 = 0.0, cw1 = (double)(nm - 1);
    {
        const double pmc = fmin(fmax(pm, -2.0), (double)nm + 1.0);
        if (am > 0.0) cw0 = fmax(cw0, ceil(pmc)); else cw1 = fmin(cw1, floor(pmc));
        if (au_ != 0.0) {
            const double ta = __ddiv_rn(-1.0 - pu, au_), tb = __ddiv_rn((double)nu - pu, au_);
            const double sa = pm + fmin(ta, tb) * am, sb = pm + fmax(ta, tb) * am;
            cw0 = fmax(cw0, floor(fmin(sa, sb)) - 1.0);
            cw1 = fmin(cw1, ceil(fmax(sa, sb)) + 1.0);
        }
    }
    for (int row = threadIdx.x; row < n_rows; row += blockDim.x) {
        const float w = joseph_step(jc, par, g, u, (double)row, nz);
        const float value = ADJ ? proj[out0 + (long long)row * n_cols] * w : 0.0f;
        if (ADJ && value == 0.0f) continue;
        float fr, mz;
        int iz;
        const double rmz = joseph_row(jc, par, g, u, (double)row, fr, mz, iz);
        // Planes whose z index can lie in (-1, nz), padded by one.
        int s0 = 0, s1 = nm - 1;
        if (rmz != 0.0) {
            const double ta = __ddiv_rn(-1.0 - pzc, rmz), tb = __ddiv_rn((double)nz - pzc, rmz);
            const double sa = pm + fmin(ta, tb) * am, sb = pm + fmax(ta, tb) * am;
            const double lo = fmax(floor(fmin(sa, sb)) - 1.0, 0.0), hi = fmin(ceil(fmax(sa, sb)) + 1.0, (double)(nm - 1));
            s0 = lo > hi ? 1 : (int)lo;
            s1 = lo > hi ? 0 : (int)hi;
        } else if (!(-1.0 < pzc && pzc < (double)nz)) {
            s0 = 1; s1 = 0;
        }
        s0 = max(s0, (int)fmax(cw0, -1.0));
        s1 = min(s1, (int)fmin(cw1, (double)nm));
        const int n_s = s1 - s0 + 1;
        if (n_s <= 0) {
            if (!ADJ) proj[out0 + (long long)row * n_cols] = 0.0f;
            continue;
        }
        // iz + floor(fv) is a sample's z index, in [-3, nz + 2] on the planes s0..s1
        const int sp0 = am > 0.0 ? s0 : s1, dsp = am > 0.0 ? 1 : -1;   // along the ray
        double acc = 0.0;
        float part = 0.0f;   // float32 partial sums of 8 planes, then float64
        // One sample: 32-bit offsets from the two in-plane neighbours' base pointers.
        auto sample = [&](int n) {
            const JPlane e = planes[sp0 + n * dsp];
            const float fv = fmaf(e.dtau, mz, fr);
            const float flv = floorf(fv);
            const float av = fv - flv, bv = 1.0f - av;
            float* const p0 = volP + (e.base + iz + (int)flv);
            float* const p1 = p0 + s_u64;
            if (ADJ) {
                const float t0 = e.wu0 * value, t1 = e.wu1 * value;
                atomicAdd(p0, t0 * bv);
                atomicAdd(p0 + 1, t0 * av);
                atomicAdd(p1, t1 * bv);
                atomicAdd(p1 + 1, t1 * av);
            } else {
                part = fmaf(e.wu0, fmaf(bv, p0[0], av * p0[1]), part);
                part = fmaf(e.wu1, fmaf(bv, p1[0], av * p1[1]), part);
            }
        };
        // Whole groups of 8 planes without per-sample tests, then the rest. A
        // sample's chain (shared load, index, global load) is ~700 cycles long,
        // which one sample at a time would need ~80 warps per SM to hide: the
        // forward is software-pipelined instead, the next group's 32 loads in
        // flight while the current group is summed (groups A and B alternate;
        // the last turn reloads its own group, unused, rather than branch).
        int n = 0;
        const int n_full = n_s & ~7;
        if (ADJ) {
            for (; n < n_full; n += 8) {
#pragma unroll
                for (int q = 0; q < 8; ++q) sample(n + q);
            }
        } else if (n_full > 0) {
            float A[5][8], B[5][8];   // the four corners and the z fraction of 8 samples
            auto load8 = [&](int n8, float (&L)[5][8]) {
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    const JPlane e = planes[sp0 + (n8 + q) * dsp];
                    const float fv = fmaf(e.dtau, mz, fr);
                    const float flv = floorf(fv);
                    const float* const p0 = volP + (e.base + iz + (int)flv);
                    const float* const p1 = p0 + s_u64;
                    L[0][q] = p0[0];
                    L[1][q] = p0[1];
                    L[2][q] = p1[0];
                    L[3][q] = p1[1];
                    L[4][q] = fv - flv;
                }
            };
            auto sum8 = [&](int n8, const float (&L)[5][8]) {   // the operations of sample()
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    const JPlane e = planes[sp0 + (n8 + q) * dsp];
                    const float av = L[4][q], bv = 1.0f - av;
                    part = fmaf(e.wu0, fmaf(bv, L[0][q], av * L[1][q]), part);
                    part = fmaf(e.wu1, fmaf(bv, L[2][q], av * L[3][q]), part);
                }
                acc += (double)part;
                part = 0.0f;
            };
            load8(0, A);
            while (true) {
                load8(n + 8 < n_full ? n + 8 : n, B);
                sum8(n, A);
                n += 8;
                if (n >= n_full) break;
                load8(n + 8 < n_full ? n + 8 : n, A);
                sum8(n, B);
                n += 8;
                if (n >= n_full) break;
            }
        }
        for (; n < n_s; ++n) sample(n);
        acc += (double)part;
        if (!ADJ) proj[out0 + (long long)row * n_cols] = (float)(acc * (double)w);
    }
}

GROUPED_KERNEL(structured_joseph_forward_fast, structured_joseph, false)
GROUPED_KERNEL(structured_joseph_adjoint_fast, structured_joseph, true)

// The transpose driven by columns, with a warp's lanes on voxels instead of
// rows (transpose="atomic" where the voxel transpose's conditions hold and a
// column's bands fit in shared memory: raytrace.py's CudaRaytracer.band).
// Block (view, column) as above; per plane the column's rows reach a band of
// z voxels [klo, khi] on its two in-plane voxels. A warp takes a plane, its
// lanes the band's voxels: each voxel sums
// its rows' values y w with weights 1 - |zS| |r - t| over the rows r within
// h = 1 / |zS| of its row coordinate t = (k - zA) / zS (z on the plane is
// affine in the row: zA + r zS, as in raytrace_voxel.cu), then adds the sum
// times the in-plane weights 1 - a, a with two atomics. A scatter adds four
// values per sample, each voxel receiving ~2 h per plane; here each touched
// voxel takes two adds per plane and column, and adjacent lanes add into
// adjacent z: where rows are few or dense, fewer atomics and instructions.
//
// The per-(column, plane) numbers (band, t at voxel 0 and its step per voxel
// in 32.32 fixed point, window width, in-plane weights and offset) are formed
// by the block's threads plane by plane into shared memory, then read by the
// warps; the rows' values sit in shared memory with JB_PAD_LO / JB_PAD_HI
// zero rows either side (windows of up to 2 JB_HMAX + 2 rows, the launcher
// checks h < JB_HMAX + 1). The z fractions are float64-accurate where the
// forward's float32 march (fmaf(dtau, mz, fr)) rounds, as the voxel
// transpose's: the two differ by that march's rounding, well inside 1e-5.
#ifndef LEVERET_JV_HMAX
#error "LEVERET_JV_HMAX undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#endif
#define JB_HMAX LEVERET_JV_HMAX
#define JB_PAD_LO (2 * JB_HMAX + 2)
#define JB_PAD_HI (2 * JB_HMAX + 3)

struct JBand {
    long long t0, dt;    // row coordinate of voxel k: t0 + k dt (32.32 fixed point)
    int base;            // element offset in volP of (plane, lower in-plane voxel, z = 0)
    float wu0, wu1, zw;  // in-plane weights; |zS|, the z step per row
    int klo, khi, nw;    // the band [klo, khi] (empty: klo > khi); the window reads rows T - nw .. T + nw + 1
    int kst;             // the lanes' first voxel: klo or the start of its sector (see below)
};

// sum over the rows T + d, d in [-N, N + 1], of weight 1 - zw |d - f| (F = 1 + f) times the row's value
template <int N>
__device__ __forceinline__ float band_rows(const float* __restrict__ v, float F, float zw, int n)
{
    float s = 0.0f;
#pragma unroll
    for (int d = -(N < 0 ? 0 : N); d <= (N < 0 ? 0 : N) + 1; ++d) {
        const float wr = d >= 1 ? fma_sat(zw, F, 1.0f - zw * (1 + d)) : fma_sat(-zw, F, 1.0f + zw * (1 + d));
        s = fmaf(wr, v[d], s);
    }
    if (N < 0) {   // any width: the rows beyond the first two
        for (int d = 1; d <= n; ++d) {
            s = fmaf(fma_sat(zw, F, 1.0f - zw * (2 + d)), v[1 + d], s);
            s = fmaf(fma_sat(-zw, F, 1.0f + zw * (1 - d)), v[-d], s);
        }
    }
    return s;
}

__device__ void structured_joseph_band(float* volP, const float* __restrict__ proj, int nx, int ny, int nz,
                                       const double* __restrict__ params, const double* __restrict__ g, int n_views,
                                       int n_rows, int n_cols, int view_group)
{
    extern __shared__ double smem[];
    int col, view;
    if (!grouped_block(view_group, n_views, col, view)) return;
    const double* par = params + 12 * view;
    const double u = (double)col;
    const JosephColumn jc = joseph_column(par, g, u, nx, ny);
    const int nm = jc.nm;
    JBand* bands = (JBand*)smem;
    float* vals = (float*)(bands + nm) + JB_PAD_LO;   // the column's y w, rows -JB_PAD_LO .. n_rows + JB_PAD_HI - 1
    const JStrides st = joseph_strides(jc, nx, nz);
    const int s_m = st.s_m, s_u = st.s_u, origin = st.origin;
    const double inv_am = __ddiv_rn(1.0, jc.am);
    // z = zA + r zS on a plane at tau: zA = pzc + tau Mz0, zS = tau Mz1 (joseph_row's slope is Mz0 + r Mz1)
    const double Mz0 = mul(mul(add(mul(par[9], u), par[11]), jc.c.inv_qxy), g[7]);
    const double Mz1 = mul(mul(par[10], jc.c.inv_qxy), g[7]);
    for (int sp = threadIdx.x; sp < nm; sp += blockDim.x) {
        JBand e;
        e.klo = 1; e.khi = 0; e.kst = 1;
        float dtau, a;
        int iu;
        bool ok;
        joseph_plane(jc, sp, dtau, a, iu, ok);
        const double tau = ((double)sp - jc.pm) * inv_am;
        const double zA = jc.pzc + tau * Mz0, zS = tau * Mz1;
        if (ok && zS != 0.0) {
            // voxels within one of a row's z: (min z - 1, max z + 1), inside the grid
            const double z1 = zA + (double)(n_rows - 1) * zS;
            e.klo = max(0, (int)floor(fmax(fmin(zA, z1), -2.0) - 1.0) + 1);
            e.khi = min(nz - 1, (int)ceil(fmin(fmax(zA, z1), (double)nz + 1.0) + 1.0) - 1);
            const double inv = 1.0 / zS;
            e.nw = min((int)fabs(inv), JB_HMAX);
            e.zw = (float)fabs(zS);
            e.t0 = __double2ll_rn(-zA * inv * 4294967296.0);
            e.dt = __double2ll_rn(inv * 4294967296.0);
            e.wu0 = 1.0f - a;
            e.wu1 = a;
            e.base = origin + sp * s_m + iu * s_u;
            // The L2 adds whole 32-byte sectors: lanes that start on a sector boundary (z = 0 starts
            // one, and s_u is a multiple of 8: both in-plane voxels) add into one sector fewer per
            // pass after the first, where that takes no extra pass over the band.
            const int shift = (e.base + e.klo) & 7, n = e.khi - e.klo + 1;
            e.kst = ((n + shift + 31) >> 5) == ((n + 31) >> 5) ? e.klo - shift : e.klo;
        }
        bands[sp] = e;
    }
    for (int r = (int)threadIdx.x - JB_PAD_LO; r < n_rows + JB_PAD_HI; r += blockDim.x)
        vals[r] = 0 <= r && r < n_rows
                      ? proj[((long long)view * n_rows + r) * n_cols + col] * joseph_step(jc, par, g, u, (double)r, nz)
                      : 0.0f;
    __syncthreads();
    // The host build runs one thread per block: it is its own warp of one lane.
    const int lanes = min(32, (int)blockDim.x), warps = max(1, (int)blockDim.x / 32);
    const int lane = threadIdx.x % lanes, warp = threadIdx.x / lanes;
    const int tlo = -(JB_HMAX + 2), thi = n_rows + JB_HMAX + 1;   // a window at a clamped T reads zero rows only
    for (int sp = warp; sp < nm; sp += warps) {
        const JBand e = bands[sp];
        for (int k = e.kst + lane; k <= e.khi; k += lanes) {
            if (k < e.klo) continue;
            const long long t = e.t0 + (long long)k * e.dt;
            const int T = min(max((int)(t >> 32), tlo), thi);
            const float F = __int_as_float(0x3f800000 | ((unsigned)t >> 9));
            const float* v = vals + T;
            float sum;
            switch (e.nw) {   // the same across the warp
            case 0: sum = band_rows<0>(v, F, e.zw, 0); break;
            case 1: sum = band_rows<1>(v, F, e.zw, 1); break;
            case 2: sum = band_rows<2>(v, F, e.zw, 2); break;
            default: sum = band_rows<-1>(v, F, e.zw, e.nw);
            }
            if (sum != 0.0f) {
                atomicAdd(volP + e.base + k, e.wu0 * sum);
                atomicAdd(volP + e.base + s_u + k, e.wu1 * sum);
            }
        }
    }
}

extern "C" __global__ void structured_joseph_adjoint_band(float* volP, const float* __restrict__ proj, int nx, int ny,
                                                          int nz, const double* __restrict__ params,
                                                          const double* __restrict__ g, int n_views, int n_rows,
                                                          int n_cols, int view_group)
{
    structured_joseph_band(volP, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, view_group);
}
