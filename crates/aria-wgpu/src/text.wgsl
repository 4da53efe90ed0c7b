// Ops of the conditioning (`ops::fourier_features`, `ops::fill_masked_rows`).
// Bindings: 0 params, 1 the output, 2.. the inputs (a prefix).

@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read> c: array<f32>;

// `values [N]` (a), `freqs [F]` (b) → `[N, 2F]` (layout 0: cos, sin) or `[N, 2F + 1]`
// (layout 1: value, sin, cos), `a_k = ((v·f_k)·2)·π` in f32. One invocation per (row, k) of
// `N·max(F, 1)`. params: 0 N·max(F,1), 1 F, 2 layout, 3 values offset, 4 freqs offset.
@compute @workgroup_size(WG)
fn fourier_features(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let f = pu(1u);
    let lay = pu(2u);
    let per = max(f, 1u);
    let row = i / per;
    let k = i % per;
    let v = a[pu(3u) + row];
    let dim = 2u * f + lay;
    let base = row * dim;
    if (lay == 1u && k == 0u) {
        o[base] = v;
    }
    if (f == 0u) { return; }
    let ang = ((v * b[pu(4u) + k]) * 2.0) * PI_F32;
    let sc = sincos_f(ang);
    if (lay == 1u) {
        o[base + 1u + k] = sc.x;
        o[base + 1u + f + k] = sc.y;
    } else {
        o[base + k] = sc.y;
        o[base + f + k] = sc.x;
    }
}

// Rows of `x [rows, d]` (a) whose mask (b, f32 0/1) is 0 become `fill [d]` (c) or zeros.
// params: 0 rows·d, 1 d, 2 x offset, 3 mask offset, 4 has fill, 5 fill offset.
@compute @workgroup_size(WG)
fn fill_masked_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let d = pu(1u);
    let r = i / d;
    let fv = select(0.0, c[pu(5u) + i % d], pu(4u) != 0u);
    o[i] = select(a[pu(2u) + i], fv, b[pu(3u) + r] == 0.0);
}
