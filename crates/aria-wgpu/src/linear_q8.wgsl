// y = x·Wᵀ + b with W [N, K] packed as q8_0 in this backend's layout: each row is ⌈K/32⌉ blocks
// of 9 words, the block's scale as f32 bits, then its 32 int8 weights 4 to a word (low byte
// first). A weight split over several buffers runs once per buffer into its column range.
//
// One invocation per output. Weight-only (W8A8 = 0): x is f32 [M, K] (read as words) and each
// block adds d·Σ x·q (the products summed in K order) to the row's accumulator. W8A8 = 1: x
// holds the activations quantized per row by quantize_rows.wgsl ([M, 1 + ⌈K/32⌉·8] words: the
// row's scale, then int8 values 4 to a word, zero-padded); each block's Σ q_x·q is an exact i32 and adds
// d·Σ, and the row's scale multiplies the sum. The bias is added last.
// Constants: W8A8 (0 or 1).

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

// Signed byte `j` (0..3) of a word.
fn sbyte(v: u32, j: u32) -> i32 {
    return bitcast<i32>(v << (24u - 8u * j)) >> 24u;
}

@compute @workgroup_size(64, 1, 1)
fn linear_q8(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    let row = gid.y;
    if (col >= p.n || row >= p.m) {
        return;
    }
    let nb = (p.k + 31u) / 32u;
    let wrow = p.w_off + col * nb * 9u;
    var acc = 0.0;
    if (W8A8 == 0u) {
        let xrow = p.x_off + row * p.k;
        for (var bi = 0u; bi < nb; bi = bi + 1u) {
            let wb = wrow + bi * 9u;
            let d = bitcast<f32>(w[wb]);
            var dot = 0.0;
            for (var j = 0u; j < 8u; j = j + 1u) {
                let word = w[wb + 1u + j];
                let xb = xrow + bi * 32u + j * 4u;
                for (var t = 0u; t < 4u; t = t + 1u) {
                    // The padding of the last block is not read.
                    if (bi * 32u + j * 4u + t < p.k) {
                        dot = dot + bitcast<f32>(x[xb + t]) * f32(sbyte(word, t));
                    }
                }
            }
            acc = acc + d * dot;
        }
    } else {
        let xrow = p.x_off + row * (1u + nb * 8u);
        let s = bitcast<f32>(x[xrow]);
        for (var bi = 0u; bi < nb; bi = bi + 1u) {
            let wb = wrow + bi * 9u;
            let d = bitcast<f32>(w[wb]);
            var isum = 0i;
            for (var j = 0u; j < 8u; j = j + 1u) {
                let word = w[wb + 1u + j];
                let a = x[xrow + 1u + bi * 8u + j];
                for (var t = 0u; t < 4u; t = t + 1u) {
                    isum = isum + sbyte(a, t) * sbyte(word, t);
                }
            }
            acc = acc + d * f32(isum);
        }
        acc = acc * s;
    }
    if (p.has_bias != 0u) {
        acc = acc + b[p.b_off + col];
    }
    y[row * p.ldy + p.y_col + col] = acc;
}
