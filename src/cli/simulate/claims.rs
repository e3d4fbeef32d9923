//! `gleaner simulate`'s claim options (issue 29): a share of the pool's
//! hosts that over-claim their TR, and whether the simulated consumer
//! scores claims and discounts them by each host's record, as the node
//! does. This file only reads and checks the options and picks the
//! over-claimers; the model is `model::sched::sim::claims`.

use crate::model::sched::sim::{least_reliable_hosts, Scoring, SimHost};
use crate::model::sched::timeline::Timeline;
use anyhow::bail;
use clap::{Args, ValueEnum};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// Share of the pool's hosts that over-claim: they answer TR 1 at
    /// every window whatever their trace does, while their trace still
    /// suspends and kills their guests. Which hosts is drawn from the seed
    /// (apart from every other draw, so the pool is the same at any share).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    pub overclaim: f64,

    /// Which hosts over-claim: `random` (drawn from the seed) or
    /// `least-reliable` (those whose traces keep a task of the median
    /// runtime least often over the run's first week: the hosts with the
    /// most to gain from lying).
    #[arg(long, value_name = "WHO", value_enum, default_value_t = OverclaimPick::Random)]
    pub overclaim_pick: OverclaimPick,

    /// What the consumer does with each host's record of claimed TR
    /// against what happened, comma-separated: off (nothing), discount
    /// (weighs its claims times the node's `claim_discount`) and/or record
    /// (the discount, and hosts whose failures go beyond what their claims
    /// allow placed behind clean ones, then given no work, as the node's
    /// placement does; docs/trust.md). Each policy runs once per value.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "off"
    )]
    pub claim_scoring: Vec<Scoring>,
}

/// The median of the tasks' runtimes, seconds (an hour when there are none):
/// the window `least-reliable` judges the hosts by.
pub fn median_runtime(runtimes: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = runtimes.iter().copied().filter(|r| r.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(3600.0)
}

/// `--overclaim-pick`: which hosts over-claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OverclaimPick {
    Random,
    LeastReliable,
}

/// How far into the run the least reliable hosts are judged, seconds.
const PICK_SPAN_SECS: f64 = 7.0 * 86_400.0;

impl ClaimArgs {
    /// Per host of the pool: whether it over-claims, checked. `window_secs`
    /// is the window `least-reliable` judges hosts by (the median task).
    pub fn overclaimers(
        &self,
        pool: &[SimHost],
        timelines: &[Timeline],
        window_secs: f64,
        seed: u64,
    ) -> anyhow::Result<Vec<bool>> {
        if !(0.0..=1.0).contains(&self.overclaim) {
            bail!(
                "--overclaim must be a share between 0 and 1, got {}",
                self.overclaim
            );
        }
        let hosts = pool.len();
        let k = ((self.overclaim * hosts as f64).round() as usize).min(hosts);
        if self.overclaim_pick == OverclaimPick::LeastReliable {
            return Ok(least_reliable_hosts(
                pool,
                timelines,
                k,
                window_secs,
                PICK_SPAN_SECS,
            ));
        }
        // A generator of its own: the pool's offsets, powers and runtimes
        // come out the same whatever the share.
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x636c_6169_6d73_0000);
        let mut order: Vec<usize> = (0..hosts).collect();
        for i in 0..k {
            let j = rng.random_range(i..hosts);
            order.swap(i, j);
        }
        let mut out = vec![false; hosts];
        for &h in &order[..k] {
            out[h] = true;
        }
        Ok(out)
    }

    /// `--overclaim-pick`'s value as the command line spells it.
    pub fn pick_name(&self) -> &'static str {
        match self.overclaim_pick {
            OverclaimPick::Random => "random",
            OverclaimPick::LeastReliable => "least-reliable",
        }
    }

    /// The scorings to run, each once, in the order given.
    pub fn scorings(&self) -> Vec<Scoring> {
        let mut out: Vec<Scoring> = Vec::new();
        for &s in &self.claim_scoring {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        if out.is_empty() {
            out.push(Scoring::Off);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(overclaim: f64) -> ClaimArgs {
        ClaimArgs {
            overclaim,
            overclaim_pick: OverclaimPick::Random,
            claim_scoring: vec![Scoring::Record, Scoring::Off, Scoring::Record],
        }
    }

    /// `n` hosts on timeline 0 (which the random pick never reads).
    fn pool(n: usize) -> Vec<SimHost> {
        let host = SimHost {
            timeline: 0,
            offset: 0,
            power: 1.0,
        };
        vec![host; n]
    }

    fn drawn(a: &ClaimArgs, seed: u64) -> anyhow::Result<Vec<bool>> {
        a.overclaimers(&pool(40), &[], 3600.0, seed)
    }

    #[test]
    fn the_share_of_overclaimers_is_drawn_from_the_seed_and_checked() {
        let a = drawn(&args(0.25), 7).unwrap();
        assert_eq!(a.iter().filter(|&&o| o).count(), 10);
        assert_eq!(a, drawn(&args(0.25), 7).unwrap());
        assert_ne!(a, drawn(&args(0.25), 8).unwrap());
        assert!(!drawn(&args(0.0), 7).unwrap().contains(&true));
        assert!(!drawn(&args(1.0), 7).unwrap().contains(&false));
        assert!(drawn(&args(1.5), 7).is_err());
        assert!(drawn(&args(f64::NAN), 7).is_err());
        assert_eq!(args(0.5).scorings(), vec![Scoring::Record, Scoring::Off]);
    }

    #[test]
    fn the_least_reliable_pick_reads_the_timelines() {
        // Host 5 of 8 is down from its start on: it is the one picked,
        // whatever the seed (a random pick would move with it).
        let up = Timeline::from_cells(0, 60, vec![0; 20 * 1440], vec![1.0; 20 * 1440]);
        let down = Timeline::from_cells(0, 60, vec![5; 20 * 1440], vec![1.0; 20 * 1440]);
        let mut hosts = pool(8);
        hosts[5].timeline = 1;
        let least = ClaimArgs {
            overclaim_pick: OverclaimPick::LeastReliable,
            ..args(0.125)
        };
        let timelines = [up, down];
        for seed in [7, 8, 9] {
            let pick = least
                .overclaimers(&hosts, &timelines, 3600.0, seed)
                .unwrap();
            assert_eq!(
                pick,
                vec![false, false, false, false, false, true, false, false]
            );
        }
        let too_many = ClaimArgs {
            overclaim: 2.0,
            ..least
        };
        assert!(too_many.overclaimers(&hosts, &[], 3600.0, 7).is_err());
    }
}
