//! The RAM cache of evicted prompts (`--cache-ram`): when a slot's session is about to be
//! overwritten by another conversation it is kept here, and a later prompt that shares a longer
//! usable prefix with an entry than with any slot gets it back, so a conversation that lost its
//! slot to another one (or to a client's one-shot title request) evaluates only its new turn.
//!
//! Bounded in bytes (each entry's size is what its buffers hold), least recently used first out.
//! Generic over what an entry holds, so that the bookkeeping is tested without a model.

/// One cached prefix: the tokens its value holds, the value, its size.
struct Entry<T> {
    tokens: Vec<u32>,
    value: T,
    bytes: usize,
    used: u64,
}

/// A bounded LRU of `(tokens, value)` entries.
pub struct PromptCache<T> {
    limit: usize,
    bytes: usize,
    clock: u64,
    /// An entry whose tokens are a prefix of another's is worth nothing (true for attention
    /// caches, which truncate anywhere). Recurrent states cannot be cut back, so a prefix is
    /// another point to resume from; only the longest one below each new entry is kept (the
    /// point a conversation resumes from when its last turn is retried), so a conversation's
    /// turns do not pile up.
    prefixes_dominated: bool,
    entries: Vec<Entry<T>>,
}

impl<T> PromptCache<T> {
    /// An empty cache of at most `limit` bytes (0: it keeps nothing).
    pub fn new(limit: usize, prefixes_dominated: bool) -> PromptCache<T> {
        PromptCache {
            limit,
            bytes: 0,
            clock: 0,
            prefixes_dominated,
            entries: Vec::new(),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most bytes it may hold.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held (the sum of the entries' sizes).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps `value`, which holds `tokens` and takes `bytes`: entries it makes useless leave
    /// (the same tokens; prefixes of them when prefixes are dominated, else all but the
    /// longest prefix), then the least recently used until it fits. An entry larger than the
    /// whole cache is not kept.
    pub fn insert(&mut self, tokens: Vec<u32>, value: T, bytes: usize) {
        if tokens.is_empty() || bytes > self.limit {
            return;
        }
        let proper_prefix =
            |e: &Entry<T>| e.tokens.len() < tokens.len() && tokens.starts_with(&e.tokens);
        let longest_prefix = (!self.prefixes_dominated)
            .then(|| {
                self.entries
                    .iter()
                    .filter(|e| proper_prefix(e))
                    .max_by_key(|e| e.tokens.len())
            })
            .flatten()
            .map(|e| e.used);
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if tokens.starts_with(&e.tokens) && Some(e.used) != longest_prefix {
                self.remove(i);
            } else {
                i += 1;
            }
        }
        while self.bytes + bytes > self.limit {
            let oldest = (0..self.entries.len())
                .min_by_key(|&i| self.entries[i].used)
                .expect("bytes are held only by entries");
            self.remove(oldest);
        }
        self.clock += 1;
        self.bytes += bytes;
        self.entries.push(Entry {
            tokens,
            value,
            bytes,
            used: self.clock,
        });
    }

    /// The entry `usable` says keeps the most tokens (at least one; the most recently used
    /// among equals), with that count.
    pub fn best(&self, usable: impl Fn(&[u32]) -> usize) -> Option<(usize, usize)> {
        (0..self.entries.len())
            .map(|i| (i, usable(&self.entries[i].tokens)))
            .filter(|&(_, k)| k > 0)
            .max_by_key(|&(i, k)| (k, self.entries[i].used))
    }

    /// Takes entry `i` out: its tokens and value.
    pub fn take(&mut self, i: usize) -> (Vec<u32>, T) {
        let e = self.remove(i);
        (e.tokens, e.value)
    }

    fn remove(&mut self, i: usize) -> Entry<T> {
        let e = self.entries.swap_remove(i);
        self.bytes -= e.bytes;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::PromptCache;

    fn common(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn bytes_stay_bounded_and_the_least_recently_used_leaves_first() {
        let mut c = PromptCache::new(100, true);
        c.insert(vec![1, 2], 'a', 40);
        c.insert(vec![3, 4], 'b', 40);
        assert_eq!((c.len(), c.bytes()), (2, 80));
        c.insert(vec![5, 6], 'c', 40);
        assert_eq!((c.len(), c.bytes()), (2, 80), "'a' left");
        assert!(c.best(|t| common(t, &[1, 2, 9])).is_none());
        assert_eq!(c.best(|t| common(t, &[3, 4, 9])).map(|b| b.1), Some(2));
        // Too large for the whole cache: not kept, nothing evicted for it.
        c.insert(vec![7], 'd', 101);
        assert_eq!((c.len(), c.bytes()), (2, 80));
        // Taking an entry frees its bytes.
        let (i, _) = c.best(|t| common(t, &[5, 6, 1])).expect("'c'");
        assert_eq!(c.take(i), (vec![5, 6], 'c'));
        assert_eq!((c.len(), c.bytes()), (1, 40));
        // A cache of 0 bytes keeps nothing.
        let mut off = PromptCache::new(0, true);
        off.insert(vec![1], (), 1);
        assert!(off.is_empty());
    }

    #[test]
    fn the_longest_usable_prefix_wins_and_dominated_entries_leave() {
        let mut c = PromptCache::new(1000, true);
        c.insert(vec![1, 2, 3], "short", 10);
        c.insert(vec![1, 2, 3, 4, 5], "long", 10);
        assert_eq!(c.len(), 1, "a prefix of a newer entry is worth nothing");
        c.insert(vec![1, 7], "other", 10);
        let (i, k) = c.best(|t| common(t, &[1, 2, 3, 4, 9])).expect("a hit");
        assert_eq!(k, 4);
        assert_eq!(c.take(i).1, "long");
        // Recurrent states keep a prefix: a different point to resume from.
        let mut r = PromptCache::new(1000, false);
        r.insert(vec![1, 2], 0, 10);
        r.insert(vec![1, 2, 3], 1, 10);
        assert_eq!(r.len(), 2);
        r.insert(vec![1, 2], 2, 10);
        assert_eq!(r.len(), 2, "the same tokens replace the entry");
        r.insert(vec![1, 2, 3], 1, 10);
        assert_eq!(r.len(), 2, "and keep the prefix below them");
        // A conversation's turns: only the longest prefix stays beside the newest entry.
        r.insert(vec![1, 2, 3, 4], 3, 10);
        r.insert(vec![1, 2, 3, 4, 5, 6], 4, 10);
        r.insert(vec![9], 5, 10);
        let mut values: Vec<i32> = (0..r.len()).map(|i| r.entries[i].value).collect();
        values.sort();
        assert_eq!(values, [3, 4, 5]);
        assert_eq!(r.bytes(), 30);
        // Which still serve a retried turn (diverging after [1, 2, 3, 4]).
        let (i, k) = r.best(|t| prefix_of(t, &[1, 2, 3, 4, 7])).expect("a hit");
        assert_eq!((r.entries[i].value, k), (3, 4));
    }

    /// How much of `t` a recurrent state can keep for `prompt`: all of it or nothing.
    fn prefix_of(t: &[u32], prompt: &[u32]) -> usize {
        if prompt.starts_with(t) { t.len() } else { 0 }
    }
}
