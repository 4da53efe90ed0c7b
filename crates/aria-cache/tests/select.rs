//! The reference selector against hand-computed cases of eq. 1 and 2 and the sampling rule.
#![allow(clippy::unwrap_used)]

use aria_cache::select::{score, select, Candidate, SelectorConfig, SplitMix64};

fn cand(id: u64, s_pos: f32, s_neg: f32, duration: f64) -> Candidate {
    Candidate {
        id,
        s_pos,
        s_neg,
        duration,
        segment: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// max s_pos = 0.8, max (1 − s_neg) = 0.9; L = 10 s, so the gate is [5, 15].
fn four() -> Vec<Candidate> {
    vec![
        cand(10, 0.8, 0.2, 10.0),  // a = 1,    b = 0.8/0.9,  q = 0.8889
        cand(11, 0.76, 0.4, 15.0), // a = 0.95, b = 0.6/0.9,  q = 0.6667 (gate edge, inside)
        cand(12, 0.4, 0.1, 5.0),   // a = 0.5,  b = 1,        q = 0.5 (gate edge, inside)
        cand(13, 0.8, 0.1, 15.01), // a = 1,    b = 1, but d outside [5, 15]: q = 0
    ]
}

fn cfg(theta_q: f32, tau: f32) -> SelectorConfig {
    SelectorConfig {
        theta_q,
        tau,
        min_similarity: f32::NEG_INFINITY,
        ..Default::default()
    }
}

#[test]
fn quality_and_duration_gates_follow_eq_1_and_2() {
    let s = score(&four(), 10.0, &cfg(0.6, 0.1)).unwrap();
    let expect = [
        (1.0, 0.8 / 0.9, true, 0.8 / 0.9),
        (0.95, 0.6 / 0.9, true, 0.6 / 0.9),
        (0.5, 1.0, true, 0.5),
        (1.0, 1.0, false, 0.0),
    ];
    for (sc, (a, b, ok, q)) in s.iter().zip(expect) {
        assert!(close(sc.a.into(), a), "{sc:?}: a");
        assert!(close(sc.b.into(), b), "{sc:?}: b");
        assert_eq!(sc.duration_ok, ok, "{sc:?}");
        assert!(close(sc.q.into(), q), "{sc:?}: q");
    }
    // θ_q = 0.6 admits 10 and 11: p ∝ exp(s_pos / 0.1), p10 = 1 / (1 + e^−0.4).
    let adm: Vec<u64> = s
        .iter()
        .filter(|x| x.admitted)
        .map(|x| x.candidate.id)
        .collect();
    assert_eq!(adm, [10, 11]);
    let p10 = 1.0 / (1.0 + (-0.4f64).exp());
    assert!(close(s[0].p, p10), "{}", s[0].p);
    assert!(close(s[1].p, 1.0 - p10));
    assert_eq!(s[2].p, 0.0);
    assert_eq!(s[3].p, 0.0);

    // θ_q = 0.9 admits nothing (0.8889 < 0.9): a cold generation.
    let mut rng = SplitMix64::new(1);
    assert!(select(&four(), 10.0, &cfg(0.9, 0.1), &mut rng)
        .unwrap()
        .is_none());
    // The absolute floor removes candidates the relative gate would keep.
    let mut c = cfg(0.6, 0.1);
    c.min_similarity = 0.78;
    let s = score(&four(), 10.0, &c).unwrap();
    assert!(s[0].admitted && !s[1].admitted);
    assert!(close(s[0].p, 1.0));
}

#[test]
fn draws_follow_the_softmax_and_the_seed() {
    let c = cfg(0.6, 0.1);
    let mut rng = SplitMix64::new(7);
    let n = 20_000;
    let mut first = 0usize;
    for _ in 0..n {
        let sel = select(&four(), 10.0, &c, &mut rng).unwrap().unwrap();
        assert!(sel.chosen().admitted);
        first += usize::from(sel.chosen().candidate.id == 10);
    }
    let p10 = 1.0 / (1.0 + (-0.4f64).exp()); // 0.5987
    let f = first as f64 / n as f64;
    assert!((f - p10).abs() < 0.015, "frequency {f} vs {p10}");

    // The choice is the first admitted candidate whose cumulative probability passes u.
    let mut a = SplitMix64::new(99);
    let u = a.clone().next_f64();
    let sel = select(&four(), 10.0, &c, &mut a).unwrap().unwrap();
    assert_eq!(sel.chosen().candidate.id, if u < p10 { 10 } else { 11 });
    // Same seed, same sequence.
    let picks = |seed| {
        let mut r = SplitMix64::new(seed);
        (0..32)
            .map(|_| select(&four(), 10.0, &c, &mut r).unwrap().unwrap().index)
            .collect::<Vec<_>>()
    };
    assert_eq!(picks(5), picks(5));
    assert_ne!(picks(5), picks(6));
    // A small τ concentrates on the best; a large one flattens.
    let s = score(&four(), 10.0, &cfg(0.6, 0.001)).unwrap();
    assert!(s[0].p > 0.999_999);
    let s = score(&four(), 10.0, &cfg(0.6, 100.0)).unwrap();
    assert!((s[0].p - 0.5).abs() < 1e-3);
}

#[test]
fn edge_cases_are_named_or_cold() {
    let mut rng = SplitMix64::new(0);
    assert!(select(&[], 10.0, &cfg(0.5, 0.1), &mut rng)
        .unwrap()
        .is_none());
    // Every s_pos ≤ 0: a = 0 for all, nothing passes a positive θ_q.
    let neg = [cand(1, -0.2, 0.1, 10.0), cand(2, 0.0, 0.1, 10.0)];
    let s = score(&neg, 10.0, &cfg(0.5, 0.1)).unwrap();
    assert!(s.iter().all(|x| x.a == 0.0 && !x.admitted));
    let e = score(&neg, 0.0, &cfg(0.5, 0.1)).unwrap_err().to_string();
    assert!(e.contains("requested duration"), "{e}");
    let e = score(&neg, 1.0, &cfg(0.5, 0.0)).unwrap_err().to_string();
    assert!(e.contains("tau"), "{e}");
    let mut c = cfg(0.5, 0.1);
    c.top_k = 0;
    assert!(score(&neg, 1.0, &c).is_err());
}
