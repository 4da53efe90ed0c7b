//! The gater inside [`crate::Cache`] (`SkipPolicy::Gated`): its context from the selector's
//! choice, the quality of a result and the saved state.

use std::time::{Duration, Instant};

use super::{Context, Decision, DefaultQuality, Gater, GaterConfig, QualityInput, QualityScore};
use crate::select::Selection;
use crate::store::Audio;
use crate::warm::{Request, SkipPolicy};
use crate::{Embedder, Result, Store};

/// A [`Gater`] as the cache runs it: with its [`QualityScore`] and the embedder's name (the
/// state's store key).
pub struct Serving {
    gater: Gater,
    quality: Box<dyn QualityScore>,
    embedder: String,
    /// Whether the embedder has an audio side (learned on the first result).
    audio_side: Option<bool>,
    /// Time of the last decision and update (with the save).
    pub(crate) last: Duration,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("updates", &self.gater.updates())
            .field("quality", &self.quality.name())
            .field("embedder", &self.embedder)
            .finish_non_exhaustive()
    }
}

impl Serving {
    /// The gater for `policy` (`None` unless it is `Gated`), loaded from `store` when saved
    /// there for `embedder`.
    pub fn open(
        policy: &SkipPolicy,
        store: &dyn Store,
        embedder: &dyn Embedder,
    ) -> Result<Option<Serving>> {
        let SkipPolicy::Gated(cfg) = policy else {
            return Ok(None);
        };
        Ok(Some(Serving::with_gater(
            Gater::load(store, embedder.name(), embedder.dim(), *cfg)?,
            embedder.name(),
        )))
    }

    /// Wraps `gater` for embedder `name`, with [`DefaultQuality`].
    pub fn with_gater(gater: Gater, embedder: &str) -> Serving {
        Serving {
            gater,
            quality: Box::new(DefaultQuality),
            embedder: embedder.into(),
            audio_side: None,
            last: Duration::ZERO,
        }
    }

    /// The gater.
    pub fn gater(&self) -> &Gater {
        &self.gater
    }

    /// The gater, e.g. to [`Gater::train_offline`] it (then [`Self::save`]).
    pub fn gater_mut(&mut self) -> &mut Gater {
        &mut self.gater
    }

    /// Replaces the quality score (e.g. a CLAP score, or user feedback).
    pub fn set_quality(&mut self, q: Box<dyn QualityScore>) {
        self.quality = q;
    }

    /// Takes new run-time parameters ([`Gater::reconfigure`]).
    pub fn reconfigure(&mut self, cfg: GaterConfig) -> Result<()> {
        self.gater.reconfigure(cfg)
    }

    /// Saves the state in `store`.
    pub fn save(&self, store: &mut dyn Store) -> Result<()> {
        self.gater.save(store, &self.embedder)
    }

    /// The decision for `req` warm-started from the selector's choice.
    pub fn decide(&mut self, query: &[f32], sel: &Selection, req: &Request) -> Result<Decision> {
        let t0 = Instant::now();
        let c = sel.chosen();
        let ctx = Context {
            prompt: query.to_vec(),
            s_pos: c.candidate.s_pos,
            s_neg: c.candidate.s_neg,
            q: c.q,
            duration_ratio: c.candidate.duration / req.seconds,
            steps: req.steps,
        };
        let d = self.gater.decide(&ctx);
        self.last = t0.elapsed();
        d
    }

    /// Scores the result of `d` (the result's audio embedding against the prompt where the
    /// embedder has an audio side, else the proxy), updates the gater and saves it; returns
    /// `(Q, r)`.
    #[allow(clippy::too_many_arguments)]
    pub fn learn(
        &mut self,
        d: &Decision,
        store: &mut dyn Store,
        embedder: &dyn Embedder,
        query: &[f32],
        audio: &Audio,
        s_pos: f32,
        sigma_start: f32,
    ) -> Result<(f64, f64)> {
        let t0 = Instant::now();
        let mut emb = None;
        if self.audio_side != Some(false) {
            let interleaved = audio.interleaved(0..audio.frames());
            emb = embedder.embed_audio(&interleaved, audio.channels, audio.sample_rate)?;
            self.audio_side = Some(emb.is_some());
        }
        let q = self.quality.score(&QualityInput {
            prompt: query,
            audio: emb.as_deref(),
            s_pos,
            sigma_start,
        })?;
        let r = self.gater.update(d, q)?;
        self.save(store)?;
        self.last += t0.elapsed();
        Ok((q, r))
    }

    /// Time of the last decision plus its update and save.
    pub fn last_time(&self) -> Duration {
        self.last
    }
}
