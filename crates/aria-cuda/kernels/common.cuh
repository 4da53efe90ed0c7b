// Shared definitions, prepended to every kernel source before NVRTC compiles it. No system
// headers: NVRTC needs nothing beyond its built-ins, so CI can compile without a CUDA toolkit.
// Half-precision values are carried as raw 16-bit patterns and converted with PTX `cvt`.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define ARIA_MAX_RANK 6

// Shape and strides (in elements) of up to six dimensions, passed by value.
struct Strides6 {
    u32 rank;
    u32 pad_;
    u64 shape[ARIA_MAX_RANK];
    i64 src[ARIA_MAX_RANK];
    i64 dst[ARIA_MAX_RANK];
};

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf2f(u16 h) {
    return __uint_as_float(((u32)h) << 16);
}
// Round to nearest even (NaN kept quiet), the same rounding as `half::bf16::from_f32`.
__device__ __forceinline__ u16 f2bf(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (u16)((x >> 16) | 0x0040u);
    }
    u32 lsb = (x >> 16) & 1u;
    return (u16)((x + 0x7fffu + lsb) >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum (blockDim.x a multiple of 32, at most 1024). `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nw) ? scratch[threadIdx.x] : 0.0f;
    if (w == 0) v = warp_sum(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    float r = scratch[0];
    __syncthreads();
    return r;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nw) ? scratch[threadIdx.x] : -__int_as_float(0x7f800000);
    if (w == 0) v = warp_max(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    float r = scratch[0];
    __syncthreads();
    return r;
}

// Grid-stride loop over `n` elements.
#define ARIA_FOR(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); \
         i += (u64)blockDim.x * gridDim.x)

// The reference's constants.
#define ARIA_PI 3.14159265358979323846f
#define ARIA_SQRT_2_OVER_PI 0.7978846f
#define ARIA_FRAC_1_SQRT_2 0.70710678118654752440f
#define ARIA_NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }
__device__ __forceinline__ float sigmoid_f(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float gelu_f(float v) {
    return 0.5f * v * (1.0f + erff(v * ARIA_FRAC_1_SQRT_2));
}
__device__ __forceinline__ float gelu_tanh_f(float v) {
    return 0.5f * v * (1.0f + tanhf(ARIA_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v)));
}
