//! What one run draws of a host's failures and returns: its first failure
//! (from its past days' replay, else its curve and its past's rate), when
//! a failure lets it back, and when it fails again after a return (from
//! the replay, else resampled from its past spells). Each answers a run
//! time, not a duration: the replay's times are kept as they are, since
//! `now + (t − now)` may round to a hair before `t`, where the replay
//! still has the host down.

use super::super::bootstrap::SpellUrn;
use super::super::draw::exponential;
use super::super::facts::HostFacts;
use super::{EventKind, Run};
use rand::Rng;

impl Run {
    /// Host `host` failed at `now`: it is away until [`Self::back_at`],
    /// and fails next at [`Self::next_failure_after`] its return: from its
    /// past days or up-spells when known (the curve describes a host that
    /// has been up in its present state, not one just back from a failure;
    /// restarting the curve after every return repeats its early hazard
    /// and overcounted failures 1.85× on the shared traces), else from the
    /// curve.
    pub(in super::super) fn host_failed<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        now: f64,
        rng: &mut R,
    ) {
        let back = self.back_at(facts, host, now, rng);
        self.free_at[host] = back;
        self.next_fail[host] = self.next_failure_after(facts, host, back, rng);
        self.back[host] = true;
        self.since[host] = back;
        let epoch = self.epoch[host];
        self.push(
            back,
            EventKind::HostFree {
                host: host as u32,
                epoch,
            },
        );
        self.recheck_all = true;
    }

    /// When a failure at `now` lets `host` back: with past days, at the
    /// end of the replayed outage it fell in, else (a failure the replay
    /// did not draw: a held window's) after a drawn outage, put off to the
    /// replay's next return; without them, after one of its past
    /// outages drawn by this run's weights, or its mean recovery.
    pub(in super::super) fn back_at<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        now: f64,
        rng: &mut R,
    ) -> f64 {
        let drawn = now + self.drawn_outage(facts, host, rng);
        let Some(replay) = &facts[host].replay else {
            return drawn;
        };
        let picks = &mut self.picks[host];
        // Down through the replayed days: away to their end at least.
        let through = drawn.max(replay.end());
        match replay.next_up(now, picks, rng) {
            Some(up) if up > now => up,
            Some(_) => replay.next_up(drawn, picks, rng).unwrap_or(through),
            None => through,
        }
    }

    /// One of `host`'s past outages drawn by this run's weights, or its
    /// mean recovery.
    fn drawn_outage<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        rng: &mut R,
    ) -> f64 {
        let fact = &facts[host];
        if let Some(b) = &fact.bootstrap {
            let i = SpellUrn::pick(&b.outage_mass, &mut self.urns[host].outages, rng);
            if i > 0 {
                return b.outages[i - 1].0;
            }
        }
        fact.recovery
    }

    /// When `host`, up from a return at `from`, fails next: with past
    /// days, at the replay's next outage (past the replayed days, a
    /// renewal draw from their end); without them, after one of its past
    /// up-spells drawn by this run's weights (a cut one lasts at least its
    /// length, then at the run's rate), or an exponential at the run's
    /// rate, or without a past a draw from the curve.
    pub(in super::super) fn next_failure_after<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        from: f64,
        rng: &mut R,
    ) -> f64 {
        if let Some(replay) = &facts[host].replay {
            if let Some(down) = replay.next_down(from, &mut self.picks[host], rng) {
                return down;
            }
            return replay.end().max(from) + self.drawn_up_spell(facts, host, rng);
        }
        from + self.drawn_up_spell(facts, host, rng)
    }

    /// How long a host stays up after a return without past days (see
    /// [`Self::next_failure_after`]).
    fn drawn_up_spell<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        rng: &mut R,
    ) -> f64 {
        let fact = &facts[host];
        let rate = self.rate[host];
        let tail = |rng: &mut R| {
            if rate.is_nan() {
                fact.sampler.sample(rng).unwrap_or(f64::INFINITY)
            } else {
                exponential(rate, rng)
            }
        };
        if let Some(b) = &fact.bootstrap {
            let i = SpellUrn::pick(&b.up_mass, &mut self.urns[host].up, rng);
            if i > 0 {
                let (len, _, cut) = b.up[i - 1];
                return if cut { len + tail(rng) } else { len };
            }
        }
        tail(rng)
    }

    /// The host's first failure, a run time, its clock starting at `from`.
    /// With past days, where the replay has it down next once the outage
    /// its picked day holds at the submission is passed over (the host is
    /// up then; [`super::super::replay::DayReplay::passed_over`], to that
    /// day's midnight at most), and not before `from` (which `simulate`
    /// keeps out of a replayed outage); past the replayed days, a renewal
    /// draw from their end. Without them, from its curve up to the
    /// curve's last window; a draw beyond it (where the curve only
    /// extrapolates its last segment, flat for a host that looked safe
    /// then) comes at the run's rate from the host's past, when known.
    pub(in super::super) fn first_failure_at<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        from: f64,
        rng: &mut R,
    ) -> f64 {
        let fact = &facts[host];
        if let Some(replay) = &fact.replay {
            // The host is up now: the outage its picked day holds now is
            // passed over (day 0 is always replayed, so this answers).
            let exposed = replay
                .passed_over(0.0, &mut self.picks[host], rng)
                .map_or(from, |t| t.max(from));
            return self.next_failure_after(facts, host, exposed, rng);
        }
        let u = rng.random::<f64>();
        let (last, tr_last) = fact.curve_end;
        let rate = self.rate[host];
        from + if !rate.is_nan() && u < tr_last {
            last + exponential(rate, rng)
        } else {
            fact.sampler.failure_time_at(u).unwrap_or(f64::INFINITY)
        }
    }
}
