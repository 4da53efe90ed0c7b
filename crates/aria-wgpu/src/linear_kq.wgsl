// y = x·Wᵀ + b with W [N, K] in a k-quant format, weight-only: each row is ⌈K/256⌉ blocks of
// 256 weights in the format's own bit layout (the same bytes as the CPU's blocks), a q6_k
// block padded from 210 to 212 bytes so that every block starts on a word. A weight split over
// several buffers runs once per buffer into its column range.
//
// One invocation per output. Each weight is dequantized exactly as the format's reference
// does it in f32 (q4_k: (d·sc)·q − dmin·m per 32 weights, q in 0..15; q6_k: (d·sc)·(q − 32)
// per 16 weights, q in 0..63) and its product with x added to the sum in K order. The bias
// is added last. x is f32 [M, K], read as words.
// Constants: FORMAT (0: q4_k, 36 words a block; 1: q6_k, 53 words a block).

struct Params {
    m: u32,
    n: u32,
    k: u32,
    has_bias: u32,
    x_off: u32,
    w_off: u32,
    b_off: u32,
    ldy: u32,
    y_col: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// Byte `i` of the block starting at word `base`.
fn byte_at(base: u32, i: u32) -> u32 {
    return (w[base + i / 4u] >> (8u * (i % 4u))) & 0xFFu;
}

@compute @workgroup_size(64, 1, 1)
fn linear_kq(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    let row = gid.y;
    if (col >= p.n || row >= p.m) {
        return;
    }
    let nb = (p.k + 255u) / 256u;
    var bw = 36u;
    if (FORMAT == 1u) {
        bw = 53u;
    }
    let wrow = p.w_off + col * nb * bw;
    let xrow = p.x_off + row * p.k;
    var acc = 0.0;
    for (var bi = 0u; bi < nb; bi = bi + 1u) {
        let wb = wrow + bi * bw;
        let k0 = bi * 256u;
        if (FORMAT == 0u) {
            // d, dmin (f16), scales[12], qs[128].
            let dm = unpack2x16float(w[wb]);
            for (var j = 0u; j < 8u; j = j + 1u) {
                var sc = 0u;
                var mn = 0u;
                if (j < 4u) {
                    sc = byte_at(wb, 4u + j) & 63u;
                    mn = byte_at(wb, 8u + j) & 63u;
                } else {
                    sc = (byte_at(wb, 8u + j) & 0xFu) | ((byte_at(wb, j) >> 6u) << 4u);
                    mn = (byte_at(wb, 8u + j) >> 4u) | ((byte_at(wb, 4u + j) >> 6u) << 4u);
                }
                let d1 = dm.x * f32(sc);
                let m1 = dm.y * f32(mn);
                let shift = 4u * (j % 2u);
                for (var l = 0u; l < 32u; l = l + 1u) {
                    let i = k0 + 32u * j + l;
                    if (i < p.k) {
                        let q = (byte_at(wb, 16u + 32u * (j / 2u) + l) >> shift) & 0xFu;
                        acc = acc + bitcast<f32>(x[xrow + i]) * (d1 * f32(q) - m1);
                    }
                }
            }
        } else {
            // ql[128], qh[64], scales[16] (i8), d (f16), 2 bytes of padding.
            let d = unpack2x16float(w[wb + 52u]).x;
            for (var h = 0u; h < 2u; h = h + 1u) {
                for (var part = 0u; part < 4u; part = part + 1u) {
                    for (var l = 0u; l < 32u; l = l + 1u) {
                        let e = 128u * h + 32u * part + l;
                        let i = k0 + e;
                        if (i < p.k) {
                            var lo = byte_at(wb, 64u * h + 32u * (part % 2u) + l);
                            if (part < 2u) {
                                lo = lo & 0xFu;
                            } else {
                                lo = lo >> 4u;
                            }
                            let hi = (byte_at(wb, 128u + 32u * h + l) >> (2u * part)) & 3u;
                            let q = i32(lo | (hi << 4u)) - 32;
                            let sc = bitcast<i32>(byte_at(wb, 192u + e / 16u) << 24u) >> 24u;
                            let d1 = d * f32(sc);
                            acc = acc + bitcast<f32>(x[xrow + i]) * (d1 * f32(q));
                        }
                    }
                }
            }
        }
    }
    if (p.has_bias != 0u) {
        acc = acc + b[p.b_off + col];
    }
    y[row * p.ldy + p.y_col + col] = acc;
}
