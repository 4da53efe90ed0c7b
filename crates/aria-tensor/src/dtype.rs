//! Element types.

use half::{bf16, f16};

/// The element type of a [`Tensor`](crate::Tensor).
///
/// `F32`, `F16` and `BF16` are the floating-point types models compute with (16-bit types are
/// storage only on the CPU: kernels widen to f32). `I8`/`U8` hold packed or quantized data and
/// masks, `I64` holds token ids as the reference fixtures store them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// Signed bytes (packed / quantized data).
    I8,
    /// Unsigned bytes (packed data, boolean masks).
    U8,
    /// 64-bit signed integers (token ids).
    I64,
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 => 1,
            DType::I64 => 8,
        }
    }

    /// Whether the dtype is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// The name safetensors uses for this dtype.
    pub const fn safetensors_name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I8 => "I8",
            DType::U8 => "U8",
            DType::I64 => "I64",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.safetensors_name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be the element of a CPU tensor.
pub trait Elem:
    sealed::Sealed + bytemuck::Pod + Copy + Send + Sync + 'static + std::fmt::Debug
{
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Widen to f32 (integers are converted by value).
    fn to_f32(self) -> f32;
    /// Narrow from f32 (round to nearest even for floats; integers truncate toward zero and
    /// saturate, NaN becomes 0, as Rust's `as` and PyTorch's `.to(int)` do).
    fn from_f32(v: f32) -> Self;
}

macro_rules! elem {
    ($t:ty, $d:expr, |$x:ident| $to:expr, |$y:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Elem for $t {
            const DTYPE: DType = $d;
            #[inline(always)]
            fn to_f32(self) -> f32 {
                let $x = self;
                $to
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                let $y = v;
                $from
            }
        }
    };
}

elem!(f32, DType::F32, |x| x, |y| y);
elem!(f16, DType::F16, |x| x.to_f32(), |y| f16::from_f32(y));
elem!(bf16, DType::BF16, |x| x.to_f32(), |y| bf16::from_f32(y));
elem!(i8, DType::I8, |x| x as f32, |y| y as i8);
elem!(u8, DType::U8, |x| x as f32, |y| y as u8);
elem!(i64, DType::I64, |x| x as f32, |y| y as i64);
