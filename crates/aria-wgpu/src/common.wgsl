// Shared definitions, prepended to every shader of the non-GEMM ops (elementwise.wgsl,
// norm.wgsl, rope.wgsl, fused.wgsl, layout.wgsl, guidance.wgsl, text.wgsl), each time with
// math.wgsl after it (see `shader!` in launch.rs).
//
// `WG` (the workgroup size, from `Knobs::elementwise`) is a constant the launch prepends.
// Parameters come in one uniform block of 64 u32 words (`pu(i)`, `pf(i)` for f32 bits);
// element offsets are in elements so that views bind whole buffers.

struct Params {
    v: array<vec4<u32>, 16>,
}

@group(0) @binding(0) var<uniform> prm: Params;

fn pu(i: u32) -> u32 {
    return prm.v[i >> 2u][i & 3u];
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(pu(i));
}

// The linear index of this invocation in a 2-D grid of 1-D workgroups of `WG` invocations
// (the host splits large dispatches over y to respect max_compute_workgroups_per_dimension).
fn linear_id(wg: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
    return (wg.y * nwg.x + wg.x) * WG + lid.x;
}

// The workgroup's index in a 2-D grid (one workgroup per row for the row kernels).
fn group_id(wg: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wg.y * nwg.x + wg.x;
}

// Decompose linear index `i` of a row-major shape stored at params `shape_at..shape_at+rank`
// and return the offset given by the strides at `stride_at..` (rank ≤ 6).
fn strided_offset(i: u32, rank: u32, shape_at: u32, stride_at: u32) -> u32 {
    var rem = i;
    var off = 0u;
    for (var k = 0u; k < rank; k = k + 1u) {
        let d = rank - 1u - k;
        let n = pu(shape_at + d);
        let c = rem % n;
        rem = rem / n;
        off = off + c * pu(stride_at + d);
    }
    return off;
}
