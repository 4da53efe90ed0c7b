// Ops of the SAME autoencoder's transformer blocks.

// Projection `part` of `x [B, N, parts·H·Dh]` as heads `[B, H, N, Dh]`: each head row DyT-normed
// (`γ ⊙ tanh(α·x) + β`, `gamma` null for none) and then rotate-half RoPE on its first `r`
// dims (`cos`, `sin` `[≥N, r]`, null for none). One thread per output element.
__device__ __forceinline__ float qkv_norm(float v, float alpha, const float* g, const float* b,
                                          u64 i) {
    return g ? g[i] * tanhf(alpha * v) + b[i] : v;
}

extern "C" __global__ void qkv_heads_f32(const float* x, const float* gamma, const float* beta,
                                         const float* cos_t, const float* sin_t, float* y,
                                         u64 b, u64 n, u64 parts, u64 part, u64 heads, u64 dh,
                                         float alpha, u64 r) {
    const u64 d = heads * dh;
    ARIA_FOR(idx, b * heads * n * dh) {
        u64 i = idx % dh, rest = idx / dh;
        u64 t = rest % n, bh = rest / n;
        u64 hh = bh % heads, bi = bh / heads;
        const float* src = x + (bi * n + t) * parts * d + part * d + hh * dh;
        float v = qkv_norm(src[i], alpha, gamma, beta, i);
        if (cos_t && i < r) {
            u64 half = r / 2;
            const float* c = cos_t + t * r;
            const float* s = sin_t + t * r;
            if (i < half) {
                float o = qkv_norm(src[i + half], alpha, gamma, beta, i + half);
                v = v * c[i] - o * s[i];
            } else {
                float a = qkv_norm(src[i - half], alpha, gamma, beta, i - half);
                v = v * c[i] + a * s[i];
            }
        }
        y[idx] = v;
    }
}

// Rotary tables for positions `pos0 .. pos0 + n`: `[2, n, 2F]` (cos, then sin, of
// `[p·f ; p·f]`), angles in f32.
extern "C" __global__ void rope_table_f32(const float* inv_freq, float* y, u64 f, u64 pos0,
                                          u64 n) {
    const u64 r = 2 * f;
    ARIA_FOR(idx, n * f) {
        u64 i = idx % f, t = idx / f;
        float a = (float)(pos0 + t) * inv_freq[i];
        float s, c;
        sincosf(a, &s, &c);
        y[t * r + i] = c;
        y[t * r + i + f] = c;
        y[n * r + t * r + i] = s;
        y[n * r + t * r + i + f] = s;
    }
}
