//! `gleaner simulate`'s claim options (issue 29): a share of the pool's
//! hosts that over-claim their TR, and whether the simulated consumer
//! scores claims and discounts them by each host's record, as the node
//! does. This file only reads and checks the options and picks the
//! over-claimers; the model is `model::sched::sim::claims`.

use crate::model::sched::sim::Scoring;
use anyhow::bail;
use clap::Args;
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

impl ClaimArgs {
    /// Per host of a pool of `hosts`: whether it over-claims, checked.
    pub fn overclaimers(&self, hosts: usize, seed: u64) -> anyhow::Result<Vec<bool>> {
        if !(0.0..=1.0).contains(&self.overclaim) {
            bail!(
                "--overclaim must be a share between 0 and 1, got {}",
                self.overclaim
            );
        }
        let k = ((self.overclaim * hosts as f64).round() as usize).min(hosts);
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
            claim_scoring: vec![Scoring::Record, Scoring::Off, Scoring::Record],
        }
    }

    #[test]
    fn the_share_of_overclaimers_is_drawn_from_the_seed_and_checked() {
        let a = args(0.25).overclaimers(40, 7).unwrap();
        assert_eq!(a.iter().filter(|&&o| o).count(), 10);
        assert_eq!(a, args(0.25).overclaimers(40, 7).unwrap());
        assert_ne!(a, args(0.25).overclaimers(40, 8).unwrap());
        assert!(!args(0.0).overclaimers(40, 7).unwrap().contains(&true));
        assert!(!args(1.0).overclaimers(40, 7).unwrap().contains(&false));
        assert!(args(1.5).overclaimers(40, 7).is_err());
        assert!(args(f64::NAN).overclaimers(40, 7).is_err());
        assert_eq!(args(0.5).scorings(), vec![Scoring::Record, Scoring::Off]);
    }
}
