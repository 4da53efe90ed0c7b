//! Little-endian byte encoding shared by the indexes' `to_bytes` / `from_bytes`.

use crate::{CacheError, Result};

/// Format version of every index encoding.
pub(crate) const VERSION: u32 = 1;

#[derive(Debug, Default)]
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn header(magic: &[u8; 4]) -> Self {
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(magic);
        w.u32(VERSION);
        w
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub(crate) fn u64s(&mut self, v: &[u64]) {
        self.u64(v.len() as u64);
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }
}

#[derive(Debug)]
pub(crate) struct Reader<'a> {
    what: &'static str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Check the magic and version.
    pub(crate) fn open(what: &'static str, magic: &[u8; 4], buf: &'a [u8]) -> Result<Self> {
        let mut r = Reader { what, buf, pos: 0 };
        if r.take(4)? != magic {
            return Err(r.err("wrong magic (not this kind of index)".into()));
        }
        let v = r.u32()?;
        if v != VERSION {
            return Err(r.err(format!("format version {v}, expected {VERSION}")));
        }
        Ok(r)
    }

    pub(crate) fn err(&self, reason: String) -> CacheError {
        CacheError::Invalid {
            name: format!("{} bytes", self.what),
            reason,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(e) => {
                let s = &self.buf[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err(self.err(format!(
                "truncated: {n} bytes needed at offset {} of {}",
                self.pos,
                self.buf.len()
            ))),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    fn len_of(&mut self, elem: usize) -> Result<usize> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(elem as u64) > left {
            return Err(self.err(format!("{n} elements announced, {left} bytes left")));
        }
        Ok(n as usize)
    }

    pub(crate) fn f32s(&mut self) -> Result<Vec<f32>> {
        let n = self.len_of(4)?;
        let b = self.take(n * 4)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    pub(crate) fn u64s(&mut self) -> Result<Vec<u64>> {
        let n = self.len_of(8)?;
        let b = self.take(n * 8)?;
        Ok(b.chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_le_bytes(a)
            })
            .collect())
    }

    /// The remaining bytes (for a nested encoding).
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    pub(crate) fn finish(&self) -> Result<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(self.err(format!("{} trailing bytes", self.buf.len() - self.pos)))
        }
    }
}
