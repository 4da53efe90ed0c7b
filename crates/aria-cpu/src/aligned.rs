//! Zero-initialised `u32` buffers whose first element starts a cache line.
//!
//! The AMX unit loads tiles as 16 rows of 64 bytes: a row that straddles two cache lines is a
//! split load, and a buffer from the allocator starts only 16 bytes into a line. Panels and
//! packed operands of the tile products live in these buffers so that every tile row is one line.

/// A `[u32]` of fixed length whose element 0 is 64-byte aligned.
pub struct LineAligned {
    buf: Vec<u32>,
    off: usize,
    len: usize,
}

/// `u32` elements per 64-byte line.
const LINE: usize = 16;

impl LineAligned {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> LineAligned {
        let buf = vec![0u32; len + LINE - 1];
        // `align_offset` counts elements; a `u32` pointer reaches a 64-byte boundary within 16.
        let off = buf.as_ptr().align_offset(64).min(LINE - 1);
        LineAligned { buf, off, len }
    }
}

impl std::ops::Deref for LineAligned {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.buf[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for LineAligned {
    fn deref_mut(&mut self) -> &mut [u32] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

impl Clone for LineAligned {
    fn clone(&self) -> LineAligned {
        let mut c = LineAligned::zeroed(self.len);
        c.copy_from_slice(self);
        c
    }
}

/// A host `U8` tensor of `shape` (`4 · words` bytes) whose first byte starts a cache line,
/// its bytes written as `u32` words by `fill` (zeros before): a kernel layout that a tensor
/// carries through the op set (the tensor is a view into a slightly larger buffer).
pub fn line_aligned_tensor(
    words: usize,
    shape: &[usize],
    fill: impl FnOnce(&mut [u32]),
) -> aria_tensor::Result<aria_tensor::Tensor> {
    use aria_tensor::storage::CpuData;
    use aria_tensor::{DType, Storage, Tensor};
    let bytes = words * 4;
    let mut buf = vec![0u8; bytes + 63];
    let off = buf.as_ptr().align_offset(64).min(63);
    if let Ok(w) = bytemuck::try_cast_slice_mut::<u8, u32>(&mut buf[off..off + bytes]) {
        fill(w);
    }
    let strides = aria_tensor::contiguous_strides(shape);
    Tensor::from_storage(
        std::sync::Arc::new(Storage::Cpu(CpuData::U8(buf))),
        DType::U8,
        shape.to_vec(),
        strides,
        off,
    )
}

/// The bytes of a contiguous host `U8` tensor as `u32` words (`None` for another tensor, or
/// bytes that do not start on a 4-byte boundary).
pub fn words(t: &aria_tensor::Tensor) -> Option<&[u32]> {
    if t.dtype() != aria_tensor::DType::U8 || !t.is_contiguous() {
        return None;
    }
    bytemuck::try_cast_slice(t.as_bytes().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_a_line_and_holds_zeros() {
        for len in [0, 1, 15, 16, 17, 1000, 4096] {
            let b = LineAligned::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                assert_eq!(b.as_ptr() as usize % 64, 0, "len {len}");
            }
            let mut c = b.clone();
            if len > 0 {
                c[len - 1] = 7;
                assert_eq!(c.as_ptr() as usize % 64, 0);
                assert_eq!(b[len - 1], 0);
            }
        }
    }
}
