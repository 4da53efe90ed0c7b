// Gated linear units over the last dimension `[.., 2F] → [.., F]`: the first half is the value,
// the second the gate. `act` codes: 0 SwiGLU (silu), 1 GeGLU (erf gelu), 2 GeGLU (tanh gelu),
// 3 sin(π·x) gate.
extern "C" __global__ void glu_f32(const float* x, float* y, u64 rows, u64 f, int act) {
    ARIA_FOR(i, rows * f) {
        u64 r = i / f, c = i % f;
        float v = x[r * 2 * f + c], g = x[r * 2 * f + f + c], a;
        switch (act) {
            case 0: a = silu_f(g); break;
            case 1: a = gelu_f(g); break;
            case 2: a = gelu_tanh_f(g); break;
            default: a = sinf(ARIA_PI * g); break;
        }
        y[i] = v * a;
    }
}
