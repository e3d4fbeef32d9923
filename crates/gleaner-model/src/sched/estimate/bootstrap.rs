//! A host's past up-spells and outages made ready for the estimate's runs
//! to resample after each return (a Bayesian bootstrap drawn as a Pólya
//! urn), and the rest of an outage in progress at the start.

use super::super::spells::SpellLengths;
use rand::Rng;

/// A host's past spells made ready for resampling after each return: a
/// Bayesian bootstrap (Rubin, 1981). Each run has weights for the seen
/// spells from a Dirichlet with one unit per spell and half a unit for a
/// spell unlike any seen, drawn from the fallback (for an up-spell, the
/// exponential at the run's posterior rate; for an outage, the mean
/// recovery). The half unit is the Jeffreys prior's half failure that
/// [`super::PastFailures`] already adds: a host with no whole spell always falls
/// back, one with two does a fifth of the time, one with thirty rarely.
/// Per-run weights carry what the past leaves unknown, as the per-run
/// rate does: a week of few spells widens the band, a long one does not.
/// Spells are drawn independently (a renewal process): their order is
/// not kept, only their lengths.
///
/// The weights are never drawn: picks made with Dirichlet(α) weights
/// drawn once per run are, in law, a Pólya urn with initial masses α
/// (each pick is one of α's by mass with chance A / (A + m), A = Σα,
/// else a copy of one of the run's m earlier picks, uniformly), so a run
/// pays one uniform per pick ([`SpellUrn`]) rather than a gamma draw per
/// spell per host (27 % of the estimate with 32 + 32 spells per host).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SpellBootstrap {
    /// (length, spells it stands for, cut by the span's edge: lasted at
    /// least this long, and then at the run's rate).
    pub(super) up: Vec<(f64, f64, bool)>,
    /// (length, outages it stands for).
    pub(super) outages: Vec<(f64, f64)>,
    /// The urn's initial masses, cumulative: the fallback's first (index
    /// 0), then each up-spell's.
    pub(super) up_mass: Vec<f64>,
    /// The same over the outages.
    pub(super) outage_mass: Vec<f64>,
}

/// Pseudo-spells the fallback counts for in a [`SpellBootstrap`].
const FALLBACK_WEIGHT: f64 = 0.5;

/// Longest rest of an outage a run draws (a year): the Lindy draw's tail
/// is unbounded, and a host away that long takes no part in any batch.
pub(super) const MAX_REST_SECS: f64 = 365.0 * 86_400.0;

/// The rest of an outage already `elapsed` seconds long: one of the past
/// outages longer than that (by their counts), less `elapsed`; or, with
/// the fallback's half unit (and always when every past outage was
/// shorter), a Lindy draw: P(rest > r) = elapsed / (elapsed + r), an
/// outage that has lasted `elapsed` lasting as long again in the median.
/// The past outages are weighed as seen, not by length: the elapsed time
/// already conditions on the outage being in progress.
pub(super) fn rest_of_outage<R: Rng + ?Sized>(
    b: &SpellBootstrap,
    elapsed: f64,
    rng: &mut R,
) -> f64 {
    let longer = || b.outages.iter().filter(move |o| o.0 > elapsed);
    let mass: f64 = longer().map(|o| o.1).sum();
    let mut x = rng.random::<f64>() * (mass + FALLBACK_WEIGHT);
    for &(len, count) in longer() {
        if x < count {
            return len - elapsed;
        }
        x -= count;
    }
    let u = rng.random::<f64>();
    (elapsed * u / (1.0 - u)).min(MAX_REST_SECS)
}

impl SpellBootstrap {
    /// From checked spells: lengths finite and positive, counts shared
    /// among the points that stand for them. `None` with nothing to draw.
    pub(super) fn new(spells: &SpellLengths) -> Option<SpellBootstrap> {
        let ok = |x: &f64| x.is_finite() && *x > 0.0;
        let share = |seen: u32, kept: usize| {
            if kept == 0 {
                0.0
            } else {
                (f64::from(seen) / kept as f64).max(1.0)
            }
        };
        let up_each = share(spells.up_seen, spells.up.len());
        let mut up: Vec<(f64, f64, bool)> = spells
            .up
            .iter()
            .filter(|x| ok(x))
            .map(|&x| (x, up_each, false))
            .collect();
        up.extend(
            spells
                .up_cut
                .iter()
                .filter(|x| ok(x))
                .map(|&x| (x, 1.0, true)),
        );
        let out_each = share(spells.outages_seen, spells.outages.len());
        let outages: Vec<(f64, f64)> = spells
            .outages
            .iter()
            .filter(|x| ok(x))
            .map(|&x| (x, out_each))
            .collect();
        if up.is_empty() && outages.is_empty() {
            return None;
        }
        let cumulative = |counts: &mut dyn Iterator<Item = f64>| {
            let mut total = FALLBACK_WEIGHT;
            let mut cum = vec![total];
            for c in counts {
                total += c;
                cum.push(total);
            }
            cum
        };
        let up_mass = cumulative(&mut up.iter().map(|s| s.1));
        let outage_mass = cumulative(&mut outages.iter().map(|s| s.1));
        Some(SpellBootstrap {
            up,
            outages,
            up_mass,
            outage_mass,
        })
    }
}

/// One run's picks so far from a host's [`SpellBootstrap`] (indices into
/// its masses, 0: the fallback): the Pólya urn that stands for the run's
/// Dirichlet weights. Emptied at the start of every run.
#[derive(Debug, Clone, Default)]
pub(super) struct SpellUrn {
    pub(super) up: Vec<u32>,
    pub(super) outages: Vec<u32>,
}

impl SpellUrn {
    pub(super) fn clear(&mut self) {
        self.up.clear();
        self.outages.clear();
    }

    /// The next pick from the urn of initial masses `mass` (cumulative)
    /// and earlier picks `picked`, which it joins.
    pub(super) fn pick<R: Rng + ?Sized>(mass: &[f64], picked: &mut Vec<u32>, rng: &mut R) -> usize {
        let Some(&initial) = mass.last() else {
            return 0;
        };
        let x = rng.random::<f64>() * (initial + picked.len() as f64);
        let i = if x < initial {
            mass.partition_point(|&c| c <= x).min(mass.len() - 1)
        } else {
            let k = ((x - initial) as usize).min(picked.len() - 1);
            picked[k] as usize
        };
        picked.push(i as u32);
        i
    }
}
