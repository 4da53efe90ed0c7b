//! Weights packed at load, moved out of the heap: each matrix is quantized in turn and written
//! to an unlinked temporary safetensors file, which is then memory-mapped. The packed weights
//! are borrowed from that mapping exactly as from a pre-quantized folder, so the stages of a
//! run can release their pages ([`aria_core::Tensor::release_pages`]) and the decoder does not
//! run next to a resident DiT. The heap holds one packed matrix at a time.
//!
//! The file lives in the system temporary folder (`TMPDIR`); on a RAM-backed temporary folder
//! its pages stay in memory, only outside the process's resident set.

use std::io::Write;
use std::path::{Path, PathBuf};

use aria_core::{SafeTensorsFile, Tensor};
use aria_quant::{Format, PackedMatrix};

use super::qerr;
use crate::{Error, Result};

/// One matrix to pack: checkpoint key, dense `[out, in]` weight, format.
pub(super) struct Job {
    pub key: String,
    pub weight: Tensor,
    pub format: Format,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A fresh path in `dir` for this process (unique across threads by a counter).
fn spill_path(dir: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    dir.join(format!(
        ".aria-packed-{}-{n}-{nanos}.safetensors",
        std::process::id()
    ))
}

/// The safetensors header of the packed matrices of `jobs` (U8 `[rows, row_bytes]` each, in
/// order), padded to 8 bytes.
fn header(jobs: &[Job]) -> Result<Vec<u8>> {
    let mut map = serde_json::Map::new();
    let mut off = 0usize;
    for j in jobs {
        let [rows, cols] = shape2(j)?;
        let rb = j.format.row_bytes(cols);
        let end = off + rows * rb;
        map.insert(
            j.key.clone(),
            serde_json::json!({"dtype": "U8", "shape": [rows, rb], "data_offsets": [off, end]}),
        );
        off = end;
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(map))
        .map_err(|e| Error::Input(format!("packed spill header: {e}")))?;
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    Ok(h)
}

fn shape2(j: &Job) -> Result<[usize; 2]> {
    match j.weight.shape() {
        [o, i] => Ok([*o, *i]),
        s => Err(Error::Input(format!(
            "`{}` has shape {s:?}; a packed weight is [out, in]",
            j.key
        ))),
    }
}

/// Quantize every job into one temporary file in `dir` and return the packed matrices,
/// borrowed from its mapping, in order. `done(i)` runs once job `i` is written (to release
/// the pages of its dense weight). The file is unlinked once mapped: nothing is left behind.
pub(super) fn pack(
    jobs: &[Job],
    dir: &Path,
    done: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<Vec<PackedMatrix>> {
    let path = spill_path(dir);
    let written = write(jobs, &path, done);
    let mapped = written.and_then(|()| SafeTensorsFile::open(&path).map_err(Error::from));
    // Unlinked at once: the mapping keeps the data; the space is freed when it goes.
    let _ = std::fs::remove_file(&path);
    let file = mapped?;
    jobs.iter()
        .map(|j| {
            let [rows, cols] = shape2(j)?;
            let t = file.tensor(&j.key)?;
            PackedMatrix::from_tensor(j.format, rows, cols, t).map_err(qerr)
        })
        .collect()
}

fn write(jobs: &[Job], path: &Path, done: &mut dyn FnMut(usize) -> Result<()>) -> Result<()> {
    let h = header(jobs)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err(path))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    w.write_all(&(h.len() as u64).to_le_bytes())
        .and_then(|()| w.write_all(&h))
        .map_err(io_err(path))?;
    for (i, j) in jobs.iter().enumerate() {
        let m = PackedMatrix::quantize(&j.key, &j.weight, j.format).map_err(qerr)?;
        w.write_all(m.data().as_bytes()?).map_err(io_err(path))?;
        drop(m);
        done(i)?;
    }
    w.flush().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilled_matrices_are_the_bytes_packed_in_memory_and_leave_no_file() {
        let dir = std::env::temp_dir().join(format!("aria-spill-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut jobs = Vec::new();
        for (n, (rows, cols, format)) in [
            (3usize, 64usize, Format::Q8_0),
            (5, 256, Format::Q4K),
            (2, 512, Format::Q6K),
        ]
        .into_iter()
        .enumerate()
        {
            let v: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919 + n * 13) % 1000) as f32 / 250.0 - 2.0)
                .collect();
            jobs.push(Job {
                key: format!("m{n}.weight"),
                weight: Tensor::from_vec(v, &[rows, cols]).unwrap(),
                format,
            });
        }
        let mut done = Vec::new();
        let got = pack(&jobs, &dir, &mut |i| {
            done.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(done, vec![0, 1, 2]);
        for (j, m) in jobs.iter().zip(&got) {
            let want = PackedMatrix::quantize(&j.key, &j.weight, j.format).unwrap();
            assert_eq!(m.format(), j.format);
            assert_eq!(
                m.data().as_bytes().unwrap(),
                want.data().as_bytes().unwrap(),
                "{}",
                j.key
            );
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "file left");
        std::fs::remove_dir(&dir).unwrap();
    }
}
