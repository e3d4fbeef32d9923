//! Semi-Markov holding-time kernels estimated from state sequences.
//!
//! A history day's window is a sequence of m + 1 states. Maximal runs of S1
//! or S2 are the observations: a run that meets another state after `l`
//! steps is an event (i → j, l); a run still going at the window's end is
//! right-censored after `l` steps. From these we estimate the one-step kernel
//! q_ij(l) = Q_i(j)·H_ij(l) with one of two estimators (see [`Method`]).
//! Pure code: sequences in, kernel out.

use crate::state::State;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How the kernel is estimated from runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The seed papers' estimator: q_ij(l) = n_ij(l) / n_i, where n_i counts
    /// every run of i, censored runs included (they count as never leaving).
    Paper,
    /// Aalen–Johansen (Kaplan–Meier with competing risks): censored runs
    /// leave the risk set instead of counting as "never leaves".
    Km,
}

impl Method {
    pub const ALL: [Method; 2] = [Method::Paper, Method::Km];

    pub fn name(self) -> &'static str {
        match self {
            Method::Paper => "paper",
            Method::Km => "km",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an estimator name we do not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown method {0:?}: expected `paper` or `km`")]
pub struct UnknownMethod(String);

impl FromStr for Method {
    type Err = UnknownMethod;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "paper" => Ok(Method::Paper),
            "km" => Ok(Method::Km),
            _ => Err(UnknownMethod(s.to_string())),
        }
    }
}

/// Where a run of a transient state can go. Index 0 is the other transient
/// state (S1 ↔ S2); 1..=3 are S3, S4, S5.
pub const TARGETS: usize = 4;

/// Index of the kernel row of a transient state (S1 → 0, S2 → 1).
pub fn transient_index(s: State) -> Option<usize> {
    match s {
        State::S1 => Some(0),
        State::S2 => Some(1),
        _ => None,
    }
}

/// Column of target `to` in a kernel row of a transient state.
fn target_index(to: State) -> usize {
    match to {
        State::S1 | State::S2 => 0,
        State::S3 => 1,
        State::S4 => 2,
        State::S5 => 3,
    }
}

/// The runs of S1 and S2 seen in a set of windows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunObservations {
    /// Per transient state: (holding steps l, target column) of each run that ended.
    events: [Vec<(u32, u8)>; 2],
    /// Per transient state: steps observed of each run still going at the window's end.
    censored: [Vec<u32>; 2],
}

impl RunObservations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the runs of one window's state sequence (states at k = 0..=m).
    pub fn add_window(&mut self, states: &[State]) {
        let Some(m) = states.len().checked_sub(1) else {
            return;
        };
        let mut start = 0;
        while start <= m {
            let s = states[start];
            let mut end = start + 1;
            while end <= m && states[end] == s {
                end += 1;
            }
            if let Some(i) = transient_index(s) {
                if end <= m {
                    let l = (end - start) as u32;
                    self.events[i].push((l, target_index(states[end]) as u8));
                } else {
                    self.censored[i].push((m - start) as u32);
                }
            }
            start = end;
        }
    }

    /// Number of runs of a transient state (events plus censored).
    pub fn runs(&self, i: usize) -> usize {
        self.events[i].len() + self.censored[i].len()
    }

    /// Number of runs of a transient state that ended inside a window.
    pub fn events(&self, i: usize) -> usize {
        self.events[i].len()
    }

    /// Estimates the kernel with the given method.
    pub fn estimate(&self, method: Method) -> HoldingTimeKernel {
        let row = |i: usize| {
            let mut events = self.events[i].clone();
            events.sort_unstable();
            let mut censored = self.censored[i].clone();
            censored.sort_unstable();
            let entries = match method {
                Method::Paper => paper_row(&events, censored.len()),
                Method::Km => km_row(&events, &censored),
            };
            KernelRow {
                entries,
                runs: self.runs(i),
            }
        };
        HoldingTimeKernel {
            rows: [row(0), row(1)],
        }
    }
}

/// q(l) for one holding time `l` of one transient state, by target column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelEntry {
    /// Holding time in steps (≥ 1).
    pub l: u32,
    /// q_ij(l) for j = other transient, S3, S4, S5.
    pub q: [f64; TARGETS],
}

/// The kernel row of one transient state: only holding times with mass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelRow {
    /// Sorted by `l`, no duplicates, only entries with some mass.
    pub entries: Vec<KernelEntry>,
    /// Runs the row was estimated from.
    pub runs: usize,
}

impl KernelRow {
    /// S_i(a) = 1 − Σ_{l ≤ a} Σ_j q_ij(l): the chance a sojourn lasts beyond `a` steps.
    /// Both estimators satisfy this identity.
    pub fn survival(&self, a: u32) -> f64 {
        let left: f64 = self
            .entries
            .iter()
            .take_while(|e| e.l <= a)
            .map(|e| e.q.iter().sum::<f64>())
            .sum();
        (1.0 - left).clamp(0.0, 1.0)
    }

    /// The row conditioned on a sojourn already `a` steps old:
    /// q_ij(a + l) / S_i(a). `None` when S_i(a) is zero (see `predict`'s fallback).
    pub fn aged(&self, a: u32) -> Option<KernelRow> {
        if a == 0 {
            return Some(self.clone());
        }
        let s = self.survival(a);
        if s <= 1e-12 {
            return None;
        }
        let entries = self
            .entries
            .iter()
            .filter(|e| e.l > a)
            .map(|e| KernelEntry {
                l: e.l - a,
                q: e.q.map(|v| v / s),
            })
            .collect();
        Some(KernelRow {
            entries,
            runs: self.runs,
        })
    }

    /// Longest holding time with mass (0 for an empty row).
    pub fn support(&self) -> u32 {
        self.entries.last().map_or(0, |e| e.l)
    }
}

/// The estimated one-step kernel q_ij(l) for i in {S1, S2}. Rows of failure
/// states are implicit: S3, S4 and S5 are absorbing within a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HoldingTimeKernel {
    /// Index 0 is S1, 1 is S2.
    pub rows: [KernelRow; 2],
}

impl HoldingTimeKernel {
    /// The row of a transient state.
    pub fn row(&self, s: State) -> Option<&KernelRow> {
        transient_index(s).map(|i| &self.rows[i])
    }
}

/// The papers' estimator over events sorted by (l, target).
fn paper_row(events: &[(u32, u8)], censored: usize) -> Vec<KernelEntry> {
    let n = (events.len() + censored) as f64;
    let mut entries: Vec<KernelEntry> = Vec::new();
    for &(l, j) in events {
        if entries.last().map(|e| e.l) != Some(l) {
            entries.push(KernelEntry {
                l,
                q: [0.0; TARGETS],
            });
        }
        if let Some(e) = entries.last_mut() {
            e.q[usize::from(j)] += 1.0 / n;
        }
    }
    entries
}

/// Aalen–Johansen over sorted events and censoring times: hazards
/// h_ij(l) = d_ij(l) / R_i(l) with R_i(l) the runs observed for at least l
/// steps, S_i(l) = Π_{u ≤ l} (1 − Σ_j h_ij(u)), q_ij(l) = S_i(l − 1)·h_ij(l).
fn km_row(events: &[(u32, u8)], censored: &[u32]) -> Vec<KernelEntry> {
    let total = events.len() + censored.len();
    let mut entries = Vec::new();
    let mut survival = 1.0;
    // Runs known to have left the risk set before the current l.
    let mut gone_events = 0;
    let mut gone_censored = 0;
    let mut k = 0;
    while k < events.len() {
        let l = events[k].0;
        while gone_censored < censored.len() && censored[gone_censored] < l {
            gone_censored += 1;
        }
        let at_risk = (total - gone_events - gone_censored) as f64;
        let mut deaths = [0usize; TARGETS];
        while k < events.len() && events[k].0 == l {
            deaths[usize::from(events[k].1)] += 1;
            k += 1;
        }
        let died: usize = deaths.iter().sum();
        let hazards = deaths.map(|d| d as f64 / at_risk);
        entries.push(KernelEntry {
            l,
            q: hazards.map(|h| survival * h),
        });
        survival *= 1.0 - hazards.iter().sum::<f64>();
        gone_events += died;
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use State::*;

    fn kernel(seqs: &[&[State]], method: Method) -> HoldingTimeKernel {
        let mut obs = RunObservations::new();
        for s in seqs {
            obs.add_window(s);
        }
        obs.estimate(method)
    }

    fn q(k: &HoldingTimeKernel, from: State, l: u32, to: State) -> f64 {
        k.row(from)
            .unwrap()
            .entries
            .iter()
            .find(|e| e.l == l)
            .map_or(0.0, |e| e.q[target_index(to)])
    }

    #[test]
    fn runs_are_split_into_events_and_censored() {
        let mut obs = RunObservations::new();
        // Runs: S1 x2 → S2, S2 x1 → S3, S3 (ignored), S1 x2 censored after 1 step.
        obs.add_window(&[S1, S1, S2, S3, S1, S1]);
        assert_eq!(obs.events[0], vec![(2, 0)]);
        assert_eq!(obs.events[1], vec![(1, 1)]);
        assert_eq!(obs.censored[0], vec![1]);
        assert!(obs.censored[1].is_empty());
    }

    #[test]
    fn paper_estimator_matches_hand_computation() {
        // S1 runs: (l=2 → S2), (l=3 → S3), censored l=1, (l=2 → S5). n_1 = 4.
        let day1: &[State] = &[S1, S1, S2, S1, S1, S1, S3];
        let day2: &[State] = &[S1, S1, S5, S5, S5, S1, S1];
        let k = kernel(&[day1, day2], Method::Paper);
        assert!((q(&k, S1, 2, S2) - 0.25).abs() < 1e-15);
        assert!((q(&k, S1, 3, S3) - 0.25).abs() < 1e-15);
        assert!((q(&k, S1, 2, S5) - 0.25).abs() < 1e-15);
        assert_eq!(q(&k, S1, 1, S2), 0.0);
        // S2: one run of l=1 → S1. n_2 = 1.
        assert!((q(&k, S2, 1, S1) - 1.0).abs() < 1e-15);
        assert_eq!(k.rows[0].runs, 4);
    }

    #[test]
    fn km_estimator_matches_hand_computation() {
        // Same runs of S1: events at l=2 (→S2, →S5), l=3 (→S3); censored at l=1.
        // R(2) = 3 (the censored-at-1 run left), h(2) = 1/3 each to S2 and S5,
        // S(2) = 1/3; R(3) = 1, h(3) = 1 to S3, q(3) = S(2)·1 = 1/3.
        let day1: &[State] = &[S1, S1, S2, S1, S1, S1, S3];
        let day2: &[State] = &[S1, S1, S5, S5, S5, S1, S1];
        let k = kernel(&[day1, day2], Method::Km);
        assert!((q(&k, S1, 2, S2) - 1.0 / 3.0).abs() < 1e-15);
        assert!((q(&k, S1, 2, S5) - 1.0 / 3.0).abs() < 1e-15);
        assert!((q(&k, S1, 3, S3) - 1.0 / 3.0).abs() < 1e-15);
        assert!(k.rows[0].survival(3).abs() < 1e-15);
    }

    #[test]
    fn censored_run_at_a_later_step_stays_at_risk() {
        // S1 events at l=1 (→S2) and a run censored after 3 steps: R(1) = 2.
        let k = kernel(&[&[S1, S2, S1, S1, S1, S1]], Method::Km);
        assert!((q(&k, S1, 1, S2) - 0.5).abs() < 1e-15);
        assert!((k.rows[0].survival(10) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn survival_and_aging() {
        let k = kernel(&[&[S1, S1, S2, S1, S1, S1, S3]], Method::Paper);
        let row = &k.rows[0];
        // Runs: l=2 → S2, l=3 → S3. n = 2.
        assert!((row.survival(1) - 1.0).abs() < 1e-15);
        assert!((row.survival(2) - 0.5).abs() < 1e-15);
        let aged = row.aged(2).unwrap();
        assert_eq!(aged.entries.len(), 1);
        assert_eq!(aged.entries[0].l, 1);
        assert!((aged.entries[0].q[target_index(S3)] - 1.0).abs() < 1e-15);
        assert!(row.aged(3).is_none());
    }

    #[test]
    fn method_names_parse() {
        assert_eq!("KM".parse::<Method>().unwrap(), Method::Km);
        assert_eq!("paper".parse::<Method>().unwrap(), Method::Paper);
        assert!("foo".parse::<Method>().is_err());
    }
}
