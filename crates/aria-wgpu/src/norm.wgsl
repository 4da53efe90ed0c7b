// Row reductions over the last dimension (`ops::rms_norm`, `ops::layer_norm`,
// `ops::softmax_last`, `ops::std_last`, `ops::rms_norm_modulate`): one workgroup of `WG`
// (a power of two) invocations per row, sums as a tree in workgroup memory.
// Bindings: 0 params, 1 the output, 2 x, 3..5 gains / biases / modulation (a prefix).

@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read> shift: array<f32>;

fn wg_max(v: f32, t: u32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            red[t] = max(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// Row sums over the `d` values of x from `base`, each invocation `t` taking every WG-th; every
// invocation of the workgroup calls them and gets the whole sum. Σ x:
fn row_sum(base: u32, d: u32, t: u32) -> f32 {
    var s = 0.0;
    for (var i = t; i < d; i = i + WG) {
        s = s + x[base + i];
    }
    return wg_sum(s, t);
}

// Σ (x − mean)² (with mean 0 it is Σ x², bit for bit: x − 0 is x):
fn row_sum_sq_dev(base: u32, d: u32, t: u32, mean: f32) -> f32 {
    var q = 0.0;
    for (var i = t; i < d; i = i + WG) {
        let c = x[base + i] - mean;
        q = q + c * c;
    }
    return wg_sum(q, t);
}

// params: 0 rows, 1 d, 2 x offset, 3 w offset, 4 has w, 5 style (0 plain, 1 one-plus), 6 eps.
@compute @workgroup_size(WG)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = group_id(wg, nwg);
    if (row >= pu(0u)) { return; }
    let d = pu(1u);
    let t = lid.x;
    let base = pu(2u) + row * d;
    let inv = 1.0 / sqrt(row_sum_sq_dev(base, d, t, 0.0) / f32(d) + pf(6u));
    for (var i = t; i < d; i = i + WG) {
        var v = x[base + i] * inv;
        let g = w[pu(3u) + i];
        if (pu(4u) != 0u) {
            v = select(v * g, v * (1.0 + g), pu(5u) != 0u);
        }
        o[row * d + i] = v;
    }
}

// params: 0 rows, 1 d, 2 x offset, 3 w offset, 4 has w, 5 b offset, 6 has b, 7 eps.
@compute @workgroup_size(WG)
fn layer_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = group_id(wg, nwg);
    if (row >= pu(0u)) { return; }
    let d = pu(1u);
    let t = lid.x;
    let base = pu(2u) + row * d;
    let mean = row_sum(base, d, t) / f32(d);
    let inv = 1.0 / sqrt(row_sum_sq_dev(base, d, t, mean) / f32(d) + pf(7u));
    for (var i = t; i < d; i = i + WG) {
        var v = (x[base + i] - mean) * inv;
        let g = w[pu(3u) + i];
        let bb = bias[pu(5u) + i];
        if (pu(4u) != 0u) { v = v * g; }
        if (pu(6u) != 0u) { v = v + bb; }
        o[row * d + i] = v;
    }
}

// params: 0 rows, 1 d, 2 x offset.
@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = group_id(wg, nwg);
    if (row >= pu(0u)) { return; }
    let d = pu(1u);
    let t = lid.x;
    let base = pu(2u) + row * d;
    var m = -bitcast<f32>(0x7f800000u);
    for (var i = t; i < d; i = i + WG) {
        m = max(m, x[base + i]);
    }
    m = wg_max(m, t);
    var s = 0.0;
    for (var i = t; i < d; i = i + WG) {
        let e = exp(x[base + i] - m);
        o[row * d + i] = e;
        s = s + e;
    }
    let inv = 1.0 / wg_sum(s, t);
    for (var i = t; i < d; i = i + WG) {
        o[row * d + i] = o[row * d + i] * inv;
    }
}

// Unbiased std per row (NaN for rows of one). params: 0 rows, 1 d, 2 x offset.
@compute @workgroup_size(WG)
fn std_last(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = group_id(wg, nwg);
    if (row >= pu(0u)) { return; }
    let d = pu(1u);
    let t = lid.x;
    let base = pu(2u) + row * d;
    let mean = row_sum(base, d, t) / f32(d);
    let q = row_sum_sq_dev(base, d, t, mean);
    if (t == 0u) {
        o[row] = select(sqrt(q / (f32(d) - 1.0)), nan_f32(), d == 1u);
    }
}

// RMSNorm with gain γ (binding 2), then `y·(1 + scale[b]) + shift[b]` (bindings 3, 4; any
// strides). params: 0 rows, 1 e, 2 x offset, 3 γ offset, 4 has modulation, 5 n (tokens per
// item), 6 eps, 7 scale offset, 8 scale stride 0, 9 scale stride 1, 10 shift offset,
// 11 shift stride 0, 12 shift stride 1.
@compute @workgroup_size(WG)
fn rms_norm_modulate(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = group_id(wg, nwg);
    if (row >= pu(0u)) { return; }
    let e = pu(1u);
    let t = lid.x;
    let base = pu(2u) + row * e;
    let inv = 1.0 / sqrt(row_sum_sq_dev(base, e, t, 0.0) / f32(e) + pf(6u));
    let item = row / pu(5u);
    for (var i = t; i < e; i = i + WG) {
        var v = x[base + i] * inv * w[pu(3u) + i];
        let sc = bias[pu(7u) + item * pu(8u) + i * pu(9u)];
        let sh = shift[pu(10u) + item * pu(11u) + i * pu(12u)];
        if (pu(4u) != 0u) {
            v = v * (1.0 + sc) + sh;
        }
        o[row * e + i] = v;
    }
}
