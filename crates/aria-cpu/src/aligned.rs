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
