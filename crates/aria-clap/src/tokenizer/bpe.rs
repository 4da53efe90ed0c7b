//! Byte-pair merging by merge rank, on token ids.
//!
//! The classic formulation (repeatedly merge every occurrence of the adjacent pair of lowest
//! rank, left to right) and this one (a heap of candidate pairs ordered by rank, then position)
//! give the same result for a merge list learned in order, as GPT-2's is; this one is
//! `O(n log n)` in the length of the piece instead of quadratic, so one piece of a megabyte of
//! letters stays cheap.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// `(left id, right id)` → `(rank, merged id)`.
pub(super) type Merges = HashMap<(u32, u32), (u32, u32), BuildHasherDefault<PairHasher>>;

/// The hash of the pair keys of [`Merges`]: the two ids packed into one word, then mixed
/// (MurmurHash3's 64-bit finalizer). The map is read once or twice per byte of text; the default
/// SipHash is several times slower, and its flooding resistance buys nothing for keys taken
/// from a vocabulary file.
#[derive(Default)]
pub(super) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 << 32) | u64::from(n);
    }
}

const NONE: usize = usize::MAX;

/// Merges `ids` (the symbols of one piece) in place.
pub(super) fn merge(ids: &mut Vec<u32>, merges: &Merges) {
    let n = ids.len();
    if n < 2 {
        return;
    }
    if n <= 16 {
        merge_small(ids, merges);
        return;
    }
    let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
    let mut next: Vec<usize> = (1..=n).map(|i| if i == n { NONE } else { i }).collect();
    let mut alive = vec![true; n];
    // (rank, position of the left symbol, merged id), smallest first.
    let mut heap = BinaryHeap::with_capacity(n);
    for i in 0..n - 1 {
        if let Some(&(rank, new_id)) = merges.get(&(ids[i], ids[i + 1])) {
            heap.push(Reverse((rank, i, new_id)));
        }
    }
    while let Some(Reverse((rank, pos, new_id))) = heap.pop() {
        if !alive[pos] || next[pos] == NONE {
            continue;
        }
        let right = next[pos];
        // The pair may have changed since it was queued.
        if merges.get(&(ids[pos], ids[right])) != Some(&(rank, new_id)) {
            continue;
        }
        ids[pos] = new_id;
        alive[right] = false;
        next[pos] = next[right];
        if next[pos] != NONE {
            prev[next[pos]] = pos;
        }
        if prev[pos] != NONE {
            let p = prev[pos];
            if let Some(&(r, id)) = merges.get(&(ids[p], ids[pos])) {
                heap.push(Reverse((r, p, id)));
            }
        }
        if next[pos] != NONE {
            if let Some(&(r, id)) = merges.get(&(ids[pos], ids[next[pos]])) {
                heap.push(Reverse((r, pos, id)));
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while i != NONE {
        out.push(ids[i]);
        i = next[i];
    }
    *ids = out;
}

/// The classic loop, faster for the short pieces most text is made of.
fn merge_small(ids: &mut Vec<u32>, merges: &Merges) {
    while ids.len() > 1 {
        let best = ids
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| merges.get(&(w[0], w[1])).map(|&(r, id)| (r, i, id)))
            .min();
        let Some((_, first, new_id)) = best else {
            return;
        };
        let (a, b) = (ids[first], ids[first + 1]);
        // Every occurrence of the pair, left to right, from the first.
        let mut out = Vec::with_capacity(ids.len());
        out.extend_from_slice(&ids[..first]);
        let mut i = first;
        while i < ids.len() {
            if i + 1 < ids.len() && ids[i] == a && ids[i + 1] == b {
                out.push(new_id);
                i += 2;
            } else {
                out.push(ids[i]);
                i += 1;
            }
        }
        *ids = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merges(list: &[(u32, u32, u32)]) -> Merges {
        list.iter()
            .enumerate()
            .map(|(r, &(a, b, m))| ((a, b), (r as u32, m)))
            .collect()
    }

    #[test]
    fn heap_and_classic_agree() {
        // 1 = a, 2 = b; a a -> 3, 3 a -> 4, a b -> 5, 3 3 -> 6, 4 5 -> 7
        let m = merges(&[(1, 1, 3), (3, 1, 4), (1, 2, 5), (3, 3, 6), (4, 5, 7)]);
        let mut state = 12345u32;
        for len in 2..60 {
            for _ in 0..20 {
                let word: Vec<u32> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        1 + (state >> 16) % 2
                    })
                    .collect();
                let mut classic = word.clone();
                merge_small(&mut classic, &m);
                let mut heap = word.clone();
                if heap.len() <= 16 {
                    // Force the heap path.
                    heap.extend(std::iter::repeat_n(9, 17));
                    merge(&mut heap, &m);
                    heap.truncate(heap.len() - 17);
                } else {
                    merge(&mut heap, &m);
                }
                assert_eq!(heap, classic, "{word:?}");
            }
        }
    }
}
