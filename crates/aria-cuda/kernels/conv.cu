// Convolutions as GEMMs: the column matrices the cuBLAS products read.

// im2col for `conv1d`: `x [B, Cin, L]` → `col [B, Cin·K, Lo]` with `col[b, ci·K + k, t] =
// x[b, ci, t + k − pad]` (zero outside `0..L`), so `out[b] = W [Cout, Cin·K] · col[b]` sums
// over `(ci, k)` in the CPU kernel's order.
extern "C" __global__ void im2col_f32(const float* x, float* col, u64 b, u64 cin, u64 l,
                                      u64 k, u64 lo, u64 pad) {
    ARIA_FOR(i, b * cin * k * lo) {
        u64 t = i % lo, r = i / lo;
        u64 kk = r % k, rest = r / k;
        u64 ci = rest % cin, bi = rest / cin;
        i64 s = (i64)t + (i64)kk - (i64)pad;
        col[i] = (s >= 0 && s < (i64)l) ? x[(bi * cin + ci) * l + (u64)s] : 0.0f;
    }
}

// Sliding "same" windows of a token-major sequence (`unfold`): `x [B, L, C]` →
// `[B, L, K·C]`, row `t` holding `x[t − K/2] … x[t + K/2]`, zeros outside `0..L`.
extern "C" __global__ void unfold_f32(const float* x, float* y, u64 b, u64 l, u64 c, u64 k) {
    ARIA_FOR(i, b * l * k * c) {
        u64 ch = i % c, r = i / c;
        u64 kk = r % k, row = r / k;
        u64 t = row % l, bi = row / l;
        i64 s = (i64)t + (i64)kk - (i64)(k / 2);
        y[i] = (s >= 0 && s < (i64)l) ? x[(bi * l + (u64)s) * c + ch] : 0.0f;
    }
}
