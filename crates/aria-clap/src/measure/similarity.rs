//! Cosine measures on pairs of embeddings: the CLAP score (text against audio) and drift
//! (audio against audio).

use super::stats::Summary;
use crate::{ClapError, Result};

/// The CLAP score of one pair: the cosine similarity of a text embedding and an audio
/// embedding, in `[-1, 1]`, computed in `f64`.
///
/// This is the raw cosine: no `× 100` and no clipping at 0 (some papers report
/// `max(100 · cos, 0)`; apply that to the result if comparing with them). The embeddings need
/// not be normalised.
///
/// Errors: empty or different lengths, a non-finite value, a zero vector.
pub fn clap_score(text: &[f32], audio: &[f32]) -> Result<f32> {
    Ok(cosine("text embedding", text, "audio embedding", audio)? as f32)
}

/// The CLAP score of each pair `(texts[i], audios[i])` (see [`clap_score`]), in `f64`.
///
/// Errors: different counts (both are named), no pairs, or any pair [`clap_score`] rejects.
pub fn clap_score_each<T: AsRef<[f32]>, A: AsRef<[f32]>>(
    texts: &[T],
    audios: &[A],
) -> Result<Vec<f64>> {
    pair_count("texts", texts.len(), "audios", audios.len())?;
    texts
        .iter()
        .zip(audios)
        .enumerate()
        .map(|(i, (t, a))| {
            cosine(
                &format!("text embedding {i}"),
                t.as_ref(),
                &format!("audio embedding {i}"),
                a.as_ref(),
            )
        })
        .collect()
}

/// [`Summary`] of the CLAP scores of the pairs `(texts[i], audios[i])` (see
/// [`clap_score_each`]); its `mean` is the set's CLAP score.
pub fn clap_scores<T: AsRef<[f32]>, A: AsRef<[f32]>>(texts: &[T], audios: &[A]) -> Result<Summary> {
    Summary::of("CLAP scores", &clap_score_each(texts, audios)?)
}

/// The drift of each pair: `1 − cos(a[i], b[i])`, in `[0, 2]` (0 for parallel embeddings), in
/// `f64`. Typical use: the same prompts and seeds rendered by two variants of a model.
///
/// Errors: different counts (both are named), no pairs, an empty, zero or non-finite embedding,
/// a pair of different dimensions.
pub fn drift_each<A: AsRef<[f32]>, B: AsRef<[f32]>>(a: &[A], b: &[B]) -> Result<Vec<f64>> {
    pair_count("a", a.len(), "b", b.len())?;
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (x, y))| {
            let c = cosine(
                &format!("embedding a[{i}]"),
                x.as_ref(),
                &format!("embedding b[{i}]"),
                y.as_ref(),
            )?;
            Ok(1.0 - c)
        })
        .collect()
}

/// [`Summary`] of the drifts `1 − cos(a[i], b[i])` of paired sets (see [`drift_each`]).
pub fn drift<A: AsRef<[f32]>, B: AsRef<[f32]>>(a: &[A], b: &[B]) -> Result<Summary> {
    Summary::of("drift", &drift_each(a, b)?)
}

fn pair_count(na: &str, a: usize, nb: &str, b: usize) -> Result<()> {
    if a != b {
        return Err(ClapError::invalid(
            "pairs",
            format!("{a} {na} but {b} {nb}: the sets must be paired one to one"),
        ));
    }
    if a == 0 {
        return Err(ClapError::invalid("pairs", "no pairs"));
    }
    Ok(())
}

/// Cosine similarity in `f64`, clamped to `[-1, 1]`.
fn cosine(na: &str, a: &[f32], nb: &str, b: &[f32]) -> Result<f64> {
    if a.is_empty() || b.is_empty() {
        return Err(ClapError::invalid(
            if a.is_empty() { na } else { nb },
            "is empty",
        ));
    }
    if a.len() != b.len() {
        return Err(ClapError::invalid(
            nb,
            format!("has dimension {} but {na} has {}", b.len(), a.len()),
        ));
    }
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        if !x.is_finite() || !y.is_finite() {
            let (name, v) = if x.is_finite() { (nb, y) } else { (na, x) };
            return Err(ClapError::invalid(
                name,
                format!("value {i} is not finite ({v})"),
            ));
        }
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    for (name, n) in [(na, aa), (nb, bb)] {
        if n == 0.0 {
            return Err(ClapError::invalid(
                name,
                "is the zero vector (no direction)",
            ));
        }
    }
    // `sqrt(aa · aa) == aa` exactly, so identical vectors give exactly 1.
    Ok((ab / (aa * bb).sqrt()).clamp(-1.0, 1.0))
}
