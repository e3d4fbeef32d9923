//! How many hosts placement asks directly, and which (issue 27, scope 2):
//! a few per task being placed, like Sparrow's probes, never every member;
//! half of them the best by what their summaries say, half drawn at random
//! from the rest so that round after round reaches every member.
//!
//! One rule for the node's consumer (which orders hosts by their summaries
//! and asks over the network) and `gleaner simulate` (which orders its
//! simulated hosts the same way). Pure: the caller orders the hosts and
//! passes the generator; nothing here knows peers, summaries or the wire.

use rand::seq::SliceRandom;
use rand::Rng;

/// Hosts asked directly per task being placed (Sparrow's d).
pub const ASKS_PER_TASK: u32 = 2;
/// Most hosts one placement round asks, however many tasks wait: a
/// submission's network cost is bounded by its tasks, never by the pool.
pub const ASKS_MAX: u32 = 32;

/// How many hosts to ask for `tasks` tasks waiting to be placed:
/// [`ASKS_PER_TASK`] each, at least one task's worth, at most [`ASKS_MAX`].
pub fn asks_for(tasks: usize) -> u32 {
    asks_for_with(tasks, ASKS_PER_TASK, ASKS_MAX)
}

/// [`asks_for`] with another `per_task` and `most` (the simulator varies them).
pub fn asks_for_with(tasks: usize, per_task: u32, most: u32) -> u32 {
    let tasks = u32::try_from(tasks).unwrap_or(u32::MAX).max(1);
    tasks.saturating_mul(per_task).min(most)
}

/// Hosts a consumer's sample of a large pool should name per task its
/// batches want running at once (the node's `SurveyQuery::sample_hosts`,
/// the simulator's `--knowledge sample`).
pub const SAMPLE_PER_TASK: usize = 2;
/// The fewest hosts a sample names, however narrow the work: 11 leaves
/// of the DHT trie at its 12 members a leaf (≈ 0.45 MB of lookups and
/// digests once per sample, at any N). A narrow batch runs on the few
/// best hosts its consumer knows, and twice its width (12 hosts for 5
/// tasks) rarely holds the pool's best: at 1,000 hosts on the shared
/// traces, 5–20 tasks ran 7–18 % longer than with full knowledge on 64
/// seeds with 2 per task alone, 1.2–2.2 % with this floor (docs/scale.md,
/// "The sample's floor, settled on 64 + 64 seeds", which also gives the
/// held-out seeds and a desktop pool).
pub const SAMPLE_MIN: usize = 128;

/// How many hosts a sample of a large pool should name for work `width`
/// tasks wide (the tasks wanted running at once): [`SAMPLE_PER_TASK`]
/// each, at least [`SAMPLE_MIN`]. The caller bounds it by the pool (the
/// node's sampler by its member table): the sample follows the work,
/// never the pool.
pub fn sample_hosts(width: usize) -> usize {
    sample_hosts_with(width, SAMPLE_PER_TASK, SAMPLE_MIN)
}

/// [`sample_hosts`] with another `per_task` and `least` (the simulator
/// varies them).
pub fn sample_hosts_with(width: usize, per_task: usize, least: usize) -> usize {
    width.saturating_mul(per_task).max(least)
}

/// How many of `most` asks go to the best by their summaries: the better
/// half, rounded up (the rest are drawn at random).
pub fn best_share(most: usize) -> usize {
    most.div_ceil(2)
}

/// The `most` hosts to ask from `order` (every known host, best first;
/// only its first [`best_share`] need be in order): the better half
/// (rounded up) taken from its head, the rest drawn at random from the
/// others.
pub fn best_then_random<T, R: Rng + ?Sized>(mut order: Vec<T>, most: usize, rng: &mut R) -> Vec<T> {
    let best = best_share(most).min(order.len());
    let mut rest = order.split_off(best);
    rest.shuffle(rng);
    order.extend(rest.into_iter().take(most - best));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::collections::HashSet;

    #[test]
    fn a_few_per_task_never_more_than_the_bound() {
        assert_eq!(asks_for(0), ASKS_PER_TASK);
        assert_eq!(asks_for(3), 6);
        assert_eq!(asks_for(10_000), ASKS_MAX);
        assert_eq!(asks_for_with(5, 3, 100), 15);
    }

    #[test]
    fn a_sample_names_twice_the_work_wide_and_never_fewer_than_the_floor() {
        // Narrow work: the floor, not twice its width (2, 20 and 40 before).
        assert_eq!(sample_hosts(0), 128);
        assert_eq!(sample_hosts(1), 128);
        assert_eq!(sample_hosts(10), 128);
        assert_eq!(sample_hosts(20), 128);
        // From 64 tasks up, twice the width.
        assert_eq!(sample_hosts(64), 128);
        assert_eq!(sample_hosts(100), 200);
        assert_eq!(sample_hosts(500), 1_000);
        assert_eq!(sample_hosts(usize::MAX), usize::MAX);
        assert_eq!(sample_hosts_with(10, 3, 64), 64);
        assert_eq!(sample_hosts_with(40, 3, 64), 120);
        assert_eq!(sample_hosts_with(10, 2, 1), 20);
    }

    #[test]
    fn the_best_half_then_random_ones_that_reach_everyone_in_time() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let order: Vec<u32> = (0..100).collect();
        let picked = best_then_random(order.clone(), 5, &mut rng);
        assert_eq!(picked.len(), 5);
        assert_eq!(&picked[..3], &[0, 1, 2], "the better half, rounded up");
        assert!(picked[3..].iter().all(|&h| h >= 3));
        let mut reached = HashSet::new();
        for _ in 0..2_000 {
            reached.extend(best_then_random(order.clone(), 4, &mut rng));
        }
        assert_eq!(reached.len(), 100);
        assert_eq!(best_then_random(vec![7, 8], 5, &mut rng), vec![7, 8]);
    }
}
