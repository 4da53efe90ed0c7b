//! Arbitrary bytes as a packed safetensors file: `PackedFile` must never panic. Every packed
//! tensor it accepts must dequantize and compute a product (weight-only, and W8A8 for q8_0)
//! without panicking, with finite-or-NaN outputs of the declared shape; every error must name
//! the file.
#![no_main]

use aria_core::SafeTensorsFile;
use aria_quant::io::PackedFile;
use aria_quant::Compute;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let name = "fuzz.safetensors";
    let file = match SafeTensorsFile::from_bytes(name, data) {
        Ok(f) => f,
        Err(e) => {
            assert!(e.to_string().contains(name), "unnamed error: {e}");
            return;
        }
    };
    let packed = match PackedFile::from_file(file) {
        Ok(p) => p,
        Err(e) => {
            assert!(e.to_string().contains(name), "unnamed error: {e}");
            return;
        }
    };
    let names: Vec<String> = packed.table().keys().cloned().collect();
    for t in names {
        let m = match packed.packed(&t, None) {
            Ok(m) => m,
            Err(e) => {
                assert!(e.to_string().contains(name), "unnamed error: {e}");
                continue;
            }
        };
        let (rows, cols) = (m.rows(), m.cols());
        // Bound the work the harness itself asks for (a table may declare [2^32, 0]).
        if rows.saturating_mul(cols.max(1)) > 1 << 20 || rows > 1 << 16 {
            continue;
        }
        let d = m.dequantize_f32().expect("accepted tensor dequantizes");
        assert_eq!(d.len(), rows * cols);
        let x: Vec<f32> = (0..2 * cols).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut y = vec![0f32; 2 * rows];
        m.matmul(&x, 2, &mut y).expect("accepted tensor multiplies");
        if let Ok(w) = m.clone().with_compute(Compute::W8A8) {
            w.matmul(&x, 2, &mut y).expect("accepted q8_0 tensor runs W8A8");
        }
    }
    for t in packed.names().map(str::to_string).collect::<Vec<_>>() {
        if !packed.is_packed(&t) {
            let _ = packed.dense(&t);
        }
    }
});
