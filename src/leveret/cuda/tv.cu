// Isotropic total variation's fused steps (leveret.operators.tv): the primal
// update with the transpose of the gradient, the dual update with the
// gradient and the projection on the norm ball, and the sum of the gradient's
// norms. Every kernel runs one thread per voxel in a grid-stride loop over
// the volume (nz, ny, nx), x fastest; a 2D image is nz = 1 with ndim = 2.
//
// Gradient: forward differences in voxel units, Neumann boundary,
//   (D x)_a[v] = x[v + e_a] - x[v]  where v_a < n_a - 1, else 0,
// its transpose D^T q [v] = sum_a (q_a[v - e_a] [v_a > 0] - q_a[v] [v_a < n_a - 1]).
// The dual field q holds ndim volumes, one per axis in array order
// (q[0] = z in 3D, then y, then x); a component on an axis' last plane is
// no edge: D^T ignores it and the dual update writes 0 there.
//
// Traffic per voxel: tv_primal reads ndim + 1 (or + 2) values and writes one;
// tv_dual reads 1 or 2 values (neighbours come from the caches) plus ndim
// (2 ndim with momentum) and writes ndim (2 ndim). NaN propagates through
// every step (clips and projections are comparisons, false for NaN), so a
// diverging iterate shows in the objective instead of being clipped away.

#ifndef TV_BLOCK
#error "tv.cu: compile with the launcher's DEFINES (leveret.cuda.tv.DEFINES)"
#endif

__device__ __forceinline__ float root(float v) { return sqrtf(v); }
__device__ __forceinline__ double root(double v) { return sqrt(v); }

template <typename T>
__device__ __forceinline__ T transpose_gradient(const T* q, long long i, long long n, int x, int y, int z,
                                                int nx, int ny, int nz, int ndim)
{
    const T* qx = q + (long long)(ndim - 1) * n;
    const T* qy = q + (long long)(ndim - 2) * n;
    T d = 0;
    if (x > 0) d += qx[i - 1];
    if (x < nx - 1) d -= qx[i];
    if (y > 0) d += qy[i - nx];
    if (y < ny - 1) d -= qy[i];
    if (ndim == 3) {
        const long long plane = (long long)nx * ny;
        if (z > 0) d += q[i - plane];
        if (z < nz - 1) d -= q[i];
    }
    return d;
}

// out = clip(a + s (c b - D^T q), lo, hi); s = s_arr[i] when has_s_arr, b
// only when has_b. out may be a or b (each voxel reads and writes only itself).
template <typename T>
__device__ void primal(const T* a, const T* b, int has_b, T c, T s, const T* s_arr, int has_s_arr,
                       const T* q, T* out, T lo, T hi, int nz, int ny, int nx, int ndim)
{
    const long long n = (long long)nz * ny * nx;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int x = (int)(i % nx);
        const long long rest = i / nx;
        const int y = (int)(rest % ny);
        const int z = (int)(rest / ny);
        T value = has_b ? c * b[i] : (T)0;
        value -= transpose_gradient(q, i, n, x, y, z, nx, ny, nz, ndim);
        const T step = has_s_arr ? s_arr[i] : s;
        const T r = a[i] + step * value;
        out[i] = r < lo ? lo : (r > hi ? hi : r);
    }
}

// The field u = c0 z0 + c1 z1 (z1 only when has_z1) at voxel index j.
template <typename T>
__device__ __forceinline__ T field(const T* z0, const T* z1, int has_z1, T c0, T c1, long long j)
{
    return has_z1 ? c0 * z0[j] + c1 * z1[j] : c0 * z0[j];
}

// p = project(r + sigma D u, bound) per voxel (u = c0 z0 + c1 z1), the norm
// over the ndim components; then q = p, and with has_r_out also
// r_out = p + beta (p - q_old). r, q and r_out may be one array.
template <typename T>
__device__ void dual(const T* z0, const T* z1, int has_z1, T c0, T c1, const T* r, T* q, T* r_out,
                     int has_r_out, T sigma, T beta, T bound, int nz, int ny, int nx, int ndim)
{
    const long long n = (long long)nz * ny * nx;
    const long long plane = (long long)nx * ny;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long ox = (long long)(ndim - 1) * n, oy = (long long)(ndim - 2) * n;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int x = (int)(i % nx);
        const long long rest = i / nx;
        const int y = (int)(rest % ny);
        const int z = (int)(rest / ny);
        const T u = field(z0, z1, has_z1, c0, c1, i);
        const T px = x < nx - 1 ? r[ox + i] + sigma * (field(z0, z1, has_z1, c0, c1, i + 1) - u) : (T)0;
        const T py = y < ny - 1 ? r[oy + i] + sigma * (field(z0, z1, has_z1, c0, c1, i + nx) - u) : (T)0;
        const T pz = (ndim == 3 && z < nz - 1) ? r[i] + sigma * (field(z0, z1, has_z1, c0, c1, i + plane) - u)
                                               : (T)0;
        const T norm = root(px * px + py * py + pz * pz);
        const T f = norm > bound ? bound / norm : (T)1;
        const T qx = px * f, qy = py * f, qz = pz * f;
        if (has_r_out) {
            const T old_x = q[ox + i], old_y = q[oy + i];
            r_out[ox + i] = qx + beta * (qx - old_x);
            r_out[oy + i] = qy + beta * (qy - old_y);
            if (ndim == 3) {
                const T old_z = q[i];
                r_out[i] = qz + beta * (qz - old_z);
            }
        }
        q[ox + i] = qx;
        q[oy + i] = qy;
        if (ndim == 3) q[i] = qz;
    }
}

// partials[t] = sum of |D x|_v over the voxels thread t visits, in double:
// the caller sums the grid's partials (a fixed grid: the same order each run).
template <typename T>
__device__ void norm_sum(const T* xv, double* partials, int nz, int ny, int nx, int ndim)
{
    const long long n = (long long)nz * ny * nx;
    const long long plane = (long long)nx * ny;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double acc = 0.0;
    for (long long i = t; i < n; i += stride) {
        const int x = (int)(i % nx);
        const long long rest = i / nx;
        const int y = (int)(rest % ny);
        const int z = (int)(rest / ny);
        const double u = (double)xv[i];
        const double gx = x < nx - 1 ? (double)xv[i + 1] - u : 0.0;
        const double gy = y < ny - 1 ? (double)xv[i + nx] - u : 0.0;
        const double gz = (ndim == 3 && z < nz - 1) ? (double)xv[i + plane] - u : 0.0;
        acc += sqrt(gx * gx + gy * gy + gz * gz);
    }
    partials[t] = acc;
}

#define TV_ENTRY_POINTS(T, SUFFIX)                                                                            \
extern "C" __global__ void __launch_bounds__(TV_BLOCK)                                                       \
tv_primal_##SUFFIX(const T* a, const T* b, int has_b, T c, T s, const T* s_arr, int has_s_arr, const T* q,  \
                   T* out, T lo, T hi, int nz, int ny, int nx, int ndim)                                    \
{ primal<T>(a, b, has_b, c, s, s_arr, has_s_arr, q, out, lo, hi, nz, ny, nx, ndim); }                       \
extern "C" __global__ void __launch_bounds__(TV_BLOCK)                                                       \
tv_dual_##SUFFIX(const T* z0, const T* z1, int has_z1, T c0, T c1, const T* r, T* q, T* r_out,              \
                 int has_r_out, T sigma, T beta, T bound, int nz, int ny, int nx, int ndim)                 \
{ dual<T>(z0, z1, has_z1, c0, c1, r, q, r_out, has_r_out, sigma, beta, bound, nz, ny, nx, ndim); }          \
extern "C" __global__ void __launch_bounds__(TV_BLOCK)                                                       \
tv_norm_sum_##SUFFIX(const T* xv, double* partials, int nz, int ny, int nx, int ndim)                       \
{ norm_sum<T>(xv, partials, nz, ny, nx, ndim); }

TV_ENTRY_POINTS(float, f32)
TV_ENTRY_POINTS(double, f64)
