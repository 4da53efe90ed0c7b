//! # aria-steer
//!
//! **Status: planned; nothing is implemented yet.** Activation steering for the SA3 DiT, built
//! on the activation-hook trait of `aria-core` (it never reaches into model internals):
//!
//! - direction files (one vector per site/block);
//! - a steering hook at the DiT residual stream after block *i*, on the latent between steps, or
//!   on the text conditioning; `add` or `project` modes; an optional step span; strength in units
//!   of the mean residual norm, strength 0 bit-identical to no steering;
//! - residual capture and difference-in-means extraction of directions from prompt pairs.
