// Classifier-free guidance with the APG projection and the norm clamp (`ops::apg_guidance`):
// one workgroup per batch item of `x, v_cond, v_uncond [B, C, T]`. The CPU accumulates the
// norms and the dot product in f64; WGSL has no f64, so each invocation accumulates its share
// in f32 with compensation (Kahan) and the shares meet in a tree.
// Bindings: 0 params, 1 the output, 2 x, 3 v_cond, 4 v_uncond, 5 sigma [B], 6 mask [B, T] (f32).

@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read> xs: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read> vu: array<f32>;
@group(0) @binding(5) var<storage, read> sig: array<f32>;
@group(0) @binding(6) var<storage, read> mk: array<f32>;

// params: 0 items, 1 c, 2 t, 3 cfg, 4 apg, 5 threshold, 6 masked, 7 x offset, 8 v_cond offset,
// 9 v_uncond offset, 10 mask offset.
fn mval(bi: u32, i: u32) -> f32 {
    if (pu(6u) == 0u) { return 1.0; }
    return select(0.0, 1.0, mk[pu(10u) + bi * pu(2u) + i % pu(2u)] != 0.0);
}

@compute @workgroup_size(WG)
fn apg_guidance(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let bi = group_id(wg, nwg);
    if (bi >= pu(0u)) { return; }
    let per = pu(1u) * pu(2u);
    let tid = lid.x;
    let s = sig[bi];
    let xo = pu(7u) + bi * per;
    let co = pu(8u) + bi * per;
    let uo = pu(9u) + bi * per;
    let masked = pu(6u) != 0u;
    let cfg = pf(3u);
    let apg = pf(4u);
    let thr = pf(5u);
    // Pass 1: |Δ ⊙ m|² and |v1|² (v1 = d_c ⊙ m, or d_c without a mask).
    var nd = 0.0;
    var ndc = 0.0;
    var nv = 0.0;
    var nvc = 0.0;
    for (var i = tid; i < per; i = i + WG) {
        let m = mval(bi, i);
        let dc = xs[xo + i] - vc[co + i] * s;
        let du = xs[xo + i] - vu[uo + i] * s;
        let a = (dc - du) * m;
        let ya = a * a - ndc;
        let ta = nd + ya;
        ndc = (ta - nd) - ya;
        nd = ta;
        let b = select(dc, dc * m, masked);
        let yb = b * b - nvc;
        let tb = nv + yb;
        nvc = (tb - nv) - yb;
        nv = tb;
    }
    let ndt = wg_sum(nd, tid);
    let nvt = wg_sum(nv, tid);
    var fclamp = 1.0;
    if (thr > 0.0) {
        fclamp = min(thr / sqrt(ndt), 1.0);
    }
    let norm_v1 = max(sqrt(nvt), select(1e-12, 1e-8, masked));
    // Pass 2: the projection of the clamped difference on v1 / |v1|.
    var dp = 0.0;
    var dpc = 0.0;
    for (var i = tid; i < per; i = i + WG) {
        let m = mval(bi, i);
        let dc = xs[xo + i] - vc[co + i] * s;
        let du = xs[xo + i] - vu[uo + i] * s;
        let diff = (dc - du) * fclamp;
        let v1 = select(dc, dc * m, masked) / norm_v1;
        let y = diff * v1 - dpc;
        let tt = dp + y;
        dpc = (tt - dp) - y;
        dp = tt;
    }
    let fdot = wg_sum(dp, tid);
    // Pass 3: the guided output.
    for (var i = tid; i < per; i = i + WG) {
        let m = mval(bi, i);
        let dc = xs[xo + i] - vc[co + i] * s;
        let du = xs[xo + i] - vu[uo + i] * s;
        let diff = (dc - du) * fclamp;
        var used = diff;
        if (apg != 0.0) {
            let v1 = select(dc, dc * m, masked) / norm_v1;
            let orth = select(diff - fdot * v1, (diff - fdot * v1) * m, masked);
            used = select(apg * orth + (1.0 - apg) * diff, orth, apg == 1.0);
        }
        let d = dc + (cfg - 1.0) * used;
        o[bi * per + i] = (xs[xo + i] - d) / s;
    }
}

// CFG rescale (`ops::cfg_rescale`): one invocation per (item, position) of `v, v_cond [B, C, T]`
// (bindings 2 and 3), `φ·v·(std_c(v_cond)/std_c(v)) + (1 − φ)·v` with unbiased standard
// deviations over the channels, each from its mean in a second pass, in f32 (the CPU sums in
// f64). params: 0 B·T, 1 c, 2 t, 3 φ, 4 v offset, 5 v_cond offset.
@compute @workgroup_size(WG)
fn cfg_rescale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = linear_id(wg, nwg, lid);
    if (r >= pu(0u)) { return; }
    let c = pu(1u);
    let t = pu(2u);
    let phi = pf(3u);
    let base = (r / t) * c * t + r % t;
    let vo = pu(4u) + base;
    let co = pu(5u) + base;
    var mv = 0.0;
    var mc = 0.0;
    for (var k = 0u; k < c; k = k + 1u) {
        mv = mv + xs[vo + k * t];
        mc = mc + vc[co + k * t];
    }
    mv = mv / f32(c);
    mc = mc / f32(c);
    var sv = 0.0;
    var sc = 0.0;
    for (var k = 0u; k < c; k = k + 1u) {
        let dv = xs[vo + k * t] - mv;
        let dc = vc[co + k * t] - mc;
        sv = sv + dv * dv;
        sc = sc + dc * dc;
    }
    let n1 = f32(c) - 1.0;
    let ratio = sqrt(sc / n1) / sqrt(sv / n1);
    for (var k = 0u; k < c; k = k + 1u) {
        let x = xs[vo + k * t];
        o[base + k * t] = phi * (x * ratio) + (1.0 - phi) * x;
    }
}
