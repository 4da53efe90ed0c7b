//! The command-line form of a steering:
//! `FILE[:site=residual|latent|text][:block=K][:strength=A][:steps=LO-HI][:op=add|project][:scale=norm|raw]`.
//!
//! `FILE` may itself contain `:` (`C:\dirs\x.safetensors`): the file name ends at the first `:`
//! that starts a `key=` option. Steps are 0-based and inclusive.

use std::path::PathBuf;

use crate::direction::{DirectionFile, Site, StrengthConvention};
use crate::hook::{Scale, SteerOp, Steering, SteeringHook, StepSpan};
use crate::identity::ModelIdentity;
use crate::{Result, SteerError};

/// The option keys a spec accepts.
pub const KEYS: &[&str] = &["site", "block", "strength", "steps", "op", "scale"];

/// A site name without its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// `residual`.
    Residual,
    /// `latent`.
    Latent,
    /// `text`.
    Text,
}

/// A parsed steering spec (options not given are `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct SteerSpec {
    /// The direction file.
    pub path: PathBuf,
    /// `site=`.
    pub site: Option<SiteKind>,
    /// `block=`.
    pub block: Option<usize>,
    /// `strength=`.
    pub strength: Option<f32>,
    /// `steps=LO-HI`.
    pub steps: Option<StepSpan>,
    /// `op=`.
    pub op: Option<SteerOp>,
    /// `scale=`.
    pub scale: Option<Scale>,
}

fn starts_option(rest: &str) -> bool {
    KEYS.iter()
        .any(|k| rest.strip_prefix(k).is_some_and(|r| r.starts_with('=')))
}

impl SteerSpec {
    /// Parse `FILE[:key=value]...`.
    pub fn parse(spec: &str) -> Result<Self> {
        let err = |reason: String| SteerError::Spec {
            spec: spec.to_string(),
            reason,
        };
        let split = spec
            .match_indices(':')
            .map(|(i, _)| i)
            .find(|&i| starts_option(&spec[i + 1..]));
        let (file, opts) = match split {
            Some(i) => (&spec[..i], &spec[i + 1..]),
            None => (spec, ""),
        };
        if file.is_empty() {
            return Err(err("no direction file before the options".into()));
        }
        let mut out = SteerSpec {
            path: PathBuf::from(file),
            site: None,
            block: None,
            strength: None,
            steps: None,
            op: None,
            scale: None,
        };
        if opts.is_empty() {
            return Ok(out);
        }
        let mut seen: Vec<&str> = Vec::new();
        for part in opts.split(':') {
            let Some((key, value)) = part.split_once('=') else {
                return Err(err(format!(
                    "option `{part}` is not key=value (keys: {})",
                    KEYS.join(", ")
                )));
            };
            if !KEYS.contains(&key) {
                return Err(err(format!(
                    "unknown option `{key}` (keys: {})",
                    KEYS.join(", ")
                )));
            }
            if seen.contains(&key) {
                return Err(err(format!("option `{key}` is given twice")));
            }
            seen.push(key);
            match key {
                "site" => {
                    out.site = Some(match value {
                        "residual" => SiteKind::Residual,
                        "latent" => SiteKind::Latent,
                        "text" => SiteKind::Text,
                        v => {
                            return Err(err(format!(
                                "site `{v}` is not one of residual, latent, text"
                            )))
                        }
                    })
                }
                "block" => {
                    out.block = Some(value.parse().map_err(|_| {
                        err(format!("block `{value}` is not a block index (0, 1, …)"))
                    })?)
                }
                "strength" => {
                    let a: f32 = value
                        .parse()
                        .map_err(|_| err(format!("strength `{value}` is not a number")))?;
                    if !a.is_finite() {
                        return Err(err(format!("strength `{value}` is not finite")));
                    }
                    out.strength = Some(a);
                }
                "steps" => {
                    let bad = || {
                        err(format!(
                            "steps `{value}` is not LO-HI (e.g. 2-5, 0-based, inclusive)"
                        ))
                    };
                    let (lo, hi) = value.split_once('-').ok_or_else(bad)?;
                    let lo: usize = lo.parse().map_err(|_| bad())?;
                    let hi: usize = hi.parse().map_err(|_| bad())?;
                    if lo > hi {
                        return Err(err(format!("steps `{value}`: LO is after HI")));
                    }
                    out.steps = Some(StepSpan { lo, hi });
                }
                "op" => {
                    out.op = Some(match value {
                        "add" => SteerOp::Add,
                        "project" => SteerOp::Project,
                        v => return Err(err(format!("op `{v}` is not add or project"))),
                    })
                }
                "scale" => {
                    out.scale = Some(match value {
                        "norm" => Scale::MeanNorm,
                        "raw" => Scale::Raw,
                        v => return Err(err(format!("scale `{v}` is not norm or raw"))),
                    })
                }
                _ => unreachable_key(key)?,
            }
        }
        if out.block.is_some() && matches!(out.site, Some(SiteKind::Latent | SiteKind::Text)) {
            return Err(err("block= applies to the residual site only".into()));
        }
        Ok(out)
    }

    /// The steering this spec selects from `file`: the site and block given, else the file's
    /// only entry, else its best block (probe report), else its first entry; the strength given,
    /// else the file's default, else an error; op `add` and the file's strength convention
    /// unless given.
    pub fn resolve(&self, file: &DirectionFile) -> Result<Steering> {
        let err = |reason: String| SteerError::Spec {
            spec: self.path.display().to_string(),
            reason,
        };
        let site = match (self.site, self.block) {
            (Some(SiteKind::Latent), _) => Some(Site::Latent),
            (Some(SiteKind::Text), _) => Some(Site::Text),
            (_, Some(k)) => Some(Site::Residual(k)),
            (Some(SiteKind::Residual), None) => {
                let res: Vec<Site> = file
                    .entries
                    .iter()
                    .map(|e| e.site)
                    .filter(|s| matches!(s, Site::Residual(_)))
                    .collect();
                match (res.as_slice(), file.meta.best_block) {
                    ([one], _) => Some(*one),
                    (_, Some(b)) => Some(Site::Residual(b)),
                    ([first, ..], None) => Some(*first),
                    ([], None) => None,
                }
            }
            (None, None) => match (file.entries.as_slice(), file.meta.best_block) {
                ([one], _) => Some(one.site),
                (_, Some(b)) => Some(Site::Residual(b)),
                (entries, None) => entries.first().map(|e| e.site),
            },
        };
        let site = site.ok_or_else(|| err("the file holds no residual direction".into()))?;
        let entry = file.entry(site).ok_or_else(|| {
            let have: Vec<String> = file.entries.iter().map(|e| e.site.to_string()).collect();
            err(format!(
                "the file holds no {site} direction (it has: {})",
                have.join(", ")
            ))
        })?;
        let strength = self
            .strength
            .or(file.meta.default_strength)
            .ok_or_else(|| err("no strength= given and the file states no default".into()))?;
        let scale = self.scale.unwrap_or(match file.meta.strength_convention {
            StrengthConvention::MeanNorm => Scale::MeanNorm,
            StrengthConvention::Raw => Scale::Raw,
        });
        Steering::from_entry(entry, self.op.unwrap_or(SteerOp::Add), strength)?
            .with_scale(scale)
            .with_steps(self.steps)
    }
}

/// Load the direction file of every spec (checked against `model`; `force` overrides the
/// model-identity check only) and resolve it into one hook, steerings in spec order.
pub fn hook_from_specs(
    specs: &[SteerSpec],
    model: &ModelIdentity,
    force: bool,
) -> Result<SteeringHook> {
    let mut hook = SteeringHook::new();
    for s in specs {
        let file = DirectionFile::load_for(&s.path, model, force)?;
        hook.push(s.resolve(&file)?);
    }
    Ok(hook)
}

fn unreachable_key(key: &str) -> Result<()> {
    Err(SteerError::Invalid(format!(
        "option `{key}` is not handled"
    )))
}
