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
//    adjacent threads (rows) touch adjacent z voxels: coalesced.
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

// Joseph along one ray (CPU: _joseph); p in voxel-centre units (voxel i centred at i).
template <typename T, bool ADJ>
__device__ double joseph(T* vol, int nx, int ny, int nz, double px, double py, double pz,
                         double dx, double dy, double dz, double t_start, double value)
{
    // Dominant axis m, the other two u < v (CPU: u = 1 if m == 0 else 0, v = 3 - m - u).
    int m = 0;
    if (fabs(dy) > fabs(dx)) m = 1;
    if (fabs(dz) > fabs(m == 0 ? dx : dy)) m = 2;
    double pm, dm, pu, du, pv, dv;
    int nm, nu, nv;
    long long sm, su, sv;  // element strides in vol
    const long long sxy = (long long)nx * ny;
    if (m == 0) { pm = px; dm = dx; nm = nx; sm = 1;
                  pu = py; du = dy; nu = ny; su = nx;  pv = pz; dv = dz; nv = nz; sv = sxy; }
    else if (m == 1) { pm = py; dm = dy; nm = ny; sm = nx;
                       pu = px; du = dx; nu = nx; su = 1;  pv = pz; dv = dz; nv = nz; sv = sxy; }
    else { pm = pz; dm = dz; nm = nz; sm = sxy;
           pu = px; du = dx; nu = nx; su = 1;  pv = py; dv = dy; nv = ny; sv = nx; }
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

template <typename T, bool ADJ, bool JOSEPH>
__device__ void general(T* vol, T* proj, int nx, int ny, int nz, const double* __restrict__ params,
                        const double* __restrict__ g, int n_views, int n_rows, int n_cols, int kind,
                        int is2d)
{
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per_view = (long long)n_rows * n_cols;
    if (r >= per_view * n_views) return;
    const int view = (int)(r / per_view);
    const int rem = (int)(r - (long long)view * per_view);
    const int row = rem / n_cols, col = rem - (rem / n_cols) * n_cols;
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
    // xy direction of every row of this column (the launcher checked that
    // M^-1's v column has no xy part): M^-1 (u, 0, 1).
    const double qx = add(mul(par[3], u), par[5]);
    const double qy = add(mul(par[6], u), par[8]);
    const double qxy = sqrt(qx * qx + qy * qy);
    const double ax = qx / qxy * g[5], ay = qy / qxy * g[6];
    const double px = (par[0] - g[2]) * g[5], py = (par[1] - g[3]) * g[6];
    const double pz = (par[2] - g[4]) * g[7];
    double t_in = 0.0, t_out = d_inf();   // cone rays start at the source
    const bool hit = clip_axis(px, ax, nx, t_in, t_out) && clip_axis(py, ay, ny, t_in, t_out) && t_in < t_out;
    const long long out0 = (long long)view * n_rows * n_cols + col;
    if (!hit) {   // uniform over the block
        if (!ADJ)
            for (int row = threadIdx.x; row < n_rows; row += blockDim.x) proj[out0 + (long long)row * n_cols] = (T)0;
        return;
    }
    // Face crossings clamped to [t_in, t_out], in ascending order (faces walked
    // backwards when the ray runs towards lower indices).
    for (int f = threadIdx.x; f <= nx; f += blockDim.x) {
        double t;
        if (ax == 0.0) t = ((double)f <= px) ? t_in : t_out;
        else t = ((ax > 0.0 ? (double)f : (double)(nx - f)) - px) / ax;
        X[f] = fmin(fmax(t, t_in), t_out);
    }
    for (int f = threadIdx.x; f <= ny; f += blockDim.x) {
        double t;
        if (ay == 0.0) t = ((double)f <= py) ? t_in : t_out;
        else t = ((ay > 0.0 ? (double)f : (double)(ny - f)) - py) / ay;
        Y[f] = fmin(fmax(t, t_in), t_out);
    }
    __syncthreads();
    // Stable merge: X before equal Y.
    for (int f = threadIdx.x; f <= nx; f += blockDim.x) B[f + rank_in<true>(Y, ny + 1, X[f])] = X[f];
    for (int f = threadIdx.x; f <= ny; f += blockDim.x) B[f + rank_in<false>(X, nx + 1, Y[f])] = Y[f];
    __syncthreads();
    const int n_seg = nx + ny + 1;
    for (int k = threadIdx.x; k < n_seg; k += blockDim.x) {
        const double mid = 0.5 * (B[k] + B[k + 1]);
        const int i = min(max((int)floor(px + mid * ax), 0), nx - 1);
        const int j = min(max((int)floor(py + mid * ay), 0), ny - 1);
        cell[k] = j * nx + i;
    }
    __syncthreads();
    const double inf = d_inf();
    for (int row = threadIdx.x; row < n_rows; row += blockDim.x) {
        const double v = (double)row;
        const double rx = add(add(mul(par[3], u), mul(par[4], v)), par[5]);
        const double ry = add(add(mul(par[6], u), mul(par[7], v)), par[8]);
        const double rz = add(add(mul(par[9], u), mul(par[10], v)), par[11]);
        const double rxy = sqrt(rx * rx + ry * ry);
        const double L = sqrt(rx * rx + ry * ry + rz * rz) / rxy;   // 3D length per unit tau
        const double mz = rz / rxy * g[7];
        double zlo, zhi;
        if (mz > 0.0) { zlo = -pz / mz; zhi = ((double)nz - pz) / mz; }
        else if (mz < 0.0) { zlo = ((double)nz - pz) / mz; zhi = -pz / mz; }
        else if (0.0 <= pz && pz < (double)nz) { zlo = -inf; zhi = inf; }
        else { zlo = inf; zhi = -inf; }
        const int step = mz >= 0.0 ? 1 : -1;
        const double value = ADJ ? (double)proj[out0 + (long long)row * n_cols] : 0.0;
        double acc = 0.0;
        if (!ADJ || value != 0.0) {
            // Only the segments that overlap this row's part of the ray inside
            // the grid, (max(t_in, zlo), min(t_out, zhi)); the others have
            // zero weight (ta == tb below), so skipping them changes nothing.
            // B is sorted: two binary searches give the range. Adjacent rows
            // get nearly the same range, so the warp stays together.
            const int k0 = max(rank_in<false>(B, n_seg + 1, fmax(B[0], zlo)) - 1, 0);
            const int k1 = rank_in<true>(B, n_seg + 1, fmin(B[n_seg], zhi));
            for (int k = k0; k < k1; ++k) {
                const double ta = fmax(B[k], zlo);
                const double tb = fmax(fmin(B[k + 1], zhi), ta);
                const double za = pz + ta * mz;
                int kz = mz >= 0.0 ? (int)floor(za) : (int)ceil(za) - 1;
                kz = min(max(kz, 0), nz - 1);
                // The z face this step may cross, clamped into the step.
                const double tf = mz == 0.0 ? inf : ((double)(kz + (step > 0)) - pz) / mz;
                const double tm = fmin(fmax(tf, ta), tb);
                const double l1 = (tm - ta) * L, l2 = (tb - tm) * L;
                const int kz2 = min(max(kz + step, 0), nz - 1);
                const long long c = (long long)cell[k] * nz;
                if (ADJ) {
                    if (l1 > 0.0) atomicAdd(volT + c + kz, (T)(l1 * value));
                    if (l2 > 0.0) atomicAdd(volT + c + kz2, (T)(l2 * value));
                } else {
                    acc += l1 * (double)volT[c + kz] + l2 * (double)volT[c + kz2];
                }
            }
        }
        if (!ADJ) proj[out0 + (long long)row * n_cols] = (T)acc;
    }
}

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
