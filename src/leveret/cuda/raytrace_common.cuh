// What the ray-tracing kernels share (raytrace_general.cu, raytrace_siddon.cu,
// raytrace_joseph.cu, raytrace_voxel.cu; launcher: raytrace.py): explicitly
// rounded float64 arithmetic, the ray of a detector pixel, and the column and
// row set-up of the structured cone-beam kernels.
//
// Parameters per view (12 float64):
//   parallel: cos t, sin t, centre (pixels, axis_shift included), 0...
//   cone:     source x, y, z, then M^-1 (3x3, row major) with M = P[:, :3],
//             so the direction through pixel (u, v) is M^-1 (u, v, 1), normalised.
//   parallel_vec: pixel (0, 0)'s centre, the column step, the row step, the unit
//             ray direction (3 each): pixel (u, v) is the line through
//             (p00 + u step_u) + v step_v along the ray (ParallelVecGeometry).
// g (8 float64): det_spacing, row_spacing, offset x, y, z (world low corner of
//   the grid), scale x, y, z (1 / voxel size).
//
// Every product and sum that must match the CPU's ray tables (or another
// kernel's weights) is written with __dmul_rn / __dadd_rn / __dsub_rn, which
// keep the compiler from fusing them into FMAs.
#pragma once

#define KIND_PARALLEL 0
#define KIND_CONE 1
#define KIND_PARALLEL_VEC 2

__device__ __forceinline__ double d_inf() { return __longlong_as_double(0x7ff0000000000000LL); }

__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }

// The ray of pixel (view, row, col), in index space (voxel i spans [i, i+1)):
// point p at t = 0 and the change dp of the index coordinates per world length.
__device__ __forceinline__ void make_ray(int kind, const double* __restrict__ par, const double* __restrict__ g,
                                         int row, int col, int n_rows, int is2d,
                                         double& px, double& py, double& pz,
                                         double& dx, double& dy, double& dz)
{
    double ox, oy, oz, ux, uy, uz;
    if (kind == KIND_PARALLEL) {
        const double c = par[0], s = par[1];
        const double sd = mul(sub((double)col, par[2]), g[0]);
        ox = mul(sd, c);
        oy = mul(sd, s);
        oz = is2d ? 0.0 : mul(sub((double)row, (double)(n_rows - 1) / 2.0), g[1]);
        ux = -s; uy = c; uz = 0.0;
    } else if (kind == KIND_PARALLEL_VEC) {
        const double u = (double)col, v = (double)row;
        ox = add(add(par[0], mul(u, par[3])), mul(v, par[6]));
        oy = add(add(par[1], mul(u, par[4])), mul(v, par[7]));
        oz = add(add(par[2], mul(u, par[5])), mul(v, par[8]));
        ux = par[9]; uy = par[10]; uz = par[11];
    } else {
        ox = par[0]; oy = par[1]; oz = par[2];
        const double u = (double)col, v = (double)row;
        // einsum("nij,kj->nki"): Minv[i,0] u + Minv[i,1] v + Minv[i,2] 1, left to right
        ux = add(add(mul(par[3], u), mul(par[4], v)), par[5]);
        uy = add(add(mul(par[6], u), mul(par[7], v)), par[8]);
        uz = add(add(mul(par[9], u), mul(par[10], v)), par[11]);
        const double n = __dsqrt_rn(add(add(mul(ux, ux), mul(uy, uy)), mul(uz, uz)));
        ux = __ddiv_rn(ux, n); uy = __ddiv_rn(uy, n); uz = __ddiv_rn(uz, n);
    }
    px = mul(sub(ox, g[2]), g[5]);
    py = mul(sub(oy, g[3]), g[6]);
    pz = mul(sub(oz, g[4]), g[7]);
    dx = mul(ux, g[5]);
    dy = mul(uy, g[6]);
    dz = mul(uz, g[7]);
}

// Clip the ray to the slab [0, n) of one axis; false if it misses (parallel to it and outside).
__device__ __forceinline__ bool clip_axis(double p, double d, int n, double& t_in, double& t_out)
{
    if (d == 0.0) return 0.0 <= p && p < (double)n;
    const double t0 = __ddiv_rn(-p, d);
    const double t1 = __ddiv_rn(sub((double)n, p), d);
    t_in = fmax(t_in, fmin(t0, t1));
    t_out = fmin(t_out, fmax(t0, t1));
    return true;
}

// The structured cone-beam kernels (Thompson and Lionheart (2014)): every
// detector row of a column shares the column's xy line (circular scans
// without detector tilt; raytrace.py's structured_ratio checks). Written with
// explicitly rounded operations so that the forward kernels and the
// voxel-driven transpose compute bit-identical set-ups and weights.

// The xy line of detector column u of one view, in index units: a point
// (px, py, pz) (the source) and the change (ax, ay) of (x, y) per unit of
// horizontal length tau; [t_in, t_out): the part inside the grid's xy box
// (tau >= 0: cone rays start at the source).
struct ColumnLine {
    double px, py, pz, ax, ay, t_in, t_out;
    double qxy2, inv_qxy;   // |xy part|^2 of M^-1 (u, 0, 1) and its inverse length
    bool hit;
};
__device__ __forceinline__ ColumnLine column_line(const double* par, const double* g, double u, int nx, int ny)
{
    ColumnLine c;
    // M^-1 (u, 0, 1): the launcher checked that M^-1's v column has no xy part.
    const double qx = add(mul(par[3], u), par[5]);
    const double qy = add(mul(par[6], u), par[8]);
    c.qxy2 = add(mul(qx, qx), mul(qy, qy));
    c.inv_qxy = __ddiv_rn(1.0, __dsqrt_rn(c.qxy2));
    c.ax = mul(mul(qx, c.inv_qxy), g[5]);
    c.ay = mul(mul(qy, c.inv_qxy), g[6]);
    c.px = mul(sub(par[0], g[2]), g[5]);
    c.py = mul(sub(par[1], g[3]), g[6]);
    c.pz = mul(sub(par[2], g[4]), g[7]);
    c.t_in = 0.0;
    c.t_out = d_inf();
    c.hit = clip_axis(c.px, c.ax, nx, c.t_in, c.t_out) && clip_axis(c.py, c.ay, ny, c.t_in, c.t_out)
            && c.t_in < c.t_out;
    return c;
}

// One detector row of the column: z slope mz (z index per unit tau), its
// inverse, 3D length L per unit tau, the tau range [zlo, zhi] inside the
// grid's z slab. The row's xy direction is the column's (the structured
// path's assumption), so only the z component is per row: one division and
// one square root.
struct RowLine {
    double mz, inv_mz, L, zlo, zhi;
    int step;
};

__device__ __forceinline__ RowLine row_line(const ColumnLine& c, const double* par, const double* g, double u,
                                            double v, int nz)
{
    RowLine r;
    const double rz = add(add(mul(par[9], u), mul(par[10], v)), par[11]);
    r.L = mul(__dsqrt_rn(add(c.qxy2, mul(rz, rz))), c.inv_qxy);
    r.mz = mul(mul(rz, c.inv_qxy), g[7]);
    const double inf = d_inf(), pz = c.pz;
    r.inv_mz = r.mz == 0.0 ? inf : __ddiv_rn(1.0, r.mz);
    if (r.mz > 0.0) { r.zlo = mul(-pz, r.inv_mz); r.zhi = mul(sub((double)nz, pz), r.inv_mz); }
    else if (r.mz < 0.0) { r.zlo = mul(sub((double)nz, pz), r.inv_mz); r.zhi = mul(-pz, r.inv_mz); }
    else if (0.0 <= pz && pz < (double)nz) { r.zlo = -inf; r.zhi = inf; }
    else { r.zlo = inf; r.zhi = -inf; }
    r.step = r.mz >= 0.0 ? 1 : -1;
    return r;
}

// (column, view) of a block when blocks run in groups of view_group views per
// column (linear block order: a group's views for one column, then the next
// column): the group's rays, which cross nearly the same voxels, meet in L2
// instead of each view streaming the volume from DRAM. False past the last view.
__device__ __forceinline__ bool grouped_block(int view_group, int n_views, int& col, int& view)
{
    col = blockIdx.x / view_group;
    view = blockIdx.y * view_group + (int)(blockIdx.x - col * view_group);
    return view < n_views;
}

// Entry points of the view-grouped float32 structured kernels (grouped_block).
#define GROUPED_KERNEL(NAME, FN, ADJ)                                                                    \
    extern "C" __global__ void NAME(float* vol, float* proj, int nx, int ny, int nz,                    \
                                    const double* __restrict__ params, const double* __restrict__ g,     \
                                    int n_views, int n_rows, int n_cols, int view_group)                \
    {                                                                                                   \
        FN<ADJ>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, view_group);                 \
    }

// z length of structured Joseph's zero-bordered volume volP (ny + 2, nx + 2,
// joseph_padded_nz): pad zero slices below the volume and at least pad above,
// rounded up to a multiple of 8 floats (32 bytes, one L2 sector), so that
// z = 0 of every column lies at the same place in a sector and the band
// transpose's lanes can add into whole sectors (raytrace.py: joseph_padded_nz).
__device__ __forceinline__ int joseph_padded_nz(int nz, int pad) { return (nz + 2 * pad + 7) & ~7; }

// a b + c clamped to [0, 1] in one instruction (the voxel transpose's and the
// band transpose's row weights: a weight never exceeds its scale s <= 1, so
// this is max(0, a b + c), to a rounding of s + zw (1 + d)).
__device__ __forceinline__ float fma_sat(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    float r;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
#else
    return fminf(1.0f, fmaxf(0.0f, fmaf(a, b, c)));
#endif
}

// What structured Joseph computes per column, per plane and per row, in
// float64 then rounded once: its forward, its atomic transpose and the voxel
// transpose (raytrace_voxel.cu) all call these, so every weight is the same float.
struct JosephColumn {
    ColumnLine c;
    bool my;                 // the dominant xy axis is y (planes y = const)
    int nm, nu;              // planes along the dominant axis, in-plane voxels
    double am, au, pm, pu;   // index change per unit tau and source position (voxel-centre units)
    double pzc, tau_c;       // source z (voxel-centre units), tau of the centre plane
};

__device__ __forceinline__ JosephColumn joseph_column(const double* par, const double* g, double u, int nx, int ny)
{
    JosephColumn j;
    j.c = column_line(par, g, u, nx, ny);   // ax, ay: index per unit tau
    // Dominant xy axis, as joseph() decides it per ray (the ratio check rules out z).
    j.my = fabs(j.c.ay) > fabs(j.c.ax);
    j.nm = j.my ? ny : nx;
    j.nu = j.my ? nx : ny;
    j.am = j.my ? j.c.ay : j.c.ax;
    j.au = j.my ? j.c.ax : j.c.ay;
    j.pm = sub(j.my ? j.c.py : j.c.px, 0.5);
    j.pu = sub(j.my ? j.c.px : j.c.py, 0.5);
    j.pzc = sub(j.c.pz, 0.5);
    j.tau_c = __ddiv_rn(sub((double)(j.nm / 2), j.pm), j.am);
    return j;
}

// Plane sp of the column: tau relative to the centre plane, the in-plane
// fraction a (weights 1 - a, a) and integer part iu; ok is false where the
// column does not sample the plane (behind the source, or fu outside (-1, nu)).
__device__ __forceinline__ void joseph_plane(const JosephColumn& j, int sp, float& dtau, float& a, int& iu, bool& ok)
{
    const double tau = __ddiv_rn(sub((double)sp, j.pm), j.am);
    const double fu = add(j.pu, mul(tau, j.au));
    ok = tau >= 0.0 && -1.0 < fu && fu < (double)j.nu;   // cone rays start at the source
    const double fl = floor(fu);
    a = ok ? (float)sub(fu, fl) : 0.0f;
    iu = ok ? (int)fl : -1;
    dtau = (float)sub(tau, j.tau_c);
}

// Row v of the column: z index iz + fr + dtau mz at a plane with relative tau
// dtau (fr in [0, 1): float32 holds no large coordinate), and mz itself in
// float64 (the row's z slope per unit tau, as row_line has it).
__device__ __forceinline__ double joseph_row(const JosephColumn& j, const double* par, const double* g, double u,
                                             double v, float& fr, float& mz, int& iz)
{
    const double rz = add(add(mul(par[9], u), mul(par[10], v)), par[11]);
    const double mzd = mul(mul(rz, j.c.inv_qxy), g[7]);
    const double zc = add(j.pzc, mul(j.tau_c, mzd));
    const double izd = floor(fmin(fmax(zc, -1.0e9), 1.0e9));
    fr = (float)sub(zc, izd);
    mz = (float)mzd;
    iz = (int)izd;
    return mzd;
}

// The plane-to-plane 3D length of row v: w = L / |a_m| (row_line's L).
__device__ __forceinline__ float joseph_step(const JosephColumn& j, const double* par, const double* g, double u,
                                             double v, int nz)
{
    return (float)__ddiv_rn(row_line(j.c, par, g, u, v, nz).L, fabs(j.am));
}
