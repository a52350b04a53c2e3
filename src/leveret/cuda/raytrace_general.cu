// The general ray-driven path (every geometry): one thread per ray, ray index
// r = (view * n_rows + row) * n_cols + col (projection order, adjacent
// threads = adjacent detector columns). The ray is rebuilt from the per-view
// parameters with the same float64 operations, in the same order, as the
// NumPy code that builds the CPU's ray tables (make_ray in
// raytrace_common.cuh), and traced with a transcription of the CPU's float64
// traversal (leveret/cpu/raytrace.py). The forward sums in float64 like the
// CPU; the transpose adds w * y into the volume with atomicAdd, so
// <Ax, y> = <x, A^T y> holds to rounding. precision="float32" Joseph marches
// in float32 (joseph_fast, its error bound below).
#include "raytrace_common.cuh"

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
                                        kind == KIND_CONE, value);
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
    const double t_start = kind == KIND_CONE ? 0.0 : -d_inf();   // cone rays start at the source
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
