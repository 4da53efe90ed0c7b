//! Releasing the pages of a memory-mapped tensor: the resident copy goes, the bytes stay
//! readable (faulted in from the file again), and in-memory files release nothing.
#![allow(clippy::unwrap_used)]

use aria_core::{save_safetensors, SafeTensorsFile, Tensor, WeightLoader};
use aria_testing::TempDir;

/// The process's resident file-backed bytes (`RssFile`), where the platform reports it.
fn rss_file() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("RssFile:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[test]
fn released_pages_leave_the_resident_set_and_read_back_the_same() {
    let dir = TempDir::new("release");
    let path = dir.join("w.safetensors");
    let n = 8 << 20; // 32 MiB of f32
    let v: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let small = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let big = Tensor::from_vec(v.clone(), &[n / 1024, 1024]).unwrap();
    save_safetensors(&path, &[("big", &big), ("small", &small)], None).unwrap();
    drop(big);

    let w = WeightLoader::open(&[&path]).unwrap();
    let t = w.get_any("big").unwrap();
    assert!(t.is_mapped());
    let sum: f64 = t.as_slice::<f32>().unwrap().iter().map(|x| *x as f64).sum();
    let before = rss_file();
    let released = w.release("big").unwrap();
    let after = rss_file();
    if cfg!(unix) {
        assert!(released >= (n * 4) - (64 << 10), "released {released}");
    }
    if let (Some(b), Some(a)) = (before, after) {
        assert!(
            a + (released as u64) / 2 <= b,
            "RssFile {b} -> {a} after releasing {released} bytes"
        );
    }
    // The tensor still reads the same bytes (from the file again).
    let again: f64 = t.as_slice::<f32>().unwrap().iter().map(|x| *x as f64).sum();
    assert_eq!(sum.to_bits(), again.to_bits());
    assert_eq!(t.to_vec::<f32>().unwrap(), v);
    assert_eq!(
        w.get_any("small").unwrap().to_vec::<f32>().unwrap(),
        [1.0, 2.0, 3.0]
    );
    assert!(w.release("missing").is_err());

    // The same through the tensor itself (what layers and models use), on a view too.
    let _ = t
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .map(|x| *x as f64)
        .sum::<f64>();
    let view = t.narrow(0, 3, 5).unwrap();
    let before = rss_file();
    let released = view.release_pages().unwrap();
    let after = rss_file();
    if cfg!(unix) {
        // The whole mapped region the view lies in goes.
        assert!(released >= (n * 4) - (64 << 10), "released {released}");
    }
    if let (Some(b), Some(a)) = (before, after) {
        assert!(
            a + (released as u64) / 2 <= b,
            "RssFile {b} -> {a} (tensor release)"
        );
    }
    assert_eq!(t.to_vec::<f32>().unwrap(), v);
    assert_eq!(view.to_vec::<f32>().unwrap(), v[3 * 1024..8 * 1024]);
    // Owned tensors release nothing and keep their values.
    assert_eq!(small.release_pages().unwrap(), 0);
    assert_eq!(small.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);

    // An in-memory file has no file to read its bytes from: nothing is released.
    let bytes = std::fs::read(&path).unwrap();
    let mem = SafeTensorsFile::from_bytes("mem", &bytes).unwrap();
    assert_eq!(mem.release("big").unwrap(), 0);
    let mt = mem.tensor("big").unwrap();
    assert!(mt.is_mapped());
    assert_eq!(mt.release_pages().unwrap(), 0);
    assert_eq!(mt.to_vec::<f32>().unwrap(), v);
}
