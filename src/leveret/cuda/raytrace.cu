// Ray-driven projection (Siddon, Joseph) and its exact transpose on the GPU.
//
// Two paths, both the same line-integral model as leveret/cpu/raytrace.py:
//
// 1. General (every geometry): one thread per ray, ray index
//    r = (view * n_rows + row) * n_cols + col (projection order, adjacent
//    threads = adjacent detector columns). The ray is rebuilt on the GPU from
//    per-view parameters with the same float64 operations, in the same order,
//    as the NumPy code that builds the CPU's ray tables (every product and sum
//    rounded as written: __dmul_rn / __dadd_rn keep the compiler from fusing
//    them into FMAs), and traced with a transcription of the CPU's float64
//    traversal. Forward sums in float64 like the CPU; the transpose adds
//    w * y into the volume with atomicAdd, so <Ax, y> = <x, A^T y> holds to
//    rounding.
//
// 2. Structured cone Siddon (paper 003, Thompson & Lionheart): one block per
//    (view, detector column). All rows of a column share the xy-path of their
//    rays (true when the detector's v axis back-projects to a direction with
//    no xy component, i.e. circular scans without detector tilt; the launcher
//    checks). The block builds the sorted xy crossing parameters once, in
//    parallel (the x-face and y-face crossings are two sorted lists; each
//    element finds its place in the merged list by binary search in the
//    other list), then each thread follows one detector row along that path.
//    When no xy step is longer than one voxel in z (|dz/dxy| small enough:
//    the launcher checks this over the whole geometry) each xy step touches
//    at most two z voxels, so the inner loop has no data-dependent branches.
//    This path reads/writes a z-fastest copy of the volume, (ny, nx, nz), so
//    adjacent threads (rows) touch adjacent z voxels: coalesced. Its
//    transpose runs either ray-driven with atomicAdd or voxel-driven
//    (structured_gather below: no atomics, the forward's weights bit for bit).
//    The float32 kernels run in view groups (grouped_block) and the forward
//    keeps 8 segments' loads in flight. Structured Joseph (structured_joseph)
//    is the same idea for Joseph's planes, with two gathers: joseph_gather
//    (tables of the forward's float32 terms) and joseph_voxel_gather (the
//    default transpose: the same weights evaluated per voxel, a warp per
//    voxel column, lanes along z).
//
// tests/cuda/test_raytrace_host.py builds this file for the CPU (g++) and
// checks every kernel against the Numba operators.
//
// Parameters per view (12 float64):
//   parallel: cos t, sin t, centre (pixels, axis_shift included), 0...
//   cone:     source x, y, z, then M^-1 (3x3, row major) with M = P[:, :3],
//             so the direction through pixel (u, v) is M^-1 (u, v, 1), normalised.
// g (8 float64): det_spacing, row_spacing, offset x, y, z (world low corner of
//   the grid), scale x, y, z (1 / voxel size).

#define KIND_PARALLEL 0
#define KIND_CONE 1

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

// Entry voxel and next-crossing parameter of one axis (CPU: the set-up loop of _siddon).
__device__ __forceinline__ void siddon_axis(double p, double d, int n, double t_in,
                                            int& idx, int& step, double& t_next, double& dt)
{
    const double pos = add(p, mul(t_in, d));
    int i;
    if (d > 0.0) { i = (int)floor(pos); step = 1; }
    else if (d < 0.0) { i = (int)ceil(pos) - 1; step = -1; }
    else { i = (int)floor(pos); step = 0; }
    i = min(max(i, 0), n - 1);
    idx = i;
    if (d > 0.0) { t_next = __ddiv_rn(sub((double)(i + 1), p), d); dt = __ddiv_rn(1.0, d); }
    else if (d < 0.0) { t_next = __ddiv_rn(sub((double)i, p), d); dt = __ddiv_rn(-1.0, d); }
    else { t_next = d_inf(); dt = d_inf(); }
}

// Siddon/Jacobs along one ray: the line integral (forward) or w * value added
// into vol (ADJ). vol is (nz, ny, nx), x fastest.
template <typename T, bool ADJ>
__device__ double siddon(T* vol, int nx, int ny, int nz, double px, double py, double pz,
                         double dx, double dy, double dz, double t_start, double value)
{
    double t_in = t_start, t_out = d_inf();
    if (!clip_axis(px, dx, nx, t_in, t_out)) return 0.0;
    if (!clip_axis(py, dy, ny, t_in, t_out)) return 0.0;
    if (!clip_axis(pz, dz, nz, t_in, t_out)) return 0.0;
    if (!(t_in < t_out)) return 0.0;
    int ix, iy, iz, sx, sy, sz;
    double tx, ty, tz, dtx, dty, dtz;
    siddon_axis(px, dx, nx, t_in, ix, sx, tx, dtx);
    siddon_axis(py, dy, ny, t_in, iy, sy, ty, dty);
    siddon_axis(pz, dz, nz, t_in, iz, sz, tz, dtz);
    double acc = 0.0, t = t_in;
    while (t < t_out) {
        // Smallest next crossing; ties go to the lower axis, as on the CPU.
        int a = 0;
        double tn = tx;
        if (ty < tn) { a = 1; tn = ty; }
        if (tz < tn) { a = 2; tn = tz; }
        tn = fmin(tn, t_out);
        const double w = sub(tn, t);
        if (w > 0.0) {
            const long long v = ((long long)iz * ny + iy) * nx + ix;
            if (ADJ) atomicAdd(vol + v, (T)(w * value));
            else acc += w * (double)vol[v];
        }
        t = tn;
        if (a == 0) { ix += sx; if (ix < 0 || ix >= nx) break; tx = add(tx, dtx); }
        else if (a == 1) { iy += sy; if (iy < 0 || iy >= ny) break; ty = add(ty, dty); }
        else { iz += sz; if (iz < 0 || iz >= nz) break; tz = add(tz, dtz); }
    }
    return acc;
}

// Joseph's axes for one ray: the dominant axis m (planes m = const) and the
// other two, u < v (CPU: u = 1 if m == 0 else 0, v = 3 - m - u), with their
// positions, directions, sizes and element strides in vol (nz, ny, nx).
__device__ __forceinline__ void joseph_axes(int nx, int ny, int nz, double px, double py, double pz, double dx,
                                            double dy, double dz, double& pm, double& dm, double& pu, double& du,
                                            double& pv, double& dv, int& nm, int& nu, int& nv, long long& sm,
                                            long long& su, long long& sv)
{
    int m = 0;
    if (fabs(dy) > fabs(dx)) m = 1;
    if (fabs(dz) > fabs(m == 0 ? dx : dy)) m = 2;
    const long long sxy = (long long)nx * ny;
    if (m == 0) { pm = px; dm = dx; nm = nx; sm = 1;
                  pu = py; du = dy; nu = ny; su = nx;  pv = pz; dv = dz; nv = nz; sv = sxy; }
    else if (m == 1) { pm = py; dm = dy; nm = ny; sm = nx;
                       pu = px; du = dx; nu = nx; su = 1;  pv = pz; dv = dz; nv = nz; sv = sxy; }
    else { pm = pz; dm = dz; nm = nz; sm = sxy;
           pu = px; du = dx; nu = nx; su = 1;  pv = py; dv = dy; nv = ny; sv = nx; }
}

// Joseph along one ray (CPU: _joseph); p in voxel-centre units (voxel i centred at i).
template <typename T, bool ADJ>
__device__ double joseph(T* vol, int nx, int ny, int nz, double px, double py, double pz,
                         double dx, double dy, double dz, double t_start, double value)
{
    double pm, dm, pu, du, pv, dv;
    int nm, nu, nv;
    long long sm, su, sv;  // element strides in vol
    joseph_axes(nx, ny, nz, px, py, pz, dx, dy, dz, pm, dm, pu, du, pv, dv, nm, nu, nv, sm, su, sv);
    const double w = __ddiv_rn(1.0, fabs(dm));
    double acc = 0.0;
    for (int s = 0; s < nm; ++s) {
        const double t = __ddiv_rn(sub((double)s, pm), dm);
        if (t < t_start) continue;
        const double fu = add(pu, mul(t, du));
        const double fv = add(pv, mul(t, dv));
        if (!(-1.0 < fu && fu < (double)nu) || !(-1.0 < fv && fv < (double)nv)) continue;
        const int iu = (int)floor(fu), iv = (int)floor(fv);
        const double au = sub(fu, (double)iu), av = sub(fv, (double)iv);
#pragma unroll
        for (int cu = 0; cu < 2; ++cu) {
            const int ju = iu + cu;
            if (ju < 0 || ju >= nu) continue;
            const double wu = cu ? au : sub(1.0, au);
#pragma unroll
            for (int cv = 0; cv < 2; ++cv) {
                const int jv = iv + cv;
                if (jv < 0 || jv >= nv) continue;
                const double wuv = mul(mul(wu, cv ? av : sub(1.0, av)), w);
                if (wuv == 0.0) continue;
                const long long k = s * sm + ju * su + jv * sv;
                if (ADJ) atomicAdd(vol + k, (T)(wuv * value));
                else acc += wuv * (double)vol[k];
            }
        }
    }
    return acc;
}

// Joseph in float32 (precision="float32"): the ray (make_ray), its dominant
// axis, plane range, slopes and a centre sample are float64, once per ray;
// the planes are then marched in float32 relative to the centre plane s_c:
// u index = iu_c + fr_u + (s - s_c) su with iu_c an integer and fr_u in
// [0, 1) (same for v), so no float32 number holds a large coordinate.
// Rounding (u = 2^-24): fr_u within u/2, su within u/2 relative, the product
// and the sum one rounding each: every sample's u (and v) index is within
// eps = u (1 + 2 |s - s_c| |su|) <= u (1 + n_m) voxels of the float64 one,
// the bilinear weights within 2 eps + 3 u of theirs. Per ray
// |p32 - p64| <= w n_m (4 (eps_u + eps_v) + 12 u) max|f| + 16 u |p|,
// with w the plane-to-plane length (<= sqrt(3) times the voxel size along the
// dominant axis) and 16 u the float32 partial sums (8 planes, then float64);
// raytrace.py's joseph_float32_bound evaluates it. A sample within rounding
// of the grid's edge (u index near -1 or n_u) may be kept or dropped
// differently from float64: its weight there is itself of that order.
template <bool ADJ>
__device__ double joseph_fast(float* vol, int nx, int ny, int nz, double px, double py, double pz,
                              double dx, double dy, double dz, bool half_line, float value)
{
    double pm, dm, pu, du, pv, dv;
    int nm, nu, nv;
    long long sm, su_, sv_;
    joseph_axes(nx, ny, nz, px, py, pz, dx, dy, dz, pm, dm, pu, du, pv, dv, nm, nu, nv, sm, su_, sv_);
    const float w = (float)__ddiv_rn(1.0, fabs(dm));
    // Planes s with t = (s - pm) / dm >= 0 (cone rays start at the source):
    // s >= pm when dm > 0, s <= pm when dm < 0 (exact for integer s).
    double lo = 0.0, hi = (double)(nm - 1);
    const double pmc = fmin(fmax(pm, -2.0), (double)nm + 1.0);
    if (half_line) {
        if (dm > 0.0) lo = fmax(lo, ceil(pmc)); else hi = fmin(hi, floor(pmc));
    }
    // Planes where the u, v indices can lie in (-1, n) (padded by one plane;
    // the float32 test below decides).
    const double su = du / dm, sv = dv / dm;
    if (su != 0.0) {
        const double a = pm + (-1.0 - pu) / su, b = pm + ((double)nu - pu) / su;
        lo = fmax(lo, floor(fmin(a, b)) - 1.0);
        hi = fmin(hi, ceil(fmax(a, b)) + 1.0);
    } else if (!(-1.0 < pu && pu < (double)nu)) return 0.0;
    if (sv != 0.0) {
        const double a = pm + (-1.0 - pv) / sv, b = pm + ((double)nv - pv) / sv;
        lo = fmax(lo, floor(fmin(a, b)) - 1.0);
        hi = fmin(hi, ceil(fmax(a, b)) + 1.0);
    } else if (!(-1.0 < pv && pv < (double)nv)) return 0.0;
    if (!(lo <= hi)) return 0.0;
    const int s0 = (int)lo, s1 = (int)hi, sc = (s0 + s1) / 2;
    const double fu_c = pu + ((double)sc - pm) * su, fv_c = pv + ((double)sc - pm) * sv;
    const double iu_d = floor(fu_c), iv_d = floor(fv_c);
    const int iu_c = (int)iu_d, iv_c = (int)iv_d;   // |fu_c| <= n + 2 |su| (nm + 2): ints
    const float fr_u = (float)(fu_c - iu_d), fr_v = (float)(fv_c - iv_d);
    const float su_f = (float)su, sv_f = (float)sv;
    const float lo_u = (float)(-1 - iu_c), hi_u = (float)(nu - iu_c);
    const float lo_v = (float)(-1 - iv_c), hi_v = (float)(nv - iv_c);
    double acc = 0.0;
    float part = 0.0f;   // float32 partial sums of 8 planes, then float64
    for (int s = s0; s <= s1; ++s) {
        const float ds = (float)(s - sc);
        const float fu = fr_u + ds * su_f, fv = fr_v + ds * sv_f;
        if (lo_u < fu && fu < hi_u && lo_v < fv && fv < hi_v) {
            const float flu = floorf(fu), flv = floorf(fv);
            const int iu = iu_c + (int)flu, iv = iv_c + (int)flv;
            const float au = fu - flu, av = fv - flv;
#pragma unroll
            for (int cu = 0; cu < 2; ++cu) {
                const int ju = iu + cu;
                if (ju < 0 || ju >= nu) continue;
                const float wu = (cu ? au : 1.0f - au) * w;
#pragma unroll
                for (int cv = 0; cv < 2; ++cv) {
                    const int jv = iv + cv;
                    if (jv < 0 || jv >= nv) continue;
                    const float wuv = wu * (cv ? av : 1.0f - av);
                    if (wuv == 0.0f) continue;
                    const long long k = s * sm + ju * su_ + jv * sv_;
                    if (ADJ) atomicAdd(vol + k, wuv * value);
                    else part += wuv * vol[k];
                }
            }
        }
        if (!ADJ && ((s - s0) & 7) == 7) { acc += (double)part; part = 0.0f; }
    }
    return acc + (double)part;
}

// The general path's ray of this thread: r = (view * n_rows + row) * n_cols + col
// (projection order, adjacent threads = adjacent columns); false past the last ray.
__device__ __forceinline__ bool general_ray(int n_views, int n_rows, int n_cols, long long& r, int& view, int& row,
                                            int& col)
{
    r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per_view = (long long)n_rows * n_cols;
    if (r >= per_view * n_views) return false;
    view = (int)(r / per_view);
    const int rem = (int)(r - (long long)view * per_view);
    row = rem / n_cols;
    col = rem - row * n_cols;
    return true;
}

template <bool ADJ>
__device__ void joseph_general_fast(float* vol, float* proj, int nx, int ny, int nz, const double* __restrict__ params,
                                    const double* __restrict__ g, int n_views, int n_rows, int n_cols, int kind,
                                    int is2d)
{
    long long r;
    int view, row, col;
    if (!general_ray(n_views, n_rows, n_cols, r, view, row, col)) return;
    float value = 0.0f;
    if (ADJ) {
        value = proj[r];
        if (value == 0.0f) return;
    }
    double px, py, pz, dx, dy, dz;
    make_ray(kind, params + 12 * view, g, row, col, n_rows, is2d, px, py, pz, dx, dy, dz);
    const double acc = joseph_fast<ADJ>(vol, nx, ny, nz, sub(px, 0.5), sub(py, 0.5), sub(pz, 0.5), dx, dy, dz,
                                        kind != KIND_PARALLEL, value);
    if (!ADJ) proj[r] = (float)acc;
}

extern "C" __global__ void joseph_forward_fast(float* vol, float* proj, int nx, int ny, int nz,
                                               const double* __restrict__ params, const double* __restrict__ g,
                                               int n_views, int n_rows, int n_cols, int kind, int is2d)
{
    joseph_general_fast<false>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d);
}

extern "C" __global__ void joseph_adjoint_fast(float* vol, float* proj, int nx, int ny, int nz,
                                               const double* __restrict__ params, const double* __restrict__ g,
                                               int n_views, int n_rows, int n_cols, int kind, int is2d)
{
    joseph_general_fast<true>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d);
}

template <typename T, bool ADJ, bool JOSEPH>
__device__ void general(T* vol, T* proj, int nx, int ny, int nz, const double* __restrict__ params,
                        const double* __restrict__ g, int n_views, int n_rows, int n_cols, int kind,
                        int is2d)
{
    long long r;
    int view, row, col;
    if (!general_ray(n_views, n_rows, n_cols, r, view, row, col)) return;
    double value = 0.0;
    if (ADJ) {
        value = (double)proj[r];
        if (value == 0.0) return;   // as the CPU: nothing to add
    }
    double px, py, pz, dx, dy, dz;
    make_ray(kind, params + 12 * view, g, row, col, n_rows, is2d, px, py, pz, dx, dy, dz);
    const double t_start = kind == KIND_PARALLEL ? -d_inf() : 0.0;
    double acc;
    if (JOSEPH)
        acc = joseph<T, ADJ>(vol, nx, ny, nz, sub(px, 0.5), sub(py, 0.5), sub(pz, 0.5), dx, dy, dz, t_start, value);
    else
        acc = siddon<T, ADJ>(vol, nx, ny, nz, px, py, pz, dx, dy, dz, t_start, value);
    if (!ADJ) proj[r] = (T)acc;
}

#define GENERAL_KERNEL(NAME, T, ADJ, JOSEPH)                                                       \
    extern "C" __global__ void NAME(T* vol, T* proj, int nx, int ny, int nz,                       \
                                    const double* __restrict__ params, const double* __restrict__ g, \
                                    int n_views, int n_rows, int n_cols, int kind, int is2d)        \
    {                                                                                              \
        general<T, ADJ, JOSEPH>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, kind, is2d); \
    }

GENERAL_KERNEL(siddon_forward_f32, float, false, false)
GENERAL_KERNEL(siddon_adjoint_f32, float, true, false)
GENERAL_KERNEL(joseph_forward_f32, float, false, true)
GENERAL_KERNEL(joseph_adjoint_f32, float, true, true)
GENERAL_KERNEL(siddon_forward_f64, double, false, false)
GENERAL_KERNEL(siddon_adjoint_f64, double, true, false)
GENERAL_KERNEL(joseph_forward_f64, double, false, true)
GENERAL_KERNEL(joseph_adjoint_f64, double, true, true)

// ---------------------------------------------------------------------------------------
// Structured cone Siddon (paper 003). Block: one (view, column); threads: detector rows.
// Dynamic shared memory: X (nx+1) and Y (ny+1) crossing parameters, the merged list
// B (nx+ny+2) as float64, and the xy voxel (j * nx + i) of each of the nx+ny+1 segments.
//
// Along the column's xy line, tau is the horizontal (xy) world length from the
// source; x_idx(tau) = px + tau * ax, y_idx(tau) = py + tau * ay. For row r the
// z index is z_idx(tau) = pz + tau * mz_r and the 3D length per unit tau is L_r.

// Number of elements of the ascending list a[0..n) that are < x (STRICT) or <= x.
template <bool STRICT>
__device__ __forceinline__ int rank_in(const double* a, int n, double x)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        const bool before = STRICT ? (a[mid] < x) : (a[mid] <= x);
        if (before) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// What the structured kernels share, written with explicitly rounded operations
// (no FMA contraction) so that the ray-driven kernels and the voxel-driven
// gather compute bit-identical crossing parameters and weights.

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

// tau of the line's crossing with face F (0..n) of one axis, clamped to [t_in, t_out].
__device__ __forceinline__ double face_tau(int F, double p, double a, double t_in, double t_out)
{
    const double t = a == 0.0 ? (((double)F <= p) ? t_in : t_out) : __ddiv_rn(sub((double)F, p), a);
    return fmin(fmax(t, t_in), t_out);
}

// The xy cell of the segment [ta, tb] (by its midpoint), clamped into the grid.
__device__ __forceinline__ int segment_cell(const ColumnLine& c, double ta, double tb, int nx, int ny)
{
    const double mid = mul(0.5, add(ta, tb));
    const int i = min(max((int)floor(add(c.px, mul(mid, c.ax))), 0), nx - 1);
    const int j = min(max((int)floor(add(c.py, mul(mid, c.ay))), 0), ny - 1);
    return j * nx + i;
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

// The (at most) two z voxels of xy segment [B0, B1] for one row and their
// lengths: l1 in kz, l2 in kz2 (paper 003: with |dz| per xy step below one
// voxel, no third voxel; zero lengths outside the grid, indices clamped).
__device__ __forceinline__ void z_split(const RowLine& r, double pz, double B0, double B1, int nz,
                                        int& kz, int& kz2, double& l1, double& l2)
{
    const double ta = fmax(B0, r.zlo);
    const double tb = fmax(fmin(B1, r.zhi), ta);
    const double za = add(pz, mul(ta, r.mz));
    int k = r.mz >= 0.0 ? (int)floor(za) : (int)ceil(za) - 1;
    k = min(max(k, 0), nz - 1);
    // The z face this step may cross, clamped into the step.
    const double tf = r.mz == 0.0 ? d_inf() : mul(sub((double)(k + (r.step > 0)), pz), r.inv_mz);
    const double tm = fmin(fmax(tf, ta), tb);
    l1 = mul(sub(tm, ta), r.L);
    l2 = mul(sub(tb, tm), r.L);
    kz = k;
    kz2 = min(max(k + r.step, 0), nz - 1);
}

// Ray-driven structured kernel (forward, or transpose with atomics).
// A block's xy path of its column (all threads): the x- and y-face crossings
// X (nx + 1) and Y (ny + 1) clamped to [t_in, t_out] in ascending order
// (faces walked backwards when the ray runs towards lower indices), merged
// stably into B (X before equal Y; nx + ny + 2 entries), and the xy cell of
// each of the nx + ny + 1 segments. Ends without a barrier after cell[].
__device__ __forceinline__ void column_segments(const ColumnLine& c, int nx, int ny, double* X, double* Y, double* B,
                                                int* cell)
{
    for (int f = threadIdx.x; f <= nx; f += blockDim.x)
        X[f] = face_tau(c.ax >= 0.0 ? f : nx - f, c.px, c.ax, c.t_in, c.t_out);
    for (int f = threadIdx.x; f <= ny; f += blockDim.x)
        Y[f] = face_tau(c.ay >= 0.0 ? f : ny - f, c.py, c.ay, c.t_in, c.t_out);
    __syncthreads();
    for (int f = threadIdx.x; f <= nx; f += blockDim.x) B[f + rank_in<true>(Y, ny + 1, X[f])] = X[f];
    for (int f = threadIdx.x; f <= ny; f += blockDim.x) B[f + rank_in<false>(X, nx + 1, Y[f])] = Y[f];
    __syncthreads();
    for (int k = threadIdx.x; k < nx + ny + 1; k += blockDim.x) cell[k] = segment_cell(c, B[k], B[k + 1], nx, ny);
}

template <typename T, bool ADJ>
__device__ void structured(T* volT, T* proj, int nx, int ny, int nz, const double* __restrict__ params,
                           const double* __restrict__ g, int n_rows, int n_cols)
{
    extern __shared__ double smem[];
    double* X = smem;                 // nx + 1
    double* Y = X + (nx + 1);         // ny + 1
    double* B = Y + (ny + 1);         // nx + ny + 2
    int* cell = (int*)(B + (nx + ny + 2));  // nx + ny + 1
    const int col = blockIdx.x, view = blockIdx.y;
    const double* par = params + 12 * view;
    const double u = (double)col;
    const ColumnLine c = column_line(par, g, u, nx, ny);
    const long long out0 = (long long)view * n_rows * n_cols + col;
    if (!c.hit) {   // uniform over the block
        if (!ADJ)
            for (int row = threadIdx.x; row < n_rows; row += blockDim.x) proj[out0 + (long long)row * n_cols] = (T)0;
        return;
    }
    column_segments(c, nx, ny, X, Y, B, cell);
    const int n_seg = nx + ny + 1;
    __syncthreads();
    for (int row = threadIdx.x; row < n_rows; row += blockDim.x) {
        const RowLine r = row_line(c, par, g, u, (double)row, nz);
        const double value = ADJ ? (double)proj[out0 + (long long)row * n_cols] : 0.0;
        double acc = 0.0;
        if (!ADJ || value != 0.0) {
            // Only the segments that overlap this row's part of the ray inside
            // the grid, (max(t_in, zlo), min(t_out, zhi)); the others have
            // zero weight (ta == tb in z_split), so skipping them changes
            // nothing. B is sorted: two binary searches give the range.
            // Adjacent rows get nearly the same range: the warp stays together.
            const int k0 = max(rank_in<false>(B, n_seg + 1, fmax(B[0], r.zlo)) - 1, 0);
            const int k1 = rank_in<true>(B, n_seg + 1, fmin(B[n_seg], r.zhi));
            for (int k = k0; k < k1; ++k) {
                int kz, kz2;
                double l1, l2;
                z_split(r, c.pz, B[k], B[k + 1], nz, kz, kz2, l1, l2);
                const long long base = (long long)cell[k] * nz;
                if (ADJ) {
                    if (l1 > 0.0) atomicAdd(volT + base + kz, (T)(l1 * value));
                    if (l2 > 0.0) atomicAdd(volT + base + kz2, (T)(l2 * value));
                } else {
                    acc += l1 * (double)volT[base + kz] + l2 * (double)volT[base + kz2];
                }
            }
        }
        if (!ADJ) proj[out0 + (long long)row * n_cols] = (T)acc;
    }
}

// Float32 traversal of the structured path (precision="float32"). Everything
// per block (the column's xy line, the face crossings, their merge and the
// cells) and per row (slope, length factor, z range, found by the same float64
// code as above) is float64; only the per-segment march is float32, in
// coordinates relative to the midpoint t_m of the column's chord through the
// grid's xy box [t_in, t_out] (tau) and to its entry point (z):
//   tau' = tau - t_m in [-T/2, T/2]   (T = t_out - t_in, world length),
//   z index = zi0 + z',  zi0 = the integer nearest to z at t_in,
//   z' = z0f + (tau' - t0') mz with t0' = t_in - t_m (rounded once)
//   (z0f in [-1/2, 1/2] is rounded relative to its own size, and z at t_in is
//   the float64 z_split's own first value, so a row that runs along a z face
//   stays on the side where the float64 march puts it).
// Rounding error (u = 2^-24), per row:
//   - every merged crossing B'[k] is within u T / 4 of its float64 value;
//   - z' is within u (1/2 + 2 T |mz|) of the float64 z (a vertical shift of
//     the row's ray by that much: z0f, t0' and mz rounded once each);
//   - a z face crossing tau' = (face - zi0 - z0f) / mz is within 1.5 u T of
//     the crossing of that shifted ray (two roundings and the rounded 1 / mz);
//   - lengths (tb - ta) L: the subtraction of nearby floats is exact, times L
//     one rounding.
// So the float32 weights are the exact weights of a ray displaced by at most
// eps_z = u (1/2 + 2 T |mz|) z voxels, with every boundary moved by at most
// eps_t = 2 u T along tau: each boundary moves at most eps_t L of length
// between its two voxels, and |p32 - p64| <= 2 eps_t L N_b max|f| + (vertical
// shift) + 16 u |p| (float32 partial sums of 16 segments, then float64), with
// N_b <= nx + ny + nz + 2 boundaries. The vertical shift matters only for a
// near-horizontal row whose ray runs within eps_z of a z face (as the float64
// path's own rounding does at 2^-53); tests/cuda/test_raytrace_host.py checks
// the bound on the host build and tests/operators/test_projector_cuda.py on
// the GPU.
struct RowLineF {
    float mz, inv_mz, L, zlo, zhi, z0, t0;
    int zi0, step;
    bool flat;   // mz == 0: no z face crossing
};

// The origin of the float32 march: the midpoint of the column's chord.
__device__ __forceinline__ double march_origin(const ColumnLine& c) { return mul(0.5, add(c.t_in, c.t_out)); }

__device__ __forceinline__ RowLineF row_line_f(const ColumnLine& c, const RowLine& r)
{
    RowLineF f;
    const double t_m = march_origin(c);
    f.mz = (float)r.mz;
    f.inv_mz = (float)r.inv_mz;
    f.L = (float)r.L;
    f.zlo = (float)sub(r.zlo, t_m);   // +-inf stay infinite
    f.zhi = (float)sub(r.zhi, t_m);
    // z is measured from the entry t_in (as the float64 z_split's first
    // segment computes it), tau from the midpoint t_m.
    f.t0 = (float)sub(c.t_in, t_m);
    const double z_in = fmin(fmax(add(c.pz, mul(c.t_in, r.mz)), -1.0e9), 1.0e9);
    // The nearest integer, not the floor: z0f in [-1/2, 1/2] keeps its
    // relative precision near a z face (a row running along a face stays on
    // its side; a fraction just below 1 would round up to the face itself).
    const double zi = rint(z_in);
    f.zi0 = (int)zi;
    f.z0 = (float)sub(z_in, zi);
    f.step = r.step;
    f.flat = r.mz == 0.0;
    return f;
}

// z_split in float32 (tau' and z' relative to the column entry, as above).
__device__ __forceinline__ void z_split_f(const RowLineF& r, float B0, float B1, int nz, int& kz, int& kz2,
                                          float& l1, float& l2)
{
    const float ta = fmaxf(B0, r.zlo);
    const float tb = fmaxf(fminf(B1, r.zhi), ta);
    const float za = r.z0 + (ta - r.t0) * r.mz;
    int k = r.step > 0 ? (int)floorf(za) : (int)ceilf(za) - 1;
    k = min(max(k + r.zi0, 0), nz - 1);
    float tm = tb;
    if (!r.flat) {
        const float tf = r.t0 + ((float)(k + (r.step > 0) - r.zi0) - r.z0) * r.inv_mz;
        tm = fminf(fmaxf(tf, ta), tb);
    }
    l1 = (tm - ta) * r.L;
    l2 = (tb - tm) * r.L;
    kz = k;
    kz2 = min(max(k + r.step, 0), nz - 1);
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

// Ray-driven structured kernel, float32 volume and projections, float32 march.
template <bool ADJ>
__device__ void structured_fast(float* volT, float* proj, int nx, int ny, int nz, const double* __restrict__ params,
                                const double* __restrict__ g, int n_views, int n_rows, int n_cols, int view_group)
{
    extern __shared__ double smem[];
    double* X = smem;                 // nx + 1
    double* Y = X + (nx + 1);         // ny + 1
    double* B = Y + (ny + 1);         // nx + ny + 2
    int* cell = (int*)(B + (nx + ny + 2));  // nx + ny + 1
    float* Bf = (float*)(cell + (nx + ny + 1));  // nx + ny + 2: B - t_m in float32
    int col, view;
    if (!grouped_block(view_group, n_views, col, view)) return;
    const double* par = params + 12 * view;
    const double u = (double)col;
    const ColumnLine c = column_line(par, g, u, nx, ny);
    const long long out0 = (long long)view * n_rows * n_cols + col;
    if (!c.hit) {   // uniform over the block
        if (!ADJ)
            for (int row = threadIdx.x; row < n_rows; row += blockDim.x) proj[out0 + (long long)row * n_cols] = 0.0f;
        return;
    }
    column_segments(c, nx, ny, X, Y, B, cell);
    const int n_seg = nx + ny + 1;
    const double t_m = march_origin(c);
    for (int k = threadIdx.x; k <= n_seg; k += blockDim.x) Bf[k] = (float)sub(B[k], t_m);
    __syncthreads();
    for (int row = threadIdx.x; row < n_rows; row += blockDim.x) {
        const RowLine r = row_line(c, par, g, u, (double)row, nz);
        const float value = ADJ ? proj[out0 + (long long)row * n_cols] : 0.0f;
        double acc = 0.0;
        if (!ADJ || value != 0.0f) {
            const RowLineF rf = row_line_f(c, r);
            const int k0 = max(rank_in<false>(B, n_seg + 1, fmax(B[0], r.zlo)) - 1, 0);
            const int k1 = rank_in<true>(B, n_seg + 1, fmin(B[n_seg], r.zhi));
            if (ADJ) {
                for (int k = k0; k < k1; ++k) {
                    int kz, kz2;
                    float l1, l2;
                    z_split_f(rf, Bf[k], Bf[k + 1], nz, kz, kz2, l1, l2);
                    const long long base = (long long)cell[k] * nz;
                    if (l1 > 0.0f) atomicAdd(volT + base + kz, l1 * value);
                    if (l2 > 0.0f) atomicAdd(volT + base + kz2, l2 * value);
                }
                continue;
            }
            float part = 0.0f;   // float32 partial sums of 8 segments, then float64
            // Software-pipelined like structured_joseph's forward: the next 8
            // segments' 16 loads in flight while the current 8 are summed.
            float* const vz = volT;
            auto load8 = [&](int k8, float (&L)[4][8]) {
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    int kz, kz2;
                    z_split_f(rf, Bf[k8 + q], Bf[k8 + q + 1], nz, kz, kz2, L[2][q], L[3][q]);
                    const float* const base = vz + (long long)cell[k8 + q] * nz;
                    L[0][q] = base[kz];
                    L[1][q] = base[kz2];
                }
            };
            auto sum8 = [&](const float (&L)[4][8]) {
#pragma unroll
                for (int q = 0; q < 8; ++q) part += L[2][q] * L[0][q] + L[3][q] * L[1][q];
                acc += (double)part;
                part = 0.0f;
            };
            int k = k0;
            const int k_full = k0 + ((k1 - k0) & ~7);
            if (k_full > k0) {
                float SA[4][8], SB[4][8];
                load8(k, SA);
                while (true) {
                    load8(k + 8 < k_full ? k + 8 : k, SB);
                    sum8(SA);
                    k += 8;
                    if (k >= k_full) break;
                    load8(k + 8 < k_full ? k + 8 : k, SA);
                    sum8(SB);
                    k += 8;
                    if (k >= k_full) break;
                }
            }
            for (; k < k1; ++k) {
                int kz, kz2;
                float l1, l2;
                z_split_f(rf, Bf[k], Bf[k + 1], nz, kz, kz2, l1, l2);
                const long long base = (long long)cell[k] * nz;
                part += l1 * volT[base + kz] + l2 * volT[base + kz2];
            }
            acc += (double)part;
        }
        if (!ADJ) proj[out0 + (long long)row * n_cols] = (float)acc;
    }
}

// Entry points of the view-grouped float32 structured kernels (grouped_block).
#define GROUPED_KERNEL(NAME, FN, ADJ)                                                                    \
    extern "C" __global__ void NAME(float* vol, float* proj, int nx, int ny, int nz,                    \
                                    const double* __restrict__ params, const double* __restrict__ g,     \
                                    int n_views, int n_rows, int n_cols, int view_group)                \
    {                                                                                                   \
        FN<ADJ>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, view_group);                 \
    }

GROUPED_KERNEL(structured_siddon_forward_fast, structured_fast, false)
GROUPED_KERNEL(structured_siddon_adjoint_fast, structured_fast, true)

// Structured Joseph (float32), paper 003's structure applied to Joseph: for a
// circular scan without detector tilt the rays of one detector column share
// their xy line, and where no ray is steeper in z than along its dominant xy
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
// The volume is a padded z-fastest copy volP (ny + 2, nx + 2, nz + 2 JZ_PAD)
// with zero borders (one voxel in x and y, JZ_PAD in z): adjacent rows
// read/write adjacent z voxels, and no sample needs a bounds test. Planes
// that a column does not sample (behind the source, or the in-plane index
// outside (-1, n)) point at the zero border with weights (1, 0). A row's
// plane range is its z range in float64 padded by one plane; with at most
// one z voxel per plane (the ratio test) and float32 rounding, its samples
// stay within z (-2 - 1e-3, nz + 1 + 1e-3), so they and their upper
// neighbours fall in [-3, nz + 2]: JZ_PAD = 3. A zero border contributes
// exactly what the float64 model's range tests drop (nothing); in the
// transpose the border collects values nobody reads.
//
// One sample is a broadcast 16-byte shared load, four float32 operations for
// the z index and fraction, four global loads and six multiply-adds; the
// plane-to-plane length multiplies the ray sum once (forward) or the ray's
// value once (transpose), so both directions have the weights
// w * wu_c * wv_c with the same float32 factors: the transpose (atomicAdd)
// is exact. Blocks run in groups of `view_group` views per column
// (grouped_block).
#define JZ_PAD 3

struct JPlane {
    float dtau, wu0, wu1;
    int base;   // element offset in volP of (plane, in-plane index, z = 0)
};

// What structured Joseph computes per column, per plane and per row, in
// float64 then rounded once: the forward, its atomic transpose and the
// gather tables (below) all call these, so every weight is the same float.
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
    const bool my = jc.my;
    const int nm = jc.nm, nu = jc.nu;
    const double am = jc.am, au_ = jc.au, pm = jc.pm, pu = jc.pu, pzc = jc.pzc;
    // Strides in volP (ny + 2, nx + 2, nz + 2 JZ_PAD) of the plane axis and the in-plane axis.
    const int pnx = nx + 2, pnz = nz + 2 * JZ_PAD;
    const int s_m = my ? pnx * pnz : pnz;
    const int s_u = my ? pnz : pnx * pnz;
    const int origin = (pnx + 1) * pnz + JZ_PAD;   // voxel (0, 0, 0)
    const long long s_u64 = s_u;                   // to the upper in-plane neighbour
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

// Structured Joseph's transpose in gather form: each thread owns one voxel
// column (i, j) and JG_K consecutive z voxels and sums, over the views, the
// contributions of every sample the forward takes that lands on them, with
// the forward's float32 weights (the same helpers compute them): no atomics,
// each output written once, deterministic.
//
// Two table kernels first turn each batch of views into what the forward
// keeps per column: joseph_plane_table, per (view, column, plane) the plane's
// dtau, fraction a and in-plane index iu (JG_NONE where the column does not
// sample it), and per (view, column) the dominant axis; joseph_row_table, per
// (view, column, row) the row's fr, mz, iz and the value y w the forward's
// transpose spreads (w: the plane-to-plane length). The gather then needs per
// (view, candidate column) one plane entry and per row one 16-byte entry:
// sample z = iz + floor(fv), fv = fr + dtau mz in float32 as in the forward,
// weights (1 - a or a) x (1 - av or av) x y w.
//
// Candidate columns: those whose vertical plane passes within one voxel of
// the column's centre along the x-planes (x-dominant columns: their sample on
// plane i must land in (j - 1, j + 1)) or the y-planes (y-dominant: on plane j
// within (i - 1, i + 1)); the column index u of a world point comes from M^-1
// (the same map as structured_gather), padded by one column, and each
// candidate is then tested exactly with its plane entry. Rows: z of a row on a
// plane is affine in the row index (flat detector), so the rows that can
// reach [k0 - 1, k0 + JG_K] come from the first and last rows' z, padded by
// one row; each is then tested exactly.
//
// A sample of the forward that lands on a voxel lies inside the forward's
// plane ranges (they are the float64 ranges of tau >= 0, in-plane index in
// (-1, nu) and z in (-1, nz), each padded by one plane), so the two sum the
// same weights: up to rows whose z stays within float32 rounding of the
// grid's top or bottom face across all planes (|slope| below ~1e-4 voxel
// per plane), which the float64 range may drop and float32 keep.
#ifndef LEVERET_JG_K
#define LEVERET_JG_K 32
#endif
#define JG_K LEVERET_JG_K
#define JG_NONE (-2147483647 - 1)

extern "C" __global__ void joseph_plane_table(int4* __restrict__ planes, int* __restrict__ dominant, int nx, int ny,
                                              const double* __restrict__ params, const double* __restrict__ g,
                                              int n_views, int n_cols)
{
    const int nmax = max(nx, ny);
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)n_views * n_cols * nmax) return;
    const int sp = (int)(t % nmax);
    const long long vc = t / nmax;   // view * n_cols + col
    const int col = (int)(vc % n_cols), view = (int)(vc / n_cols);
    const JosephColumn jc = joseph_column(params + 12 * view, g, (double)col, nx, ny);
    if (sp == 0) dominant[vc] = jc.my ? 1 : 0;
    int4 e = make_int4(0, 0, JG_NONE, 0);
    if (sp < jc.nm) {
        float dtau, a;
        int iu;
        bool ok;
        joseph_plane(jc, sp, dtau, a, iu, ok);
        e = make_int4(__float_as_int(dtau), __float_as_int(a), ok ? iu : JG_NONE, 0);
    }
    planes[t] = e;
}

extern "C" __global__ void joseph_row_table(float4* __restrict__ rows, const float* __restrict__ proj, int nx, int ny,
                                            int nz, const double* __restrict__ params, const double* __restrict__ g,
                                            int n_views, int n_rows, int n_cols)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // ((view n_cols + col) n_rows + row)
    if (t >= (long long)n_views * n_cols * n_rows) return;
    const int row = (int)(t % n_rows);
    const long long vc = t / n_rows;
    const int col = (int)(vc % n_cols), view = (int)(vc / n_cols);
    const double* par = params + 12 * view;
    const JosephColumn jc = joseph_column(par, g, (double)col, nx, ny);
    float fr, mz;
    int iz;
    joseph_row(jc, par, g, (double)col, (double)row, fr, mz, iz);
    const float w = joseph_step(jc, par, g, (double)col, (double)row, nz);
    const float value = proj[((long long)view * n_rows + row) * n_cols + col] * w;   // as the atomic transpose
    rows[t] = make_float4(fr, mz, __int_as_float(iz), value);
}

// Column index u of the vertical plane through world point (x, y) (M^-1 row major).
// Approximate division (2 ulp): callers pad the column range by far more.
__device__ __forceinline__ float column_of(const double* par, float x, float y)
{
    const float dx = x - (float)par[0], dy = y - (float)par[1];
    return __fdividef((float)par[8] * dx - (float)par[5] * dy, (float)par[3] * dy - (float)par[6] * dx);
}

extern "C" __global__ void __launch_bounds__(128) joseph_gather(
    float* __restrict__ vol, const int4* __restrict__ planes, const int* __restrict__ dominant,
    const float4* __restrict__ rows, int nx, int ny, int nz, const double* __restrict__ params,
    const double* __restrict__ g, int n_views, int n_rows, int n_cols, int accumulate)
{
    extern __shared__ float acc[];   // (JG_K + 2) slots per thread: z = k0 - 1 ... k0 + JG_K
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * JG_K;
    const int nt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    float* const my_acc = acc + tid;   // slot s at my_acc[s * nt]: conflict-free across the warp
#pragma unroll
    for (int q = 0; q < JG_K + 2; ++q) my_acc[q * nt] = 0.0f;
    if (i >= nx || j >= ny) return;   // no barrier below
    const int nmax = max(nx, ny);
    // World centre of the column and one voxel around it (x, y).
    const float xc = (float)(g[2] + ((double)i + 0.5) / g[5]), yc = (float)(g[3] + ((double)j + 0.5) / g[6]);
    const float dxv = (float)(1.0 / g[5]), dyv = (float)(1.0 / g[6]);
    for (int view = 0; view < n_views; ++view) {
        const double* par = params + 12 * view;
        const float c0 = column_of(par, xc, yc - dyv), c1 = column_of(par, xc, yc + dyv);
        const float c2 = column_of(par, xc - dxv, yc), c3 = column_of(par, xc + dxv, yc);
        const float lo = fminf(fminf(c0, c1), fminf(c2, c3)), hi = fmaxf(fmaxf(c0, c1), fmaxf(c2, c3));
        if (!(hi >= -1.0f && lo <= (float)n_cols)) continue;   // also NaN (no column)
        const int ua = max(0, (int)floorf(fmaxf(lo, -2.0f)) - 1);
        const int ub = min(n_cols - 1, (int)ceilf(fminf(hi, (float)n_cols + 1.0f)) + 1);
        for (int u = ua; u <= ub; ++u) {
            const long long vc = (long long)view * n_cols + u;
            const bool my = dominant[vc] != 0;
            const int4 e = planes[vc * nmax + (my ? j : i)];
            const int in = my ? i : j;
            if (e.z == JG_NONE || (in != e.z && in != e.z + 1)) continue;
            const float a = __int_as_float(e.y);
            const float wu = in == e.z ? 1.0f - a : a;   // JPlane's wu0, wu1
            const float dtau = __int_as_float(e.x);
            // Rows whose z on this plane can reach [k0 - 1, k0 + JG_K] (affine in the row).
            const float4* const rc = rows + vc * n_rows;
            const float4 r0 = rc[0], r1 = rc[n_rows - 1];
            const float z0 = (float)__float_as_int(r0.z) + fmaf(dtau, r0.y, r0.x);
            const float z1 = (float)__float_as_int(r1.z) + fmaf(dtau, r1.y, r1.x);
            const float zlo = (float)(k0 - 2), zhi = (float)(k0 + JG_K + 1);
            int ra = 0, rb = n_rows - 1;
            if (fabsf(z1 - z0) > 1e-3f) {   // else every row (nearly the same z: all or none reach)
                const float inv = (float)(n_rows - 1) / (z1 - z0);
                const float ta = (zlo - z0) * inv, tb = (zhi - z0) * inv;
                ra = max(ra, (int)floorf(fmaxf(fminf(ta, tb), -1.0f)) - 1);
                rb = min(rb, (int)ceilf(fminf(fmaxf(ta, tb), (float)n_rows)) + 1);
            } else if (!(fmaxf(z0, z1) > zlo - 1.0f && fminf(z0, z1) < zhi + 1.0f)) {
                continue;
            }
            for (int row = ra; row <= rb; ++row) {
                const float4 t = rc[row];
                const float fv = fmaf(dtau, t.y, t.x);
                const float flv = floorf(fv);
                const float av = fv - flv, bv = 1.0f - av;
                const int s = __float_as_int(t.z) + (int)flv - k0 + 1;   // slot of the lower voxel
                if (s >= 0 && s <= JG_K) {
                    const float val = wu * t.w;
                    my_acc[s * nt] += val * bv;
                    my_acc[(s + 1) * nt] += val * av;
                }
            }
        }
    }
    for (int q = 0; q < JG_K; ++q) {
        const int k = k0 + q;
        if (k >= nz) break;
        float* const out = vol + ((long long)k * ny + j) * nx + i;
        const float v = my_acc[(q + 1) * nt];
        *out = accumulate ? *out + v : v;
    }
}

// Structured Joseph's transpose, voxel-driven with a warp per voxel column
// ("voxel", the default): the same weights as the forward, evaluated per
// voxel instead of per ray, so no atomics and each voxel written once.
//
// Voxel (i, j, k) receives, per view, from every detector column whose xy line
// passes within one voxel of the voxel's centre on the plane of that column's
// dominant axis (plane i of an x-dominant column, in-plane index j; plane j of
// a y-dominant one, in-plane index i), with in-plane weight wu = 1 - |fu - j|,
// and from every row of that column whose z on the plane lies within one voxel
// of k, weight 1 - |z - k|: the value y w of the ray (w: its plane-to-plane
// length, folded in by joseph_voxel_values, exactly as the atomic transpose
// spreads it). On the plane, z is affine in the row, z_r = zA + r zS (flat
// detector), so the rows come from one row coordinate t = (k - zA) / zS: r = T + d
// with t = T + f (f in [0, 1)), d in [-floor(h), floor(h) + 1], h = 1 / |zS|,
// weight wu max(0, 1 - |zS| |d - f|).
//
// A warp owns a patch of JV_PATCH x JV_PATCH voxel columns; its lanes are 32
// consecutive z voxels, each lane JV_KZ voxels 32 apart. The (view, column,
// plane) work (candidate columns, tau, fu, zA, zS, in float64 from
// joseph_voxel_columns' per-column numbers) is uniform across the warp, and
// the lanes' rows are adjacent entries of the column's values (layout (view,
// column, row), padded): one or two cache lines per load. With 2 x 2 patches
// a column's z interpolation on a plane serves both in-plane neighbours
// (weights w[0], w[1]) but takes 127-143 registers; one column per warp (the
// default) measured faster on the H200 (paper 003's problem: 145 ms against
// 178-190 ms; docs/performance.md has each step, the prediction was 100-140).
// Per voxel: the row coordinate stepped in 32.32 fixed point (exact steps; the
// fraction into a float's mantissa), then per row one load and three operations.
// The z fractions are float64-accurate where the forward's float32 march
// (fmaf(dtau, mz, fr)) rounds: the two differ by that march's rounding, well
// inside 1e-5 (the tests' adjoint bound); joseph_float32_bound covers both.
//
// Rows further than JV_HMAX + 1 below or above the detector read the zero
// padding (JV_PAD_LO, JV_PAD_HI rows): the row index is clamped where no row
// can reach, and the launcher checks h < JV_HMAX + 1 (rows at least a quarter
// voxel apart in z).
#ifndef LEVERET_JV_PATCH
#define LEVERET_JV_PATCH 1   // a warp's voxel columns: JV_PATCH x JV_PATCH
#endif
#define JV_PATCH LEVERET_JV_PATCH
#ifndef LEVERET_JV_KZ
#define LEVERET_JV_KZ (JV_PATCH == 1 ? 16 : 8)
#endif
#define JV_KZ LEVERET_JV_KZ
#ifndef LEVERET_JV_MIN_BLOCKS
#define LEVERET_JV_MIN_BLOCKS 3   // blocks per multiprocessor the register allocation must allow
#endif
#ifndef LEVERET_JV_WARPS_X
#define LEVERET_JV_WARPS_X 1      // a block's 8 warps (patches): JV_WARPS_X along x, 8 / JV_WARPS_X along y
#endif
#define JV_WX LEVERET_JV_WARPS_X
#define JV_WY (8 / JV_WX)
#define JV_HMAX 3
#define JV_PAD_LO (2 * JV_HMAX + 2)
#define JV_PAD_HI (2 * JV_HMAX + 3)
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

// y w per ray in the gather's layout (view, column, JV_PAD_LO + row), zero
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
// as column_of reads them): no float64 conversions per call.
__device__ __forceinline__ float column_of_f(const float4& a, const float2& b, float x, float y)
{
    const float dx = x - a.x, dy = y - a.y;
    return (a.z * dx - a.w * dy) * rcp_approx(b.x * dy - b.y * dx);
}

// A lane's JV_KZ voxels from one (view, column, plane): rows T - nh .. T + nh + 1
// of the column's values col (NH >= 0: that nh, unrolled; -1: nh at run
// time), row coordinate T + f stepped by DT + df from voxel to voxel.
// A lane's JV_KZ voxels k0 + 32 q from one (view, column, plane): rows
// T - nh .. T + nh + 1 of the column's values (offset coloff; NH >= 0: that nh,
// unrolled; -1: nh at run time, and the row clamped), row coordinate t in 32.32
// fixed point stepped by dt per voxel (two interleaved chains: shorter
// dependencies). The fraction f = lo 2^-32 becomes F = 1 + f by placing lo's top
// 23 bits in a float's mantissa (two integer operations instead of a
// conversion); row weight 1 - |zS| |d - f| = (1 + |zS| (1 + d)) - |zS| F for
// d <= 0 and (1 - |zS| (1 + d)) + |zS| F for d >= 1. With JV_PATCH 1 the
// in-plane weight scales the row weights and the voxel sums them directly;
// else the z sum goes to the patch's voxel columns with their weights w[b].
template <int NH, bool CLAMP>
__device__ __forceinline__ void joseph_voxel_rows(const float* __restrict__ values, int coloff, long long t,
                                                  long long dt, float zS, const float (&w)[JV_PATCH], int tlo,
                                                  int thi, int nh, float (*acc[JV_PATCH])[JV_KZ])
{
    const float s = JV_PATCH == 1 ? w[0] : 1.0f;   // scale of the row weights
    const float zw = zS * s;
    long long tq[2] = {t, t + dt};
    const long long dt2 = 2 * dt;
#pragma unroll
    for (int q = 0; q < JV_KZ; ++q) {
        const long long tc = tq[q & 1];
        tq[q & 1] += dt2;
        const int T = (int)(tc >> 32);
        const float F = __int_as_float(0x3f800000 | ((unsigned)tc >> 9));
        const float* p = values + (coloff + (CLAMP ? min(max(T, tlo), thi) : T));
        float sum = 0.0f;
        float& out = JV_PATCH == 1 ? (*acc[0])[q] : sum;
        if (NH >= 0) {
#pragma unroll
            for (int d = -NH; d <= NH + 1; ++d) {
                const float wr = d >= 1 ? fmaf(zw, F, s - zw * (1 + d)) : fmaf(-zw, F, s + zw * (1 + d));
                out = fmaf(fmaxf(0.0f, wr), p[d], out);
            }
        } else {
            for (int d = -nh; d <= nh + 1; ++d) {
                const float wr = d >= 1 ? fmaf(zw, F, s - zw * (1 + d)) : fmaf(-zw, F, s + zw * (1 + d));
                out = fmaf(fmaxf(0.0f, wr), p[d], out);
            }
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
// (i0 + a, j0 + b, k0 + 32 q). Candidates: the columns between those of the
// window's ends on each plane (union over the planes), padded by 0.01; each
// column's numbers are loaded once for all planes and tested exactly.
template <bool MY>
__device__ __forceinline__ void joseph_voxel_rule(const float4& va, const float2& vb, const PatchLine& L,
                                                  int i0, int j0, int k0, const double* vcols,
                                                  const float* __restrict__ values, int voff, int rows_p, int n_rows,
                                                  int n_cols, float (&acc)[JV_PATCH][JV_PATCH][JV_KZ])
{
    const int p0 = MY ? j0 : i0, b0 = MY ? i0 : j0;
    float lo = 3.0e38f, hi = -3.0e38f;
#pragma unroll
    for (int a = 0; a < JV_PATCH; ++a) {
        const float c0 = MY ? column_of_f(va, vb, L.lo, L.plane[a]) : column_of_f(va, vb, L.plane[a], L.lo);
        const float c1 = MY ? column_of_f(va, vb, L.hi, L.plane[a]) : column_of_f(va, vb, L.plane[a], L.hi);
        lo = fminf(lo, fminf(c0, c1));
        hi = fmaxf(hi, fmaxf(c0, c1));
    }
    if (!(hi >= -1.0f && lo <= (float)n_cols)) return;   // also NaN (no column)
    const int ua = max(0, (int)ceilf(fmaxf(lo, -2.0f) - 0.01f));
    const int ub = min(n_cols - 1, (int)floorf(fminf(hi, (float)n_cols + 1.0f) + 0.01f));
    const int tlo = -(JV_HMAX + 2), thi = n_rows + JV_HMAX + 1;
    for (int u = ua; u <= ub; ++u) {
        // The column's eight numbers in four 16-byte loads issued together.
        const double2* c2 = (const double2*)(vcols + (long long)u * JV_NCOL);
        const double2 cA = c2[0], cB = c2[1], cC = c2[2], cD = c2[3];   // (my, 1/am) (pm, au) (pu, Mz0) (Mz1, pzc)
        // The NaN tests (never true) make all four loads precede the branch:
        // the compiler does not hoist loads above it, which serialised their latencies.
        if (((cA.x != 0.0) != MY) | (cB.x != cB.x) | (cC.x != cC.x) | (cD.x != cD.x)) continue;
        const int coloff = voff + u * rows_p;   // 32-bit offsets: a batch holds < 2^31 values
#pragma unroll
        for (int a = 0; a < JV_PATCH; ++a) {
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
            const int nh = min((int)fabs(inv), JV_HMAX);
            const float zSa = (float)fabs(zS);
            // Row coordinate of voxel k0 and its step per 32 voxels, 32.32 fixed point.
            // |t0| < 2^30 (the launcher checks: voxel_row_extent), so t + 31 dt fits 64 bits.
            const double t0 = ((double)k0 - zA) * inv;
            const long long t = __double2ll_rn(t0 * 4294967296.0);
            const long long dt = __double2ll_rn(32.0 * inv * 4294967296.0);
            // No clamp where every lane's rows stay in [tlo, thi] (T is monotonic in q).
            const int Ta = (int)(t >> 32), Tb = (int)((t + (JV_KZ - 1) * dt) >> 32);
            const bool inside = __all_sync(0xffffffffu, min(Ta, Tb) >= tlo && max(Ta, Tb) <= thi);
            float (*dst[JV_PATCH])[JV_KZ];
#pragma unroll
            for (int b = 0; b < JV_PATCH; ++b) dst[b] = MY ? &acc[a][b] : &acc[b][a];
            if (nh == 0 && inside)        // rows T, T + 1 (|zS| > 1)
                joseph_voxel_rows<0, false>(values, coloff, t, dt, zSa, w, tlo, thi, 0, dst);
            else if (nh == 1 && inside)   // rows T - 1 .. T + 2 (|zS| in (1/2, 1])
                joseph_voxel_rows<1, false>(values, coloff, t, dt, zSa, w, tlo, thi, 1, dst);
            else
                joseph_voxel_rows<-1, true>(values, coloff, t, dt, zSa, w, tlo, thi, nh, dst);
        }
    }
}

// Blocks of 8 warps on a JV_WX x JV_WY arrangement of patches (neighbouring
// voxel columns read the same detector columns: L1 hits); grid
// (ceil(nx / (JV_WX JV_PATCH)), ceil(ny / (JV_WY JV_PATCH)), ceil(nz / (32 JV_KZ))).
// volT: the z-fastest volume (ny, nx, nz); values, cols and flags for the
// views [0, n_views) of this batch, vf their float32 numbers for column_of_f
// (8 per view); accumulate: add to volT.
extern "C" __global__ void __launch_bounds__(256, LEVERET_JV_MIN_BLOCKS) joseph_voxel_gather(
    float* __restrict__ volT, const float* __restrict__ values, const double* __restrict__ cols,
    const int* __restrict__ flags, const float* __restrict__ vf, const double* __restrict__ g, int nx, int ny,
    int nz, int n_views, int n_rows, int n_cols, int accumulate)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i0 = (blockIdx.x * JV_WX + warp % JV_WX) * JV_PATCH, j0 = (blockIdx.y * JV_WY + warp / JV_WX) * JV_PATCH;
    if (i0 >= nx || j0 >= ny) return;   // whole warps; no barrier below
    const int k0 = blockIdx.z * (32 * JV_KZ) + lane;
    const int rows_p = n_rows + JV_PAD_LO + JV_PAD_HI;
    float acc[JV_PATCH][JV_PATCH][JV_KZ];
#pragma unroll
    for (int b = 0; b < JV_PATCH; ++b)
#pragma unroll
        for (int a = 0; a < JV_PATCH; ++a)
#pragma unroll
            for (int q = 0; q < JV_KZ; ++q) acc[b][a][q] = 0.0f;
    const PatchLine Lx = patch_line<false>(g, i0, j0), Ly = patch_line<true>(g, i0, j0);
    for (int view = 0; view < n_views; ++view) {
        const float4 va = ((const float4*)vf)[2 * view];
        const float2 vb = ((const float2*)vf)[4 * view + 2];
        const double* vcols = cols + (long long)view * n_cols * JV_NCOL;
        const int voff = view * n_cols * rows_p + JV_PAD_LO;
        const int has = flags[view];
        if (has & 1) joseph_voxel_rule<false>(va, vb, Lx, i0, j0, k0, vcols, values, voff, rows_p, n_rows, n_cols, acc);
        if (has & 2) joseph_voxel_rule<true>(va, vb, Ly, i0, j0, k0, vcols, values, voff, rows_p, n_rows, n_cols, acc);
    }
#pragma unroll
    for (int b = 0; b < JV_PATCH; ++b)
#pragma unroll
        for (int a = 0; a < JV_PATCH; ++a) {
            if (i0 + a >= nx || j0 + b >= ny) continue;
            float* const out = volT + ((long long)(j0 + b) * nx + i0 + a) * nz;
#pragma unroll
            for (int q = 0; q < JV_KZ; ++q) {
                const int k = k0 + 32 * q;
                if (k < nz) out[k] = accumulate ? out[k] + acc[b][a][q] : acc[b][a][q];
            }
        }
}

// Voxel-driven (gather) form of the structured transpose: no atomics, each
// volume value written once. Thread: voxel column (i, j), LEVERET_RT_K z voxels
// from k0, sums in registers over all views. Per view it finds the detector
// columns whose xy line can cross cell (i, j) (the cell's corners mapped to u,
// padded by one), recomputes each column's segment through the cell exactly
// as the ray-driven kernel's merged list has it (entry = max of the x and y
// entry crossings, exit = min of the exits, the same clamped face parameters;
// kept only if its midpoint gives this cell, as there), then for the rows that
// can reach z in [k0, k0 + K] (padded by one) the same z_split as the forward:
// the weights are the forward's, bit for bit, so this is its exact transpose.
#ifndef LEVERET_RT_K
#define LEVERET_RT_K 8
#endif

template <typename T>
__device__ void structured_gather(T* vol, const T* __restrict__ proj, int nx, int ny, int nz,
                                  const double* __restrict__ params, const double* __restrict__ g,
                                  int n_views, int n_rows, int n_cols)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * LEVERET_RT_K;
    if (i >= nx || j >= ny) return;
    const int my_cell = j * nx + i;
    double acc[LEVERET_RT_K];
#pragma unroll
    for (int q = 0; q < LEVERET_RT_K; ++q) acc[q] = 0.0;
    // World corners of the cell.
    const double x0 = add(g[2], __ddiv_rn((double)i, g[5])), x1 = add(g[2], __ddiv_rn((double)(i + 1), g[5]));
    const double y0 = add(g[3], __ddiv_rn((double)j, g[6])), y1 = add(g[3], __ddiv_rn((double)(j + 1), g[6]));
    for (int view = 0; view < n_views; ++view) {
        const double* par = params + 12 * view;
        const double* m = par + 3;   // M^-1, row major
        // Column u whose vertical plane holds world point (x, y):
        // u = (m12 dx - m02 dy) / (m00 dy - m10 dx), d = point - source.
        // In front of the source the denominator has the sign of
        // D0 = m00 m12 - m10 m02 (that of every column's own direction).
        const double D0 = m[0] * m[5] - m[3] * m[2];
        double umin = d_inf(), umax = -d_inf();
        bool front = true;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const double dx = (q & 1 ? x1 : x0) - par[0], dy = (q & 2 ? y1 : y0) - par[1];
            const double den = m[0] * dy - m[3] * dx;
            front = front && (den * D0 > 0.0);
            const double uq = (m[5] * dx - m[2] * dy) / den;
            umin = fmin(umin, uq);
            umax = fmax(umax, uq);
        }
        int c0 = 0, c1 = n_cols - 1;
        if (front) {
            c0 = max(c0, (int)fmax(ceil(umin) - 1.0, -1.0));
            c1 = min(c1, (int)fmin(floor(umax) + 1.0, (double)n_cols));
        }
        const T* pv = proj + (long long)view * n_rows * n_cols;
        for (int col = c0; col <= c1; ++col) {
            const double u = (double)col;
            const ColumnLine c = column_line(par, g, u, nx, ny);
            if (!c.hit) continue;
            const int fx = c.ax >= 0.0 ? i : i + 1, fy = c.ay >= 0.0 ? j : j + 1;   // entry faces
            const double xa = face_tau(fx, c.px, c.ax, c.t_in, c.t_out);
            const double xb = face_tau(c.ax >= 0.0 ? i + 1 : i, c.px, c.ax, c.t_in, c.t_out);
            const double ya = face_tau(fy, c.py, c.ay, c.t_in, c.t_out);
            const double yb = face_tau(c.ay >= 0.0 ? j + 1 : j, c.py, c.ay, c.t_in, c.t_out);
            // ax == 0: the x faces below px read t_in, those above t_out, in
            // face order, so entry/exit are faces i/i+1 as for ax > 0.
            const double B0 = fmax(xa, ya), B1 = fmin(xb, yb);
            if (!(B1 > B0) || segment_cell(c, B0, B1, nx, ny) != my_cell) continue;
            // Rows that can reach z in [k0, k0 + K] within the segment: z is
            // affine in v at fixed tau; invert at both ends, pad by one row.
            int r0 = 0, r1 = n_rows - 1;
            const double m21 = par[10];
            if (m21 != 0.0 && B0 > 0.0) {
                const double qx = add(mul(par[3], u), par[5]), qy = add(mul(par[6], u), par[8]);
                const double rxy = sqrt(qx * qx + qy * qy);
                const double base = m[6] * u + m[8];
                double vmin = d_inf(), vmax = -d_inf();
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const double tau = q & 1 ? B1 : B0;
                    const double z = (double)(q & 2 ? k0 + LEVERET_RT_K : k0);
                    const double vq = ((z - c.pz) / (tau * g[7]) * rxy - base) / m21;
                    vmin = fmin(vmin, vq);
                    vmax = fmax(vmax, vq);
                }
                r0 = max(r0, (int)fmax(floor(vmin) - 1.0, -1.0));
                r1 = min(r1, (int)fmin(ceil(vmax) + 1.0, (double)n_rows));
            }
            for (int row = r0; row <= r1; ++row) {
                const double value = (double)pv[(long long)row * n_cols + col];
                const RowLine r = row_line(c, par, g, u, (double)row, nz);
                int kz, kz2;
                double l1, l2;
                z_split(r, c.pz, B0, B1, nz, kz, kz2, l1, l2);
                const double w1 = l1 * value, w2 = l2 * value;
#pragma unroll
                for (int q = 0; q < LEVERET_RT_K; ++q) {
                    acc[q] += (kz == k0 + q ? w1 : 0.0) + (kz2 == k0 + q ? w2 : 0.0);
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < LEVERET_RT_K; ++q)
        if (k0 + q < nz) vol[((long long)(k0 + q) * ny + j) * nx + i] = (T)acc[q];
}

extern "C" __global__ void structured_siddon_gather_f32(float* vol, const float* __restrict__ proj, int nx, int ny,
                                                        int nz, const double* __restrict__ params,
                                                        const double* __restrict__ g, int n_views, int n_rows,
                                                        int n_cols)
{
    structured_gather<float>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols);
}

extern "C" __global__ void structured_siddon_gather_f64(double* vol, const double* __restrict__ proj, int nx, int ny,
                                                        int nz, const double* __restrict__ params,
                                                        const double* __restrict__ g, int n_views, int n_rows,
                                                        int n_cols)
{
    structured_gather<double>(vol, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols);
}

// The structured kernels' z-fastest copy of the volume: volT[(j nx + i) nz + k]
// = vol[(k ny + j) nx + i], or with borders of PXY voxels in x and y and PZ
// in z (structured Joseph's volP; the borders are not touched: the caller
// zeroes them). For one j both directions are 2D transposes between the
// (nz, nx) slab of vol (row stride ny nx) and the contiguous (nx, nz) slab of
// volT, done in 32 x 32 tiles through shared memory so that reads and writes
// are both coalesced (a strided elementwise copy reads one 32-byte sector per
// 4-byte element). Grid (ceil(nx/32), ceil(nz/32), ny); any block shape works
// (the loops stride by blockDim), (32, 8) is the one launched.
template <typename T, bool TO_ZFAST, int PXY, int PZ>
__device__ __forceinline__ void zfast_transpose(const T* __restrict__ src, T* __restrict__ dst, int nx, int ny,
                                                int nz, T (*tile)[33])
{
    const int j = blockIdx.z;
    const int i0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    const long long pnx = nx + 2 * PXY, pnz = nz + 2 * PZ;
    for (int d = threadIdx.y; d < 32; d += blockDim.y)
        for (int e = threadIdx.x; e < 32; e += blockDim.x) {
            // tile[d][e]: vol[k0 + d, j, i0 + e] (TO_ZFAST) or volT[j, i0 + d, k0 + e]
            if (TO_ZFAST) {
                if (k0 + d < nz && i0 + e < nx) tile[d][e] = src[((long long)(k0 + d) * ny + j) * nx + i0 + e];
            } else {
                if (i0 + d < nx && k0 + e < nz)
                    tile[d][e] = src[((j + PXY) * pnx + i0 + d + PXY) * pnz + k0 + e + PZ];
            }
        }
    __syncthreads();
    for (int d = threadIdx.y; d < 32; d += blockDim.y)
        for (int e = threadIdx.x; e < 32; e += blockDim.x) {
            if (TO_ZFAST) {   // volT[j, i0 + d, k0 + e] = vol[k0 + e, j, i0 + d] = tile[e][d]
                if (i0 + d < nx && k0 + e < nz) dst[((j + PXY) * pnx + i0 + d + PXY) * pnz + k0 + e + PZ] = tile[e][d];
            } else {          // vol[k0 + d, j, i0 + e] = volT[j, i0 + e, k0 + d] = tile[e][d]
                if (k0 + d < nz && i0 + e < nx) dst[((long long)(k0 + d) * ny + j) * nx + i0 + e] = tile[e][d];
            }
        }
}

#define ZFAST_KERNEL(NAME, T, TO, PXY, PZ)                                                               \
    extern "C" __global__ void NAME(const T* __restrict__ src, T* __restrict__ dst, int nx, int ny, int nz) \
    {                                                                                                    \
        __shared__ T tile[32][33];                                                                       \
        zfast_transpose<T, TO, PXY, PZ>(src, dst, nx, ny, nz, tile);                                     \
    }

ZFAST_KERNEL(to_zfast_f32, float, true, 0, 0)
ZFAST_KERNEL(from_zfast_f32, float, false, 0, 0)
ZFAST_KERNEL(to_zfast_f64, double, true, 0, 0)
ZFAST_KERNEL(from_zfast_f64, double, false, 0, 0)
ZFAST_KERNEL(to_zpad_f32, float, true, 1, JZ_PAD)
ZFAST_KERNEL(from_zpad_f32, float, false, 1, JZ_PAD)

#define STRUCTURED_KERNEL(NAME, T, ADJ)                                                                 \
    extern "C" __global__ void NAME(T* volT, T* proj, int nx, int ny, int nz,                           \
                                    const double* __restrict__ params, const double* __restrict__ g,     \
                                    int n_rows, int n_cols)                                             \
    {                                                                                                   \
        structured<T, ADJ>(volT, proj, nx, ny, nz, params, g, n_rows, n_cols);                          \
    }

STRUCTURED_KERNEL(structured_siddon_forward_f32, float, false)
STRUCTURED_KERNEL(structured_siddon_adjoint_f32, float, true)
STRUCTURED_KERNEL(structured_siddon_forward_f64, double, false)
STRUCTURED_KERNEL(structured_siddon_adjoint_f64, double, true)
