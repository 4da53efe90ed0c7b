//! The `include` / `exclude` layer filters of `lora_config`: module-name substrings with
//! bracket ranges (`layers.[0-3]` stands for `layers.0` … `layers.3`, `[3-1]` counts down).

/// The names a filter pattern stands for (its bracket ranges expanded, all combinations).
pub fn expand(pattern: &str) -> Vec<String> {
    // Split into literal pieces and `[a-b]` ranges.
    let mut lits: Vec<String> = vec![String::new()];
    let mut pools: Vec<Vec<String>> = Vec::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let range = after.find(']').and_then(|close| {
            let (a, b) = after[..close].split_once('-')?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            if !digits(a) || !digits(b) {
                return None;
            }
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?, close))
        });
        let last = lits.len() - 1;
        match range {
            Some((a, b, close)) => {
                lits[last].push_str(&rest[..open]);
                let pool: Vec<String> = if b >= a {
                    (a..=b).map(|n| n.to_string()).collect()
                } else {
                    (b..=a).rev().map(|n| n.to_string()).collect()
                };
                pools.push(pool);
                lits.push(String::new());
                rest = &after[close + 1..];
            }
            None => {
                lits[last].push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    let last = lits.len() - 1;
    lits[last].push_str(rest);
    let mut out = vec![lits[0].clone()];
    for (pool, lit) in pools.iter().zip(&lits[1..]) {
        out = out
            .iter()
            .flat_map(|prefix| pool.iter().map(move |n| format!("{prefix}{n}{lit}")))
            .collect();
    }
    out
}

/// Whether `name` contains any (expanded, trimmed) pattern; `false` for no patterns.
pub fn matches_any(name: &str, patterns: &[String]) -> bool {
    patterns
        .iter()
        .any(|p| expand(p.trim()).iter().any(|e| name.contains(e.as_str())))
}

/// Whether a module passes `include` (when given, it must match one) and `exclude` (it must
/// match none), as the official loader decides which layers get an adapter.
pub fn selected(name: &str, include: Option<&[String]>, exclude: Option<&[String]>) -> bool {
    include.is_none_or(|inc| matches_any(name, inc))
        && !exclude.is_some_and(|exc| matches_any(name, exc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_expand() {
        assert_eq!(expand("layers.[0-0].cross_attn"), ["layers.0.cross_attn"]);
        assert_eq!(expand("a[1-3]b"), ["a1b", "a2b", "a3b"]);
        assert_eq!(expand("a[2-1]b[0-1]"), ["a2b0", "a2b1", "a1b0", "a1b1"]);
        assert_eq!(expand("x[a-b]y"), ["x[a-b]y"]);
        assert_eq!(expand("plain"), ["plain"]);
    }

    #[test]
    fn include_exclude() {
        let inc = vec!["transformer.layers".to_string()];
        let exc = vec![
            "to_local_embed".to_string(),
            "layers.[0-0].cross_attn".into(),
        ];
        let sel = |n: &str| selected(n, Some(&inc), Some(&exc));
        assert!(sel("model.transformer.layers.1.cross_attn.to_q"));
        assert!(!sel("model.transformer.layers.0.cross_attn.to_q"));
        assert!(!sel("model.transformer.layers.1.to_local_embed.0"));
        assert!(!sel("model.to_timestep_embed.0"));
        assert!(selected("anything", None, None));
        assert!(!selected("anything", Some(&[]), None));
    }
}
