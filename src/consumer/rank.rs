//! Ranking hosts for a job: the papers' scheduler picks the host with the
//! highest temporal reliability for the job's window; ties go to the higher
//! effective computing power Γ (seed 004), then to the peer id so the order is
//! stable. Pure: it orders the answers a survey collected.

use std::cmp::Ordering;
use std::collections::HashSet;

use libp2p::PeerId;

use crate::consumer::survey::SurveyedHost;

/// True when `host` can take a job now: it is [`healthy`] and its slot is
/// free.
pub fn eligible(host: &SurveyedHost) -> bool {
    healthy(host) && host.slot_free != Some(false)
}

/// True when `host` answered and is not in a failure state (S3, S4, S5),
/// busy or not.
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
    fn nan_tr_counts_as_unknown() {
        let mut n = Named(HashMap::new());
        let hosts = vec![
            n.host("nan", Some(f64::NAN), 1.0),
            n.host("low", Some(0.0), 0.0),
        ];
        assert_eq!(n.order(rank(&hosts, &HashSet::new())), ["low", "nan"]);
    }
}
