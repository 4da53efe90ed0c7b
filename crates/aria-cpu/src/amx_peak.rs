//! The AMX tile unit's peak, for benchmarks: a loop of tile products on operands that stay in
//! the tile registers (no load or store inside the loop), the rate every tile kernel here is
//! measured against. Four independent accumulator tiles keep the unit's pipeline full.
//!
//! One `tdpbf16ps` is 16 × 16 × 32 bf16 multiply-adds (16 384 flops); one `tdpbssd` is
//! 16 × 16 × 64 int8 multiply-adds (32 768 ops).

/// Which tile product the probe runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileOp {
    /// `tdpbf16ps`: bf16 pairs into f32 (AMX-BF16).
    Bf16,
    /// `tdpbssd`: signed int8 quadruples into int32 (AMX-INT8).
    Int8,
}

impl TileOp {
    /// Flops (bf16) or integer ops (int8) of one loop iteration: four tile products, two per
    /// multiply-add.
    pub fn ops_per_iter(self) -> f64 {
        let k = match self {
            TileOp::Bf16 => 32.0,
            TileOp::Int8 => 64.0,
        };
        4.0 * 16.0 * 16.0 * k * 2.0
    }

    /// The instruction's name.
    pub fn name(self) -> &'static str {
        match self {
            TileOp::Bf16 => "tdpbf16ps",
            TileOp::Int8 => "tdpbssd",
        }
    }
}

/// Whether this CPU and OS run `op` on the tile unit (CPUID, and the tile state granted).
pub fn available(op: TileOp) -> bool {
    if !super::amx::available() {
        return false;
    }
    match op {
        TileOp::Bf16 => true,
        TileOp::Int8 => {
            // CPUID leaf 7, sub-leaf 0: EDX bit 25 is AMX-INT8 (leaf 7 exists: AMX-BF16 is
            // reported there).
            std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << 25) != 0
        }
    }
}

/// Run `iters` iterations of four independent `op` tile products on this thread; returns a
/// value of the results (so the work cannot be elided), or `None` where [`available`] does not
/// hold. `iters` of zero runs nothing.
pub fn run(op: TileOp, iters: usize) -> Option<f32> {
    if !available(op) {
        return None;
    }
    if iters == 0 {
        return Some(0.0);
    }
    #[repr(C, align(64))]
    struct Block([u8; 1024]);
    // Small operands (bf16 1/64 pairs, or int8 ones): the sums stay finite and exact.
    let src = match op {
        TileOp::Bf16 => Block(std::array::from_fn(
            |i| if i % 2 == 0 { 0x80 } else { 0x3c },
        )),
        TileOp::Int8 => Block([1; 1024]),
    };
    let mut out = Block([0; 1024]);
    let _tiles = super::amx::Tiles::configure();
    // The loop, with the tile product `$ins` (the operands and counter of the caller).
    macro_rules! probe {
        ($ins:literal) => {
            std::arch::asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "tileloadd tmm4, [{s} + {st}*1]",
                "tileloadd tmm5, [{s} + {st}*1]",
                "tileloadd tmm6, [{s} + {st}*1]",
                "tileloadd tmm7, [{s} + {st}*1]",
                "2:",
                concat!($ins, " tmm0, tmm4, tmm6"),
                concat!($ins, " tmm1, tmm4, tmm7"),
                concat!($ins, " tmm2, tmm5, tmm6"),
                concat!($ins, " tmm3, tmm5, tmm7"),
                "dec {n}",
                "jnz 2b",
                "tilestored [{o} + {st}*1], tmm0",
                n = inout(reg) iters => _,
                s = in(reg) src.0.as_ptr(),
                o = in(reg) out.0.as_mut_ptr(),
                st = in(reg) 64usize,
                options(nostack),
            )
        };
    }
    // SAFETY: the tile unit is available and granted (`available`), the tiles are configured
    // (`_tiles`: 8 tiles of 16 rows × 64 bytes); the loads read the 1 KiB `src` (16 rows of
    // 64 bytes at stride 64), the store writes the 1 KiB `out`; `iters > 0`.
    unsafe {
        match op {
            TileOp::Bf16 => probe!("tdpbf16ps"),
            TileOp::Int8 => probe!("tdpbssd"),
        }
    }
    let first = [out.0[0], out.0[1], out.0[2], out.0[3]];
    Some(match op {
        TileOp::Bf16 => f32::from_le_bytes(first),
        TileOp::Int8 => i32::from_le_bytes(first) as f32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe computes what it claims: after `n` iterations the first output is `n` times
    /// one tile product's sum (bf16: 16 pairs, 32 products of (1/64)²; int8: 64 products of ones).
    /// Under `CI=true` a CPU whose CPUID reports the tile unit must get it from the OS.
    #[test]
    fn the_probe_accumulates_its_products() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !(ci && crate::bf16dot::amx_in_cpuid() && !crate::bf16dot::amx_available()),
            "CPUID reports AMX but the OS refused the tile data state; the probe must run under CI=true"
        );
        for op in [TileOp::Bf16, TileOp::Int8] {
            let Some(v) = run(op, 3) else {
                aria_testing::skip_for_hardware(format!(
                    "this CPU (or OS) has no `{}` tile product",
                    op.name()
                ));
                continue;
            };
            let one = match op {
                TileOp::Bf16 => 32.0 / 4096.0,
                TileOp::Int8 => 64.0,
            };
            assert_eq!(v, 3.0 * one, "{}", op.name());
        }
    }
}
