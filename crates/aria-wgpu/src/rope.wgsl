// Rotary embedding (`ops::rope`, rotate-hf on the first R dims) and rotary tables at
// absolute positions (`ops::rope_table`). One invocation per output element.
// Bindings: 0 params, 1 the output, 2 x (or inv_freq), 3 cos, 4 sin.

@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> ct: array<f32>;
@group(0) @binding(4) var<storage, read> st: array<f32>;

// params: 0 total, 1 n (positions), 2 d, 3 r, 4 x offset, 5 cos offset, 6 sin offset.
@compute @workgroup_size(WG)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let d = pu(2u);
    let r = pu(3u);
    let row = i / d;
    let c = i % d;
    let p = row % pu(1u);
    let xr = pu(4u) + row * d;
    let hf = r / 2u;
    let cr = pu(5u) + p * r;
    let sr = pu(6u) + p * r;
    var v = x[xr + c];
    if (c < hf) {
        v = x[xr + c] * ct[cr + c] - x[xr + c + hf] * st[sr + c];
    } else if (c < r) {
        v = x[xr + c] * ct[cr + c] + x[xr + c - hf] * st[sr + c];
    }
    o[i] = v;
}

// `[2, n, 2F]`: cos then sin of `(pos0 + t)·f_i` (angles in f32). params: 0 n·F, 1 F, 2 pos0,
// 3 n, 4 inv_freq offset.
@compute @workgroup_size(WG)
fn rope_table(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = linear_id(wg, nwg, lid);
    if (idx >= pu(0u)) { return; }
    let f = pu(1u);
    let n = pu(3u);
    let i = idx % f;
    let t = idx / f;
    let r = 2u * f;
    let a = f32(pu(2u) + t) * x[pu(4u) + i];
    let sc = sincos_f(a);
    o[t * r + i] = sc.y;
    o[t * r + i + f] = sc.y;
    o[n * r + t * r + i] = sc.x;
    o[n * r + t * r + i + f] = sc.x;
}
