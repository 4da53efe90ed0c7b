// Ops of the conditioning: Fourier features of scalars and masked-row replacement.

// `values [N]`, `freqs [F]` → `[N, 2F]` (`layout` 0: cos then sin) or `[N, 2F + 1]` (`layout` 1:
// the value, then sin, then cos), with `a = ((v·f)·2)·π` in f32 and its sine and cosine
// evaluated in f64 and rounded, as the CPU op does.
extern "C" __global__ void fourier_features_f32(const float* values, const float* freqs,
                                                float* y, u64 n, u64 f, int layout) {
    u64 dim = 2 * f + (layout == 1 ? 1 : 0), off = layout == 1 ? 1 : 0;
    ARIA_FOR(i, n * f) {
        u64 r = i / f, k = i % f;
        float x = values[r];
        float af = ((x * freqs[k]) * 2.0f) * ARIA_PI;
        double a = (double)af;
        float s = (float)sin(a), c = (float)cos(a);
        float* row = y + r * dim;
        if (layout == 1) {
            if (k == 0) row[0] = x;
            row[off + k] = s;
            row[off + f + k] = c;
        } else {
            row[k] = c;
            row[f + k] = s;
        }
    }
}

// Rows of `x [rows, d]` whose `mask[row] == 0` become `fill [d]` (zeros when null).
extern "C" __global__ void fill_masked_rows_f32(const float* x, const float* mask,
                                                const float* fill, float* y, u64 rows, u64 d) {
    ARIA_FOR(i, rows * d) {
        u64 r = i / d;
        y[i] = mask[r] == 0.0f ? (fill ? fill[i % d] : 0.0f) : x[i];
    }
}

// Rows `ids[i]` of `table [v, d]` → `y [n, d]`. Ids are checked on the host before the launch
// (the CPU op's error); an id outside `0..v` that reached the device anyway writes NaN.
extern "C" __global__ void embedding_f32(const long long* ids, const float* table, float* y,
                                         u64 n, u64 v, u64 d) {
    ARIA_FOR(i, n * d) {
        long long id = ids[i / d];
        y[i] = (id < 0 || (u64)id >= v) ? __int_as_float(0x7fc00000) : table[(u64)id * d + i % d];
    }
}
