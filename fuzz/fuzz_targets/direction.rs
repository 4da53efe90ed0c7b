//! Arbitrary bytes as a steering direction file (a safetensors file with `aria.steer`
//! metadata), read as `DirectionFile::load` reads it.
//!
//! Properties: no panic; every error names the file; an accepted file holds one entry per
//! metadata entry, in order, each a finite unit direction of the length its tensor declares
//! with a finite, non-negative mean norm, and it survives a save / load round trip.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use aria_core::SafeTensorsFile;
use aria_steer::DirectionFile;
use libfuzzer_sys::fuzz_target;

fn temp() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!(
            "aria-fuzz-direction-{}.safetensors",
            std::process::id()
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let name = "fuzz.safetensors";
    let path = Path::new(name);
    let st = match SafeTensorsFile::from_bytes(name, data) {
        Ok(st) => st,
        Err(e) => {
            assert!(e.to_string().contains(name), "unnamed error: {e}");
            return;
        }
    };
    let f = match DirectionFile::from_safetensors(path, &st) {
        Ok(f) => f,
        Err(e) => {
            assert!(e.to_string().contains(name), "unnamed error: {e}");
            return;
        }
    };
    assert_eq!(f.entries.len(), f.meta.entries.len());
    for (e, site) in f.entries.iter().zip(&f.meta.entries) {
        assert_eq!(e.site, *site);
        let info = &st.tensors()[&format!("{}.direction", site.stem())];
        assert_eq!(info.shape, [e.direction.len()], "declared shape");
        assert!(!e.direction.is_empty(), "empty direction accepted");
        assert!(e.direction.iter().all(|x| x.is_finite()), "non-finite");
        let n = e
            .direction
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((n - 1.0).abs() <= 1e-3, "norm {n}");
        assert!(e.mean_norm.is_finite() && e.mean_norm >= 0.0);
    }
    f.save(temp()).expect("an accepted file saves");
    let back = DirectionFile::load(temp()).expect("a saved file loads");
    assert_eq!(back, f, "save / load round trip");
});
