//! What a simulation measured ([`SimResult`]) and how the finished run's
//! counters become it. It knows nothing of how the run made them.

use super::{Policy, ProbeStats, Sim};
use crate::sched::estimate::Quantiles;
use serde::{Deserialize, Serialize};

/// Kills by cause: S3, S4, S5.
pub type Kills = [u64; 3];

/// What one simulation measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    pub policy: Policy,
    pub tasks: usize,
    pub finished: usize,
    /// Tasks not done by the horizon.
    pub unfinished: usize,
    /// Tasks that completed more than once (must be 0).
    pub duplicate_completions: usize,
    /// When the last task ended (seconds), if all did.
    pub makespan_secs: Option<f64>,
    pub mean_turnaround_secs: f64,
    pub p90_turnaround_secs: f64,
    pub kills: Kills,
    pub attempts: u64,
    /// Reference CPU-seconds of work that did not survive (killed work and
    /// checkpoint overhead).
    pub wasted_cpu_secs: f64,
    /// Reference CPU-seconds of the tasks that finished.
    pub useful_cpu_secs: f64,
    /// useful / (useful + wasted).
    pub goodput: f64,
    pub checkpoints: u64,
    /// The Monte Carlo estimate made at submission (proactive rule).
    pub estimate: Option<Quantiles>,
    /// The kills that estimate expected (mean over its runs).
    pub estimate_kills: Option<f64>,
    /// Each task's end (seconds), `None` if unfinished.
    #[serde(skip)]
    pub task_end: Vec<Option<f64>>,
    /// The host whose attempt completed each task first (`verify`).
    #[serde(skip)]
    pub task_host: Vec<Option<usize>>,
    /// Times a task was held for a later window (`windows`).
    pub holds: u64,
    /// The most kills any one task took.
    pub max_task_kills: u32,
    /// What the consumer placed from: "full", "summaries" or "sample".
    pub knowledge: String,
    /// Placing from summaries: rounds, asks, publications.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub probe: Option<ProbeStats>,
    /// Tail copies started (`tail_copies` on), and how many of them
    /// finished before the attempt they copied.
    #[serde(default)]
    pub tail_copies: u64,
    #[serde(default)]
    pub tail_wins: u64,
    /// Reference CPU-seconds the tail copies cost beyond one attempt per
    /// task (cancelled losers, and copies' work lost to kills); also
    /// counted in `wasted_cpu_secs`.
    #[serde(default)]
    pub tail_cpu_secs: f64,
    /// What went to the over-claiming hosts, when the run had any or
    /// scored claims (issue 29; `claims.rs`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub claims: Option<super::ClaimStats>,
    /// Every hold `windows` made (what the task and the pool looked like
    /// then), for reading why holds paid or not.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub hold_log: Vec<HoldNote>,
    /// Under `proactive-auto`: which rule placed the batch, and both
    /// rules' expected makespans it was chosen by (`sched::duel`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duel: Option<crate::sched::duel::Duel>,
}

/// One hold for a later window, as it was decided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HoldNote {
    pub task: usize,
    /// The task's reference runtime, seconds.
    pub runtime_secs: f64,
    /// When it was held (simulation seconds).
    pub at_secs: f64,
    /// The host and start of the window held for, and its chance.
    pub host: usize,
    pub start_in_secs: f64,
    pub p_window: f64,
    /// The best chance a free host gave it then.
    pub p_now: f64,
    /// The median chance of every window weighed for it.
    pub typical_p: f64,
    /// Kills it had taken.
    pub kills: u32,
    /// Tasks waiting then (held ones included).
    pub queued: usize,
    /// When the task started next, on which host, and whether that
    /// attempt was killed.
    pub started_secs: Option<f64>,
    pub started_on: Option<usize>,
    pub killed_after: bool,
}

impl Sim<'_> {
    pub(super) fn result(self) -> SimResult {
        let claims = self.claim_stats();
        let n = self.config.runtimes.len();
        let mut ends: Vec<f64> = self.end.iter().flatten().copied().collect();
        ends.sort_by(f64::total_cmp);
        let finished = ends.len();
        let useful: f64 = self
            .end
            .iter()
            .zip(&self.config.runtimes)
            .filter(|(e, _)| e.is_some())
            .map(|(_, r)| r)
            .sum();
        let p90 = if ends.is_empty() {
            0.0
        } else {
            ends[((0.9 * ends.len() as f64).ceil() as usize).clamp(1, ends.len()) - 1]
        };
        SimResult {
            policy: self.config.policy,
            tasks: n,
            finished,
            unfinished: n - finished,
            duplicate_completions: self.completions.iter().filter(|c| **c > 1).count(),
            makespan_secs: (finished == n).then(|| ends.last().copied().unwrap_or(0.0)),
            mean_turnaround_secs: if finished > 0 {
                ends.iter().sum::<f64>() / finished as f64
            } else {
                0.0
            },
            p90_turnaround_secs: p90,
            kills: self.kills,
            attempts: self.attempts,
            wasted_cpu_secs: self.wasted,
            useful_cpu_secs: useful,
            goodput: if useful + self.wasted > 0.0 {
                useful / (useful + self.wasted)
            } else {
                0.0
            },
            checkpoints: self.checkpoints,
            estimate: self.estimate.map(|e| e.0),
            estimate_kills: self.estimate.map(|e| e.1),
            task_end: self.end,
            task_host: self.end_host,
            holds: self.holds,
            max_task_kills: self.task_kills.iter().copied().max().unwrap_or(0),
            knowledge: match self.summaries.as_deref() {
                Some(s) if s.sampled() => "sample",
                Some(_) => "summaries",
                None => "full",
            }
            .to_string(),
            probe: self.summaries.as_ref().map(|s| s.stats()),
            tail_copies: self.tail_copies,
            tail_wins: self.tail_wins,
            tail_cpu_secs: self.tail_cpu,
            claims,
            hold_log: self.hold_log,
            duel: None,
        }
    }
}
