//! Sampling the next token: logit bias -> penalties (repetition, presence, frequency), then
//! greedy, or top-k -> top-p -> min-p -> temperature -> a seeded draw (llama.cpp's default
//! order). Same seed, same output. With no bias and no penalty the logits are used as they
//! are, so greedy output is exactly the argmax of the model's logits.
//!
//! [`log_softmax_top`] gives the log-probabilities clients ask for (`logprobs`): those of the
//! model's own distribution, before any bias, penalty or temperature (as OpenAI reports them).

/// Sampling settings.
#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// Temperature; `<= 0` means greedy (argmax, lowest id on ties).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recently seen tokens by this (1: off).
    pub repeat_penalty: f32,
    /// How many recent tokens (prompt and output) the repetition penalty looks at.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token already generated (OpenAI; 0: off).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it was generated (OpenAI; 0: off).
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens; [`BAN`] or below removes a token altogether.
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the random draw.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

/// A logit bias this low bans the token (OpenAI: "-100 should result in a ban").
pub const BAN: f32 = -100.0;

/// A sampler with its random state.
pub struct Sampler {
    cfg: SamplerConfig,
    state: u64,
}

/// What may be sampled next, beyond the sampler's own settings (a grammar: see
/// `runner::constrain`): applied to a copy of the logits before sampling, and told each token
/// drawn.
pub trait TokenMask {
    /// Sets every logit that may not be drawn next to `-inf`.
    fn apply(&mut self, logits: &mut [f32]) -> Result<(), String>;
    /// Advances past the drawn token `id`.
    fn accept(&mut self, id: u32) -> Result<(), String>;
    /// Whether nothing but the end may follow.
    fn is_finished(&self) -> bool;
}

/// Index of the largest value, the lowest index on ties; NaNs never win, but a NaN at index 0
/// is kept (as a scan that keeps the first value nothing beats would).
pub fn argmax(logits: &[f32]) -> u32 {
    match logits.first() {
        Some(v) if !v.is_nan() => {}
        _ => return 0,
    }
    // The largest value first, over lanes the compiler keeps in vector registers (a scan that
    // carries the best index compares one value at a time: 66 us for a 1.7B's 151 936 logits,
    // 1 % of its token on a Xeon), then the first index holding it.
    const LANES: usize = 16;
    let keep_larger = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = keep_larger(*m, v);
        }
    }
    let best = rest.iter().copied().fold(
        lanes.into_iter().fold(f32::NEG_INFINITY, keep_larger),
        keep_larger,
    );
    logits.iter().position(|&v| v == best).unwrap_or(0) as u32
}

/// The log-probabilities of the softmax of `logits`: that of `chosen`, and the `k` most likely
/// tokens, most likely first (the lowest id first on ties), each `<= 0`. Sums in `f64`.
pub fn log_softmax_top(logits: &[f32], chosen: u32, k: usize) -> (f32, Vec<(u32, f32)>) {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !m.is_finite() {
        // No finite logit: no distribution to speak of.
        return (f32::NEG_INFINITY, Vec::new());
    }
    let s: f64 = logits.iter().map(|&v| (v as f64 - m).exp()).sum();
    // s >= 1 (the maximum contributes 1), so lse >= every logit and each log-probability <= 0.
    let lse = m + s.ln();
    let lp = |v: f32| (v as f64 - lse).min(0.0) as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (i, &v) in logits.iter().enumerate() {
            // Strictly greater: an equal logit with a higher id stays behind.
            if top.len() == k && v <= top[k - 1].1 {
                continue;
            }
            let at = top.partition_point(|x| x.1 >= v);
            top.insert(at, (i as u32, v));
            top.truncate(k);
        }
    }
    let chosen_lp = logits
        .get(chosen as usize)
        .map_or(f32::NEG_INFINITY, |&v| lp(v));
    (
        chosen_lp,
        top.into_iter().map(|(i, v)| (i, lp(v))).collect(),
    )
}

impl Sampler {
    /// A sampler seeded with `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Sampler {
        let state = cfg.seed ^ 0x9e37_79b9_7f4a_7c15;
        Sampler { cfg, state }
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    fn next_f64(&mut self) -> f64 {
        // splitmix64
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Applies the logit bias, then the penalties, to `logits`. `history` is the prompt and
    /// then the generated tokens; the first `n_prompt` of them are the prompt, which the
    /// repetition penalty looks at (its last `repeat_last_n` tokens, as llama.cpp) and the
    /// presence and frequency penalties do not (they count generated tokens, as OpenAI).
    pub fn penalize(&self, logits: &mut [f32], history: &[u32], n_prompt: usize) {
        let c = &self.cfg;
        for &(t, b) in &c.logit_bias {
            if let Some(v) = logits.get_mut(t as usize) {
                *v = if b <= BAN { f32::NEG_INFINITY } else { *v + b };
            }
        }
        if c.repeat_penalty != 1.0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &t in &history[start..] {
                if (t as usize) < logits.len() && seen.insert(t) {
                    let v = &mut logits[t as usize];
                    *v = if *v > 0.0 {
                        *v / c.repeat_penalty
                    } else {
                        *v * c.repeat_penalty
                    };
                }
            }
        }
        if c.presence_penalty != 0.0 || c.frequency_penalty != 0.0 {
            let mut count = std::collections::HashMap::new();
            for &t in history.get(n_prompt..).unwrap_or(&[]) {
                *count.entry(t).or_insert(0u32) += 1;
            }
            for (t, n) in count {
                if let Some(v) = logits.get_mut(t as usize) {
                    *v -= c.presence_penalty + c.frequency_penalty * n as f32;
                }
            }
        }
    }

    fn adjusts(&self) -> bool {
        let c = &self.cfg;
        c.repeat_penalty != 1.0
            || c.presence_penalty != 0.0
            || c.frequency_penalty != 0.0
            || !c.logit_bias.is_empty()
    }

    /// Picks the next token from `logits`, given the tokens so far (`history`, whose first
    /// `n_prompt` are the prompt; see [`Sampler::penalize`]).
    pub fn sample(&mut self, logits: &[f32], history: &[u32], n_prompt: usize) -> u32 {
        let c = self.cfg.clone();
        let adjusted;
        let l: &[f32] = if self.adjusts() {
            let mut v = logits.to_vec();
            self.penalize(&mut v, history, n_prompt);
            adjusted = v;
            &adjusted
        } else {
            logits
        };
        if c.temperature <= 0.0 {
            return argmax(l);
        }
        let mut cand: Vec<(u32, f32)> = l.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        // Banned tokens are never drawn (unless everything is banned: then the first stays).
        let allowed = cand.iter().take_while(|x| x.1 > f32::NEG_INFINITY).count();
        cand.truncate(allowed.max(1));
        if c.top_k > 0 {
            cand.truncate(c.top_k);
        }
        let softmax = |cand: &[(u32, f32)]| -> Vec<f64> {
            let m = cand[0].1 as f64;
            let e: Vec<f64> = cand.iter().map(|&(_, v)| (v as f64 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|x| x / s).collect()
        };
        if c.top_p < 1.0 {
            let p = softmax(&cand);
            let mut acc = 0.0;
            let keep = p.iter().position(|&x| {
                acc += x;
                acc >= c.top_p as f64
            });
            cand.truncate(keep.map_or(cand.len(), |i| i + 1));
        }
        if c.min_p > 0.0 {
            let p = softmax(&cand);
            let floor = p[0] * c.min_p as f64;
            let keep = p.iter().take_while(|&&x| x >= floor).count().max(1);
            cand.truncate(keep);
        }
        for x in cand.iter_mut() {
            x.1 /= c.temperature;
        }
        let p = softmax(&cand);
        let r = self.next_f64();
        let mut acc = 0.0;
        for (i, &x) in p.iter().enumerate() {
            acc += x;
            if r < acc {
                return cand[i].0;
            }
        }
        cand[cand.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    /// The scan `argmax` stands for: the first value nothing after it beats.
    fn argmax_scan(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_scan_with_ties_nans_infinities_and_signed_zeros() {
        let mut rng = XorShift::new(11);
        let special = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            3.0,
            -3.0,
        ];
        for len in [0, 1, 2, 15, 16, 17, 33, 100, 1000] {
            for _ in 0..200 {
                let v: Vec<f32> = (0..len)
                    .map(|_| match rng.below(4) {
                        0 => special[rng.below(special.len())],
                        _ => (rng.below(9) as f32 - 4.0) * 0.5,
                    })
                    .collect();
                assert_eq!(argmax(&v), argmax_scan(&v), "{v:?}");
            }
        }
    }

    #[test]
    fn greedy_takes_the_lowest_index_on_ties() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[], 0), 1);
    }

    #[test]
    fn same_seed_same_tokens_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 17) as f32 * 0.3).collect();
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..Default::default()
        };
        let draw = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..50)
                .map(|_| s.sample(&logits, &[], 0))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(&cfg), draw(&cfg));
        assert_ne!(
            draw(&cfg),
            draw(&SamplerConfig {
                seed: 8,
                ..cfg.clone()
            })
        );
        let top1 = draw(&SamplerConfig { top_k: 1, ..cfg });
        assert!(top1.iter().all(|&t| t == argmax(&logits)));
    }

    #[test]
    fn repetition_penalty_lowers_seen_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 2.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&[2.0, 1.5], &[0], 1), 1);
        assert_eq!(
            s.sample(&[-1.0, -1.5], &[0], 1),
            1,
            "negative logits are multiplied"
        );
        // Only the last `repeat_last_n` tokens count.
        let mut s = Sampler::new(SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 2.0,
            repeat_last_n: 1,
            ..Default::default()
        });
        assert_eq!(s.sample(&[2.0, 1.5], &[0, 1], 1), 0);
    }

    #[test]
    fn presence_and_frequency_penalties_count_generated_tokens_only() {
        let cfg = |presence, frequency| SamplerConfig {
            temperature: 0.0,
            presence_penalty: presence,
            frequency_penalty: frequency,
            ..Default::default()
        };
        let s = Sampler::new(cfg(0.5, 0.25));
        let mut l = vec![1.0f32, 1.0, 1.0];
        // Token 0 is in the prompt only; token 1 was generated twice, token 2 once.
        s.penalize(&mut l, &[0, 1, 2, 1], 1);
        assert_eq!(l, [1.0, 1.0 - 0.5 - 0.5, 1.0 - 0.5 - 0.25]);
        let mut s = Sampler::new(cfg(0.0, 1.0));
        assert_eq!(s.sample(&[3.0, 2.5], &[7, 0], 1), 1);
        assert_eq!(
            s.sample(&[3.0, 2.5], &[0], 1),
            0,
            "the prompt does not count"
        );
    }

    #[test]
    fn logit_bias_adds_and_minus_100_bans() {
        let cfg = |bias: Vec<(u32, f32)>, temperature| SamplerConfig {
            temperature,
            logit_bias: bias,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg(vec![(1, 2.0)], 0.0));
        assert_eq!(s.sample(&[3.0, 1.5, 0.0], &[], 0), 1);
        let mut s = Sampler::new(cfg(vec![(0, BAN)], 0.0));
        assert_eq!(s.sample(&[300.0, 1.5, 0.0], &[], 0), 1);
        // Sampled: a banned token never comes up, however likely it was.
        let mut s = Sampler::new(SamplerConfig {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 2.0,
            ..cfg(vec![(0, BAN)], 2.0)
        });
        assert!((0..200).all(|_| s.sample(&[5.0, 0.0, 0.0], &[], 0) != 0));
    }

    #[test]
    fn log_softmax_top_is_the_distribution_most_likely_first() {
        let l = [1.0f32, 3.0, 3.0, 2.0, -1.0];
        let (chosen, top) = log_softmax_top(&l, 3, 3);
        assert_eq!(top.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(top[0].1, top[1].1);
        assert_eq!(chosen, top[2].1);
        let total: f64 = (0..l.len() as u32)
            .map(|i| (log_softmax_top(&l, i, 0).0 as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        assert!(top.iter().all(|x| x.1 <= 0.0));
        let (_, all) = log_softmax_top(&l, 0, 10);
        assert_eq!(all.len(), l.len());
        assert!(all.windows(2).all(|w| w[0].1 >= w[1].1));
        assert_eq!(log_softmax_top(&[f32::NEG_INFINITY], 0, 1).1, []);
    }
}
