//! `assign`: spreading partitions over the live nodes.
//!
//! Pure and deterministic (the same inputs give the same assignment on every
//! machine). Even: every node gets `P / N` or `P / N + 1` partitions. Minimal moves:
//! a partition moves only if its owner is not live or holds more than its share —
//! a node that joins takes about `P / (N + 1)` partitions, a node that leaves gives
//! up exactly its own.

use std::collections::BTreeMap;

use crate::ClusterError;

/// The owner of each of `current.len()` partitions after balancing over `live`
/// (node ids; order and duplicates do not matter). `current[p]` is partition `p`'s
/// owner now (`None`: unowned).
pub fn assign(current: &[Option<String>], live: &[String]) -> Result<Vec<String>, ClusterError> {
    let mut nodes: Vec<&str> = live.iter().map(String::as_str).collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.is_empty() {
        return Err(ClusterError::NoLiveNodes);
    }
    let p = current.len();
    let base = p / nodes.len();
    let mut extra = p % nodes.len();

    // What each live node holds now, lowest partitions first.
    let mut held: BTreeMap<&str, Vec<usize>> = nodes.iter().map(|n| (*n, Vec::new())).collect();
    for (part, owner) in current.iter().enumerate() {
        if let Some(list) = owner.as_deref().and_then(|o| held.get_mut(o)) {
            list.push(part);
        }
    }
    // Shares: `base` each; the extra ones first to nodes already holding more than
    // `base` (they keep one more instead of giving it up), then in node order.
    let mut share: BTreeMap<&str, usize> = nodes.iter().map(|n| (*n, base)).collect();
    for n in &nodes {
        if extra > 0 && held[n].len() > base {
            *share.get_mut(n).expect("every live node has a share") += 1;
            extra -= 1;
        }
    }
    for n in &nodes {
        if extra > 0 && share[n] == base {
            *share.get_mut(n).expect("every live node has a share") += 1;
            extra -= 1;
        }
    }
    let mut out: Vec<Option<&str>> = vec![None; p];
    let mut count: BTreeMap<&str, usize> = nodes.iter().map(|n| (*n, 0)).collect();
    for (n, parts) in &held {
        for &part in parts.iter().take(share[n]) {
            out[part] = Some(n);
            *count.get_mut(n).expect("every live node has a count") += 1;
        }
    }
    // The free places, in node order.
    let mut free = nodes
        .iter()
        .flat_map(|n| std::iter::repeat_n(*n, share[n] - count[n]));
    for slot in out.iter_mut().filter(|s| s.is_none()) {
        *slot = Some(free.next().expect("shares add up to the partition count"));
    }
    Ok(out
        .into_iter()
        .map(|n| n.expect("every partition is assigned").to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    fn counts(a: &[String], live: &[String]) -> Vec<usize> {
        live.iter()
            .map(|n| a.iter().filter(|o| *o == n).count())
            .collect()
    }

    fn moved(a: &[String], b: &[String]) -> usize {
        a.iter().zip(b).filter(|(x, y)| x != y).count()
    }

    #[test]
    fn assignment_is_even_and_moves_few_partitions_on_join_and_leave() {
        for p in [1usize, 7, 64, 100] {
            let mut current: Vec<Option<String>> = vec![None; p];
            let mut prev: Option<Vec<String>> = None;
            // Nodes join one by one.
            for n in 1..=6 {
                let live = names(n);
                let a = assign(&current, &live).unwrap();
                assert_eq!(a, assign(&current, &live).unwrap(), "deterministic");
                let c = counts(&a, &live);
                let (lo, hi) = (*c.iter().min().unwrap(), *c.iter().max().unwrap());
                assert!(hi - lo <= 1, "even: p={p} n={n} {c:?}");
                if let Some(prev) = &prev {
                    // The new node takes its share and nothing else moves.
                    let joined = a.iter().filter(|o| **o == live[n - 1]).count();
                    assert_eq!(moved(prev, &a), joined, "p={p} n={n}");
                    assert!(joined <= p.div_ceil(n), "p={p} n={n} joined={joined}");
                }
                current = a.iter().cloned().map(Some).collect();
                prev = Some(a);
            }
            // A node leaves: exactly its partitions move, spread over the others.
            let before = prev.unwrap();
            let mut live = names(6);
            let gone = live.remove(2);
            let a = assign(&current, &live).unwrap();
            let c = counts(&a, &live);
            assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1);
            let had = before.iter().filter(|o| **o == gone).count();
            assert_eq!(moved(&before, &a), had, "p={p}");
            assert!(!a.contains(&gone));
        }
    }

    #[test]
    fn the_order_of_the_live_list_does_not_change_the_assignment() {
        let current = vec![
            Some("b".to_string()),
            None,
            Some("gone".to_string()),
            Some("a".to_string()),
        ];
        let x = assign(&current, &["a".into(), "b".into(), "c".into()]).unwrap();
        let y = assign(&current, &["c".into(), "a".into(), "b".into(), "a".into()]).unwrap();
        assert_eq!(x, y);
        assert_eq!(x[0], "b");
        assert_eq!(x[3], "a");
        assert!(matches!(
            assign(&current, &[]),
            Err(ClusterError::NoLiveNodes)
        ));
    }
}
