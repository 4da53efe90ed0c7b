//! Noise sources: the sampler asks for one Gaussian tensor per ping-pong step (the initial
//! state is drawn by the caller first), in that order, as the reference draws them. The trait
//! and the sources are those of [`aria_core::noise`], shared with the autoencoder:
//! [`TorchNoise`] reproduces `torch.manual_seed(seed)` + `torch.randn`, [`SeededNoise`] is
//! aria's own portable generator, [`ReplayNoise`] yields stored draws (e.g. recorded from the
//! reference) in order.

pub use aria_core::noise::{NoiseSource, ReplayNoise, SeededNoise, TorchNoise};

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use aria_core::Tensor;

    #[test]
    fn replay_checks_shapes() {
        let mut r = ReplayNoise::new(vec![Tensor::zeros(&[1, 2], aria_core::DType::F32)]);
        assert!(r.draw(&[2, 1], "step 0").is_err());
        let mut r = ReplayNoise::new(vec![Tensor::zeros(&[1, 2], aria_core::DType::F32)]);
        assert!(r.draw(&[1, 2], "step 0").is_ok());
        let e = r.draw(&[1, 2], "step 1").unwrap_err().to_string();
        assert!(e.contains("step 1"), "{e}");
    }
}
