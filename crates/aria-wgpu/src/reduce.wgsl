// A tree sum over one workgroup of `WG` invocations (a power of two), shared by the row
// kernels (norm.wgsl, fused.wgsl, guidance.wgsl; after common.wgsl and math.wgsl). Every
// invocation of the workgroup must call it, in uniform control flow.

var<workgroup> red: array<f32, WG>;

fn wg_sum(v: f32, t: u32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            red[t] = red[t] + red[t + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

