//! Ranking hosts for a job: the papers' scheduler picks the host with the
//! highest temporal reliability for the job's window; ties go to the higher
//! effective computing power Γ (seed 004), then to the peer id so the order is
//! stable. The same order picks, from the members' summaries, the few
//! candidates placement asks directly ([`candidates`], [`asks_for`]: a few
//! per task, like Sparrow's probes, never every member). Pure: it orders
//! what a survey or the summaries said.

use std::cmp::Ordering;
use std::collections::HashSet;

use libp2p::PeerId;

use crate::consumer::surveyed::SurveyedHost;

/// True when `host` can take a job now: it is [`healthy`] and its slot is
/// free.
pub fn eligible(host: &SurveyedHost) -> bool {
    healthy(host) && host.slot_free != Some(false)
}

/// How many hosts a round asks (a few per task, bounded): the model's rule,
/// shared with `gleaner simulate`.
pub use crate::model::sched::probe::{asks_for, sample_hosts, ASKS_MAX, ASKS_PER_TASK};

/// The hosts best first by what their summaries say: those not in a
/// failure state with a free slot in [`rank`]'s order (a version 1 member,
/// without a summary's TR, after those with one), then those whose summary
/// says busy, then those it says failing (a summary may be seconds stale:
/// the answer decides); within each of the three, those whose summary says
/// they hold one of `images` first (the model's one locality rule,
/// [`holders_first`]); never one in `exclude`.
pub fn by_summary(
    hosts: &[SurveyedHost],
    exclude: &HashSet<PeerId>,
    images: &[[u8; 32]],
) -> Vec<PeerId> {
    let mut listed: Vec<&SurveyedHost> = hosts
        .iter()
        .filter(|h| !exclude.contains(&h.peer))
        .collect();
    let tier = |h: &SurveyedHost| {
        if h.state.is_some_and(|s| s.is_failure()) {
            2
        } else {
            u8::from(h.slot_free == Some(false))
        }
    };
    listed.sort_by(|a, b| compare(a, b));
    let mut listed = holders_first(listed, |h| holds_any(h, images));
    // Stable: the holders stay first within each tier.
    listed.sort_by_key(|h| tier(h));
    listed.into_iter().map(|h| h.peer).collect()
}

/// The one locality rule (the model's), which the queue's placement
/// applies to the hosts that answered too.
pub use crate::model::sched::holds::holders_first;

/// True when `host` says it holds one of `images`.
pub fn holds_any(host: &SurveyedHost, images: &[[u8; 32]]) -> bool {
    host.images.iter().any(|i| images.contains(i))
}

/// The `most` hosts to ask: the better half (rounded up) of them the best
/// by their summaries ([`by_summary`]), the rest drawn at random from the
/// others, so that rounds after rounds reach every member (a host the best
/// ones cannot stand in for: one a task has not tried yet, one a stale
/// summary undersells), as Sparrow's random probes do. The draw is the
/// model's `best_then_random`, the one `gleaner simulate` uses.
pub fn candidates<R: rand::Rng + ?Sized>(
    hosts: &[SurveyedHost],
    exclude: &HashSet<PeerId>,
    images: &[[u8; 32]],
    most: usize,
    rng: &mut R,
) -> Vec<PeerId> {
    crate::model::sched::probe::best_then_random(by_summary(hosts, exclude, images), most, rng)
}

/// True when `host` answered and is not in a failure state (S3, S4, S5),
/// busy or not: a summary alone never places work (the answer confirms).
pub fn healthy(host: &SurveyedHost) -> bool {
    host.answered
        && !host.state.is_some_and(|s| s.is_failure())
        && !host.initial_state.is_some_and(|s| s.is_failure())
}

/// The eligible hosts not in `exclude`, best first: known TR before unknown
/// (a host without enough history to predict), higher TR first, then higher
/// Γ, then peer id.
pub fn rank<'a>(hosts: &'a [SurveyedHost], exclude: &HashSet<PeerId>) -> Vec<&'a SurveyedHost> {
    let mut ranked: Vec<&SurveyedHost> = hosts
        .iter()
        .filter(|h| eligible(h) && !exclude.contains(&h.peer))
        .collect();
    ranked.sort_by(|a, b| compare(a, b));
    ranked
}

fn compare(a: &SurveyedHost, b: &SurveyedHost) -> Ordering {
    let tr = |h: &SurveyedHost| h.tr.filter(|t| t.is_finite());
    let power = |h: &SurveyedHost| h.power.filter(|p| p.is_finite()).unwrap_or(0.0);
    match (tr(a), tr(b)) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| power(b).total_cmp(&power(a)))
    .then_with(|| a.peer.cmp(&b.peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::State;
    use rand::SeedableRng;
    use std::collections::HashMap;

    /// Hosts by name, so expected orders read as names.
    struct Named(HashMap<PeerId, &'static str>);

    impl Named {
        fn host(&mut self, name: &'static str, tr: Option<f64>, power: f64) -> SurveyedHost {
            let peer = PeerId::random();
            self.0.insert(peer, name);
            SurveyedHost {
                answered: true,
                tr,
                power: Some(power),
                slot_free: Some(true),
                state: Some(State::S1),
                ..SurveyedHost::new(peer)
            }
        }

        fn order(&self, ranked: Vec<&SurveyedHost>) -> Vec<&'static str> {
            ranked.iter().map(|h| self.0[&h.peer]).collect()
        }
    }

    #[test]
    fn higher_tr_first_then_power_then_unknown_tr_last() {
        let mut n = Named(HashMap::new());
        let hosts = vec![
            n.host("a", Some(0.5), 0.9),
            n.host("b", Some(0.9), 0.1),
            n.host("c", None, 1.0),
            n.host("d", Some(0.9), 0.8),
        ];
        assert_eq!(n.order(rank(&hosts, &HashSet::new())), ["d", "b", "a", "c"]);
    }

    #[test]
    fn busy_failed_silent_and_excluded_hosts_are_left_out() {
        let mut n = Named(HashMap::new());
        let mut busy = n.host("busy", Some(1.0), 1.0);
        busy.slot_free = Some(false);
        let mut s3 = n.host("s3", Some(1.0), 1.0);
        s3.state = Some(State::S3);
        let mut s4_ahead = n.host("s4", Some(1.0), 1.0);
        s4_ahead.initial_state = Some(State::S4);
        let mut silent = n.host("silent", None, 1.0);
        silent.answered = false;
        let tried = n.host("tried", Some(1.0), 1.0);
        let ok = n.host("ok", Some(0.1), 0.1);
        let exclude = HashSet::from([tried.peer]);
        let hosts = vec![busy, s3, s4_ahead, silent, tried, ok];
        assert_eq!(n.order(rank(&hosts, &exclude)), ["ok"]);
    }

    #[test]
    fn a_few_candidates_per_task_are_asked_never_the_whole_pool() {
        assert_eq!(asks_for(0), ASKS_PER_TASK);
        assert_eq!(asks_for(1), 2);
        assert_eq!(asks_for(3), 6);
        assert_eq!(asks_for(10_000), ASKS_MAX);
        // From 300 summaries, the best by TR whose slot is free and state
        // good; a version 1 member (no TR) only after them.
        let mut n = Named(HashMap::new());
        let mut hosts: Vec<SurveyedHost> = (0..300)
            .map(|i| {
                let mut h = n.host("pool", Some(f64::from(i) / 1000.0), 0.5);
                h.answered = false;
                h.summarised = true;
                h
            })
            .collect();
        let mut best_busy = n.host("best-busy", Some(0.99), 1.0);
        best_busy.slot_free = Some(false);
        let mut best_s5 = n.host("best-s5", Some(0.99), 1.0);
        best_s5.state = Some(State::S5);
        let (busy_peer, s5_peer) = (best_busy.peer, best_s5.peer);
        let good = n.host("good", Some(0.95), 1.0);
        let mut old = n.host("old", None, 1.0);
        old.summarised = false;
        old.answered = false;
        let excluded = n.host("excluded", Some(0.98), 1.0);
        let exclude = HashSet::from([excluded.peer]);
        hosts.extend([
            best_busy,
            best_s5,
            good.clone(),
            old.clone(),
            excluded.clone(),
        ]);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let picked = candidates(&hosts, &exclude, &[], 2, &mut rng);
        assert_eq!(picked.len(), 2);
        assert_eq!(picked[0], good.peer, "the best by its summary first");
        assert!(!picked.contains(&excluded.peer) && picked[1] != good.peer);
        // The other half is drawn at random: rounds reach every member.
        let mut reached = HashSet::new();
        for _ in 0..2_000 {
            reached.extend(candidates(&hosts, &exclude, &[], 2, &mut rng));
        }
        assert_eq!(reached.len(), 304, "every member not excluded, in time");
        let order = by_summary(&hosts, &exclude, &[]);
        assert_eq!(order.len(), 304, "every member not excluded, once");
        // The summaries may be stale: busy, then failing, come last.
        assert_eq!(&order[301..], &[old.peer, busy_peer, s5_peer]);
    }

    #[test]
    fn members_that_hold_the_images_are_asked_first_within_their_tier() {
        let image = [9u8; 32];
        let mut n = Named(HashMap::new());
        let summarised = |mut h: SurveyedHost, images: Vec<[u8; 32]>| {
            h.answered = false;
            h.summarised = true;
            h.images = images;
            h
        };
        let best = summarised(n.host("best", Some(0.99), 1.0), vec![]);
        let holder = summarised(n.host("holder", Some(0.4), 0.2), vec![[1; 32], image]);
        let other = summarised(n.host("other-image", Some(0.9), 1.0), vec![[1; 32]]);
        let mut busy = summarised(n.host("busy-holder", Some(0.99), 1.0), vec![image]);
        busy.slot_free = Some(false);
        let mut failing = summarised(n.host("s3-holder", Some(0.99), 1.0), vec![image]);
        failing.state = Some(State::S3);
        let hosts = vec![failing, busy, other, holder.clone(), best];
        let names = |order: Vec<PeerId>| -> Vec<&str> { order.iter().map(|p| n.0[p]).collect() };
        let none = HashSet::new();
        assert_eq!(
            names(by_summary(&hosts, &none, &[])),
            ["best", "other-image", "holder", "busy-holder", "s3-holder"],
            "without an image: TR within each tier"
        );
        assert_eq!(
            names(by_summary(&hosts, &none, &[image])),
            ["holder", "best", "other-image", "busy-holder", "s3-holder"],
            "a free holder first; a busy or failing one stays in its tier"
        );
        // One ask: the holder, though the summaries rank it below two others.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        assert_eq!(
            candidates(&hosts, &none, &[image], 1, &mut rng),
            vec![holder.peer]
        );
    }

    #[test]
    fn nan_tr_counts_as_unknown() {
        let mut n = Named(HashMap::new());
        let hosts = vec![
            n.host("nan", Some(f64::NAN), 1.0),
            n.host("low", Some(0.0), 0.0),
        ];
        assert_eq!(n.order(rank(&hosts, &HashSet::new())), ["low", "nan"]);
    }
}
