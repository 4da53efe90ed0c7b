// Elementwise ops of one or two f32 tensors, strided copies and dtype conversions.

// `f` codes: 0 silu, 1 sigmoid, 2 tanh, 3 sin(pi x), 4 gelu (erf), 5 gelu (tanh).
extern "C" __global__ void unary_f32(const float* x, float* y, u64 n, int f) {
    ARIA_FOR(i, n) {
        float v = x[i], r;
        switch (f) {
            case 0: r = silu_f(v); break;
            case 1: r = sigmoid_f(v); break;
            case 2: r = tanhf(v); break;
            case 3: r = sinf(ARIA_PI * v); break;
            case 4: r = gelu_f(v); break;
            default: r = gelu_tanh_f(v); break;
        }
        y[i] = r;
    }
}

// `y = x·a + b` (mul_scalar: b = 0; add_scalar: a = 1).
extern "C" __global__ void affine_f32(const float* x, float* y, u64 n, float a, float b) {
    ARIA_FOR(i, n) { y[i] = x[i] * a + b; }
}

// `y = a ∘ b` with broadcasting: `st.shape` is the output shape, `st.src` the strides of `a`
// and `st.dst` those of `b` (0 on broadcast dimensions); the output is contiguous.
// `f` codes: 0 add, 1 sub, 2 mul, 3 div.
extern "C" __global__ void binary_f32(const float* a, const float* b, float* y, u64 n,
                                      Strides6 st, int f) {
    ARIA_FOR(i, n) {
        u64 rem = i;
        i64 oa = 0, ob = 0;
        for (int d = (int)st.rank - 1; d >= 0; --d) {
            u64 c = rem % st.shape[d];
            rem /= st.shape[d];
            oa += (i64)c * st.src[d];
            ob += (i64)c * st.dst[d];
        }
        float u = a[oa], v = b[ob], r;
        switch (f) {
            case 0: r = u + v; break;
            case 1: r = u - v; break;
            case 2: r = u * v; break;
            default: r = u / v; break;
        }
        y[i] = r;
    }
}

// Element offsets of linear index `i` of `st.shape` in the source and destination layouts.
__device__ __forceinline__ void strided_offsets(const Strides6& st, u64 i, i64* os, i64* od) {
    u64 rem = i;
    i64 s = 0, d = 0;
    for (int k = (int)st.rank - 1; k >= 0; --k) {
        u64 c = rem % st.shape[k];
        rem /= st.shape[k];
        s += (i64)c * st.src[k];
        d += (i64)c * st.dst[k];
    }
    *os = s;
    *od = d;
}

// Copy a strided view into a strided destination (contiguous, a slot of a concatenation, the
// interior of a padded tensor), for 4-, 2- and 1-byte elements.
extern "C" __global__ void strided_copy_b32(const u32* x, u32* y, u64 n, Strides6 st) {
    ARIA_FOR(i, n) {
        i64 s, d;
        strided_offsets(st, i, &s, &d);
        y[d] = x[s];
    }
}
extern "C" __global__ void strided_copy_b16(const u16* x, u16* y, u64 n, Strides6 st) {
    ARIA_FOR(i, n) {
        i64 s, d;
        strided_offsets(st, i, &s, &d);
        y[d] = x[s];
    }
}
extern "C" __global__ void strided_copy_b8(const unsigned char* x, unsigned char* y, u64 n,
                                           Strides6 st) {
    ARIA_FOR(i, n) {
        i64 s, d;
        strided_offsets(st, i, &s, &d);
        y[d] = x[s];
    }
}
extern "C" __global__ void strided_copy_b64(const u64* x, u64* y, u64 n, Strides6 st) {
    ARIA_FOR(i, n) {
        i64 s, d;
        strided_offsets(st, i, &s, &d);
        y[d] = x[s];
    }
}

// Dtype conversions (contiguous).
extern "C" __global__ void f16_to_f32(const u16* x, float* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = h2f(x[i]); }
}
extern "C" __global__ void bf16_to_f32(const u16* x, float* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = bf2f(x[i]); }
}
extern "C" __global__ void f32_to_f16(const float* x, u16* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = f2h(x[i]); }
}
extern "C" __global__ void f32_to_bf16(const float* x, u16* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = f2bf(x[i]); }
}
extern "C" __global__ void i8_to_f32(const signed char* x, float* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = (float)x[i]; }
}
extern "C" __global__ void u8_to_f32(const unsigned char* x, float* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = (float)x[i]; }
}
extern "C" __global__ void i64_to_f32(const i64* x, float* y, u64 n) {
    ARIA_FOR(i, n) { y[i] = (float)x[i]; }
}

// `y[r, c] += b[c]` over `rows × cols` (linear bias), or `y[r, c] += b[r % period]` when
// `per_row` (conv bias over `[B, Cout, L]` rows).
extern "C" __global__ void add_bias_f32(float* y, const float* b, u64 rows, u64 cols,
                                        u64 period, int per_row) {
    ARIA_FOR(i, rows * cols) {
        u64 r = i / cols, c = i % cols;
        y[i] += per_row ? b[r % period] : b[c];
    }
}

// `y_i = a[b]·x_i + c[b]·z_i` with the scalars of batch item `b = i / per_item` read from
// device memory (a sampler update inside a captured graph reads its coefficients there).
extern "C" __global__ void axpby_f32(const float* a, const float* x, const float* c,
                                     const float* z, float* y, u64 n, u64 per_item) {
    ARIA_FOR(i, n) {
        u64 b = i / per_item;
        y[i] = a[b] * x[i] + c[b] * z[i];
    }
}
