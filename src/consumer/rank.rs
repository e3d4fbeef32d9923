//! Ranking hosts for a job: the papers' scheduler picks the host with the
//! highest temporal reliability for the job's window; ties go to the higher
//! effective computing power Γ (seed 004), then to the peer id so the order is
//! stable. Pure: it orders the answers a survey collected.

use std::cmp::Ordering;
use std::collections::HashSet;

use crate::consumer::survey::HostReport;

/// True when `host` can take a job now: it answered, its slot is free and it
/// is not in a failure state (S3, S4, S5).
pub fn eligible(host: &HostReport) -> bool {
    host.answered
        && host.slot_free != Some(false)
        && !matches!(host.state.as_deref(), Some("S3" | "S4" | "S5"))
        && !matches!(host.initial_state.as_deref(), Some("S3" | "S4" | "S5"))
}

/// The eligible hosts not in `exclude`, best first: known TR before unknown
/// (a host without enough history to predict), higher TR first, then higher
/// Γ, then peer id.
pub fn rank<'a>(hosts: &'a [HostReport], exclude: &HashSet<String>) -> Vec<&'a HostReport> {
    let mut ranked: Vec<&HostReport> = hosts
        .iter()
        .filter(|h| eligible(h) && !exclude.contains(&h.peer))
        .collect();
    ranked.sort_by(|a, b| compare(a, b));
    ranked
}

fn compare(a: &HostReport, b: &HostReport) -> Ordering {
    let tr = |h: &HostReport| h.tr.filter(|t| t.is_finite());
    match (tr(a), tr(b)) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| b.power.unwrap_or(0.0).total_cmp(&a.power.unwrap_or(0.0)))
    .then_with(|| a.peer.cmp(&b.peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(peer: &str, tr: Option<f64>, power: f64) -> HostReport {
        HostReport {
            peer: peer.into(),
            answered: true,
            tr,
            power: Some(power),
            slot_free: Some(true),
            state: Some("S1".into()),
            ..HostReport::default()
        }
    }

    #[test]
    fn higher_tr_first_then_power_then_unknown_tr_last() {
        let hosts = vec![
            host("a", Some(0.5), 0.9),
            host("b", Some(0.9), 0.1),
            host("c", None, 1.0),
            host("d", Some(0.9), 0.8),
        ];
        let order: Vec<&str> = rank(&hosts, &HashSet::new())
            .iter()
            .map(|h| h.peer.as_str())
            .collect();
        assert_eq!(order, ["d", "b", "a", "c"]);
    }

    #[test]
    fn busy_failed_silent_and_excluded_hosts_are_left_out() {
        let mut busy = host("busy", Some(1.0), 1.0);
        busy.slot_free = Some(false);
        let mut s3 = host("s3", Some(1.0), 1.0);
        s3.state = Some("S3".into());
        let mut silent = host("silent", None, 1.0);
        silent.answered = false;
        let tried = host("tried", Some(1.0), 1.0);
        let ok = host("ok", Some(0.1), 0.1);
        let hosts = vec![busy, s3, silent, tried, ok];
        let exclude = HashSet::from(["tried".to_string()]);
        let order: Vec<&str> = rank(&hosts, &exclude)
            .iter()
            .map(|h| h.peer.as_str())
            .collect();
        assert_eq!(order, ["ok"]);
    }

    #[test]
    fn nan_tr_counts_as_unknown() {
        let hosts = vec![
            host("nan", Some(f64::NAN), 1.0),
            host("low", Some(0.0), 0.0),
        ];
        let order: Vec<&str> = rank(&hosts, &HashSet::new())
            .iter()
            .map(|h| h.peer.as_str())
            .collect();
        assert_eq!(order, ["low", "nan"]);
    }
}
