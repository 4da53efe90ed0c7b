//! The random choices of the feature extractor, behind a trait so that a run is reproducible
//! (a seeded generator) or replays the choices a reference run made ([`Replay`]).

use crate::{ClapError, Result};

/// Which random choice is being made. The reference (numpy's global generator) makes them in
/// this order per batch: for each clip in turn, [`Draw::CropOffset`] (`rand_trunc`, long clip)
/// or [`Draw::FusionFront`], [`Draw::FusionMiddle`], [`Draw::FusionBack`] (`fusion`, long
/// clip); then, in `fusion` mode when no clip of the batch is long, one
/// [`Draw::LongerClip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// Start sample of the `rand_trunc` crop (`np.random.randint(0, overflow + 1)`).
    CropOffset,
    /// Start frame of the crop from the first third of the valid starts (`np.random.choice`).
    FusionFront,
    /// Start frame of the crop from the middle third.
    FusionMiddle,
    /// Start frame of the crop from the last third.
    FusionBack,
    /// The clip flagged as longer when none of a `fusion` batch is (`np.random.randint(0, B)`).
    LongerClip,
}

impl Draw {
    /// A short description for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Draw::CropOffset => "rand_trunc crop offset",
            Draw::FusionFront => "fusion front crop start",
            Draw::FusionMiddle => "fusion middle crop start",
            Draw::FusionBack => "fusion back crop start",
            Draw::LongerClip => "clip flagged as longer",
        }
    }
}

/// A source of the extractor's random choices.
pub trait Draws {
    /// An integer in `low..=high` (`low ≤ high`) for the choice `what`. Every choice the
    /// reference makes with numpy is one call, even when `low == high`.
    fn draw(&mut self, what: Draw, low: usize, high: usize) -> Result<usize>;
}

/// A small deterministic generator: SplitMix64 (Steele, Lea and Flood's 64-bit mixer over a
/// Weyl sequence), bounded without bias by Lemire's multiply-and-reject. The same seed gives
/// the same choices on every platform; it does not reproduce numpy's stream.
#[derive(Debug, Clone)]
pub struct SeededDraws {
    state: u64,
}

impl SeededDraws {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        SeededDraws { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..span` (`span ≥ 1`).
    fn below(&mut self, span: u64) -> u64 {
        let threshold = span.wrapping_neg() % span;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(span);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

impl Default for SeededDraws {
    /// Seed 0.
    fn default() -> Self {
        SeededDraws::new(0)
    }
}

impl Draws for SeededDraws {
    fn draw(&mut self, what: Draw, low: usize, high: usize) -> Result<usize> {
        if low > high {
            return Err(ClapError::invalid(
                what.describe(),
                format!("empty range {low}..={high}"),
            ));
        }
        let span = (high - low) as u64;
        if span == u64::MAX {
            return Ok(low.wrapping_add(self.next_u64() as usize));
        }
        Ok(low + self.below(span + 1) as usize)
    }
}

/// Replays recorded choices in order (each must lie in the range asked for); running out or a
/// value out of range is an error naming the choice.
#[derive(Debug, Clone)]
pub struct Replay {
    values: Vec<usize>,
    next: usize,
}

impl Replay {
    /// Replays `values` in order.
    pub fn new(values: impl Into<Vec<usize>>) -> Self {
        Replay {
            values: values.into(),
            next: 0,
        }
    }

    /// Replays recorded integers (as numpy writes them: `int64`); negative values are an error.
    pub fn from_i64(values: &[i64]) -> Result<Self> {
        let v = values
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                usize::try_from(x)
                    .map_err(|_| ClapError::invalid("replayed draws", format!("value {i} is {x}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Replay::new(v))
    }

    /// Values not used yet.
    pub fn remaining(&self) -> usize {
        self.values.len() - self.next
    }
}

impl Draws for Replay {
    fn draw(&mut self, what: Draw, low: usize, high: usize) -> Result<usize> {
        let i = self.next;
        let v = *self.values.get(i).ok_or_else(|| {
            ClapError::invalid(
                "replayed draws",
                format!(
                    "{} needed draw {i}, but only {} were recorded",
                    what.describe(),
                    self.values.len()
                ),
            )
        })?;
        if !(low..=high).contains(&v) {
            return Err(ClapError::invalid(
                "replayed draws",
                format!(
                    "draw {i} ({}) is {v}, outside {low}..={high}",
                    what.describe()
                ),
            ));
        }
        self.next += 1;
        Ok(v)
    }
}
