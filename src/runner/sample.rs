//! Sampling the next token: greedy, or repetition penalty -> top-k -> top-p -> min-p ->
//! temperature -> a seeded draw (llama.cpp's default order). Same seed, same output.

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
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
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
            seed: 0,
        }
    }
}

/// A sampler with its random state.
pub struct Sampler {
    cfg: SamplerConfig,
    state: u64,
}

/// Index of the largest value, the lowest index on ties.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
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

    /// Picks the next token from `logits`, given the tokens so far (`history`, for the penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let c = self.cfg.clone();
        let mut l = logits.to_vec();
        if c.repeat_penalty != 1.0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &t in &history[start..] {
                if (t as usize) < l.len() && seen.insert(t) {
                    let v = &mut l[t as usize];
                    *v = if *v > 0.0 {
                        *v / c.repeat_penalty
                    } else {
                        *v * c.repeat_penalty
                    };
                }
            }
        }
        if c.temperature <= 0.0 {
            return argmax(&l);
        }
        let mut cand: Vec<(u32, f32)> = l.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
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

    #[test]
    fn greedy_takes_the_lowest_index_on_ties() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[]), 1);
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
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
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
        assert_eq!(s.sample(&[2.0, 1.5], &[0]), 1);
    }
}
