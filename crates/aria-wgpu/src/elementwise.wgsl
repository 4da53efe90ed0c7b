// Elementwise ops of f32 tensors (`ops::elementwise`, `ops::axpby`, `ops::dyt`): one invocation
// per output element, inputs contiguous at element offsets unless strides are given.
// Bindings: 0 params (common.wgsl), 1 the output, 2.. the inputs (each entry uses a prefix).

@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read> c: array<f32>;

// Activation codes: 0 silu, 1 sigmoid, 2 tanh, 3 sin(π·x), 4 gelu (erf), 5 gelu (tanh).
fn act(code: u32, v: f32) -> f32 {
    var r: f32;
    switch code {
        case 0u: { r = silu_f(v); }
        case 1u: { r = sigmoid_f(v); }
        case 2u: { r = tanh_f(v); }
        case 3u: { r = sin_f(PI_F32 * v); }
        case 4u: { r = gelu_f(v); }
        default: { r = gelu_tanh_f(v); }
    }
    return r;
}

// params: 0 n, 1 x offset, 2 activation code.
@compute @workgroup_size(WG)
fn unary(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    o[i] = act(pu(2u), a[pu(1u) + i]);
}

// `x·s` (params 3 == 0) or `x·a + b` (3 == 1). params: 0 n, 1 x offset, 4 a (s), 5 b.
@compute @workgroup_size(WG)
fn affine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let v = a[pu(1u) + i] * pf(4u);
    o[i] = select(v, v + pf(5u), pu(3u) != 0u);
}

// GLU over rows of 2F: `value ⊙ act(gate)`. params: 0 n (rows·F), 1 x offset, 2 act code
// (0 silu, 4 gelu, 5 gelu tanh, 3 sin π), 3 F.
@compute @workgroup_size(WG)
fn glu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let f = pu(3u);
    let r = i / f;
    let col = i % f;
    let base = pu(1u) + r * 2u * f;
    o[i] = a[base + col] * act(pu(2u), a[base + f + col]);
}

// Broadcasting `a ∘ b` over the bound output buffer, whose first element is element `pu(23)`
// of the whole output; only elements whose operands lie in the bound buffers' elements
// (a: `pu(24)..pu(25)`, b: `pu(26)..pu(27)`) are written (operands past one binding are
// bound one buffer at a time). params: 0 n (of this buffer), 1 rank, 2 op (0 add, 1 sub,
// 2 mul, 3 div), 3 a offset, 4..9 output shape, 10..15 strides of a, 16..21 strides of b
// (0 on broadcast dims), 22 b offset.
@compute @workgroup_size(WG)
fn binary(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let il = linear_id(wg, nwg, lid);
    if (il >= pu(0u)) { return; }
    let i = il + pu(23u);
    let rank = pu(1u);
    let ea = pu(3u) + strided_offset(i, rank, 4u, 10u);
    let eb = pu(22u) + strided_offset(i, rank, 4u, 16u);
    if (ea < pu(24u) || ea >= pu(25u) || eb < pu(26u) || eb >= pu(27u)) { return; }
    let u = a[ea - pu(24u)];
    let v = b[eb - pu(26u)];
    var r: f32;
    switch pu(2u) {
        case 0u: { r = u + v; }
        case 1u: { r = u - v; }
        case 2u: { r = u * v; }
        default: { r = u / v; }
    }
    o[il] = r;
}

// `a[i]·x + b[i]·y` for batch item i = index / per; coefficients `c = [a_0.., b_0..]`.
// params: 0 n, 1 per, 2 x offset, 3 y offset, 4 items, 5 the bound buffers' first element
// (past one binding).
@compute @workgroup_size(WG)
fn axpby(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let item = (i + pu(5u)) / pu(1u);
    o[i] = c[item] * a[pu(2u) + i] + c[pu(4u) + item] * b[pu(3u) + i];
}

// Dynamic tanh `γ ⊙ tanh(α·x) + β` over rows of d. params: 0 n, 1 x offset, 2 d, 3 α,
// 4 γ offset, 5 β offset.
@compute @workgroup_size(WG)
fn dyt(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let col = i % pu(2u);
    o[i] = b[pu(4u) + col] * tanh_f(pf(3u) * a[pu(1u) + i]) + c[pu(5u) + col];
}
