//! The control API's request and response bodies. Only these types cross
//! the control socket; both the server and the client use them, so the two
//! cannot drift apart. This module knows nothing about HTTP or the node.

use crate::guest::{ExitInfo, GuestEvent, KillCause, SandboxReport};
use crate::model::ids::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::consumer::survey::SurveyedHost;
use crate::model::state::State;

/// So do the batch queue's (`gleaner submit`, `gleaner batch`).
pub use super::api_batches::*;
/// The image cache's bodies (`gleaner images`) live in a file of their own.
pub use super::api_images::{ImageEntry, ImagesReport, PruneReport, PruneRequest};

/// `POST /v1/hosts`: survey the pool for a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostsQuery {
    /// Window start, Unix seconds (default: now).
    pub at: Option<i64>,
    pub window_secs: u64,
    pub mem_mib: u64,
    /// Queries per host (more than 1 measures round trips).
    pub rounds: u32,
    /// Ask every host directly instead of answering from the members'
    /// summaries (implied by `rounds` above 1).
    #[serde(default)]
    pub probe: bool,
    /// In a large pool, every host instead of a sample: the pool-wide
    /// summary topic for a while and, with `probe`, a walk of the whole DHT
    /// trie (a cost that grows with the pool).
    #[serde(default)]
    pub all: bool,
}

/// The answer to `hosts`: every member found, ranked ones first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostsReport {
    pub pool: String,
    /// Our own peer id.
    pub peer_id: String,
    pub window_start_unix: i64,
    pub window_secs: u64,
    pub mem_mib: u64,
    pub hosts: Vec<HostReport>,
    /// Whether any member is reachable and what the node is trying; `None`
    /// from a node without networking (or an older one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<crate::net::Contact>,
    /// What the node's table of members holds: how many are known from
    /// summaries and how long ago they were heard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_cache: Option<crate::net::SummaryCache>,
    /// In a large pool, unless asked for all: the listing is a sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<PoolSample>,
}

/// What a `hosts` of a large pool lists instead of every host: the hosts a
/// sample of the pool's DHT leaves names and those the node knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSample {
    /// Hosts listed.
    pub listed: u32,
    /// The pool's size as this node's place in its DHT trie says (within
    /// about a factor of two); `None` before it is placed.
    pub pool_estimate: Option<u64>,
    /// The estimate is only a floor (this node's own key is full).
    #[serde(default)]
    pub at_least: bool,
}

/// One host of `hosts`: the JSON copy of a [`SurveyedHost`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// Peer id (base58).
    pub peer: String,
    /// How we found it: "gossip" and/or "dht".
    pub found_by: Vec<String>,
    /// Addresses it announced.
    pub addresses: Vec<String>,
    /// It returned a reliability response (an answer or "unavailable").
    pub answered: bool,
    /// Temporal reliability for the window, when it could predict.
    pub tr: Option<f64>,
    /// Failure probability by cause ("S3", "S4", "S5").
    pub fail_by_cause: BTreeMap<String, f64>,
    /// State the prediction starts from.
    pub initial_state: Option<String>,
    /// History days behind the prediction.
    pub days_used: Option<u32>,
    /// Its estimator.
    pub method: Option<String>,
    /// Effective computing power Γ = P·A (0..1).
    pub power: Option<f64>,
    /// Guest slot free (from the answer, else from its announcement).
    pub slot_free: Option<bool>,
    /// Current state from its announcement.
    pub state: Option<String>,
    /// Logical CPUs and memory (MiB) it announced.
    pub logical_cpus: Option<u32>,
    pub memory_mib: Option<u64>,
    /// Its Gleaner version.
    pub version: Option<String>,
    /// Why there is no TR (unavailable, timeout, unreachable).
    pub error: Option<String>,
    /// Round trip of the last query, milliseconds.
    pub rtt_ms: Option<f64>,
    /// Round-trip median and 99th percentile over all rounds, milliseconds.
    pub rtt_p50_ms: Option<f64>,
    pub rtt_p99_ms: Option<f64>,
    /// Queries that got a response, of `rounds`.
    pub responses: u32,
    /// Its results this node checked against other hosts' and found valid
    /// or invalid, and its current run of valid ones (docs/trust.md).
    #[serde(default)]
    pub valid: u64,
    #[serde(default)]
    pub invalid: u64,
    #[serde(default)]
    pub streak: u32,
    /// Its attempts as this node counted them in every verify mode: landed,
    /// ended by the host without a result (killed, gone, not started), and
    /// jobs it accepted and then forgot or never ended.
    #[serde(default)]
    pub landed: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub forgotten: u64,
    /// Attempts during which it sent job events past the consumer's budget.
    #[serde(default)]
    pub floods: u64,
    /// Invalid results, forgotten jobs and failures its TR claims
    /// contradict; and where they put it: `clean`, `demoted` (placed
    /// behind clean hosts) or `excluded` (given no work).
    #[serde(default)]
    pub offences: u64,
    #[serde(default)]
    pub standing: String,
    /// Its TR claims scored against what happened to the attempts placed
    /// on them (landed, or ended by the host: killed, gone, not started):
    /// how many, their mean Brier and log score, and the factor placement
    /// multiplies its claimed TR by (its landed attempts over those its
    /// claims promised, at most 1; docs/trust.md).
    #[serde(default)]
    pub claims: u64,
    #[serde(default)]
    pub brier: Option<f64>,
    #[serde(default)]
    pub log_score: Option<f64>,
    #[serde(default = "one")]
    pub claim_discount: f64,
    /// Its claims' reliability curve: per bin of claimed TR that holds a
    /// claim (lowest first), how many, their mean claim and the share that
    /// landed. Empty before its first claim (and from a node before the
    /// curve).
    #[serde(default)]
    pub reliability: Vec<ClaimBinReport>,
    /// Its past week, as it answered: failure episodes begun, mean seconds
    /// up between them and mean seconds away per episode.
    #[serde(default)]
    pub failures_past_week: Option<u32>,
    #[serde(default)]
    pub mean_uptime_secs: Option<f64>,
    #[serde(default)]
    pub mean_outage_secs: Option<f64>,
    /// The lengths it answered of the same week's whole up-spells and
    /// outages (at most 32 each: quantiles when more), ascending.
    #[serde(default)]
    pub up_spell_secs: Vec<f64>,
    #[serde(default)]
    pub outage_secs: Vec<f64>,
    /// Its TR, power, slot and week come from its summary (not asked).
    #[serde(default)]
    pub summarised: bool,
    /// Seconds since its summary (or announcement) was heard: the age of
    /// what `hosts` shows of it.
    #[serde(default)]
    pub heard_secs_ago: Option<f64>,
    /// The images its summary says it holds (`sha256:<hex>`, the most
    /// recently used first); empty when its summary does not say.
    #[serde(default)]
    pub images: Vec<String>,
}

/// One bin of a host's reliability curve in `hosts`: claims of TR in
/// [`from`, `to`) (the last bin holds 1), how many, their mean and the
/// share of them whose attempt landed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimBinReport {
    pub from: f64,
    pub to: f64,
    pub claims: u64,
    pub mean_claim: f64,
    pub finished: f64,
}

impl ClaimBinReport {
    /// The bins of `track`'s curve that hold a claim.
    pub fn curve(track: &crate::model::trust::HostTrack) -> Vec<ClaimBinReport> {
        use crate::model::trust::ClaimBin;
        track
            .curve
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let (from, to) = ClaimBin::bounds(i);
                Some(ClaimBinReport {
                    from,
                    to,
                    claims: b.claims,
                    mean_claim: b.mean_claim()?,
                    finished: b.landed_share()?,
                })
            })
            .collect()
    }
}

/// A claim discount's default: none (a report from a node before scored
/// claims).
fn one() -> f64 {
    1.0
}

impl From<&SurveyedHost> for HostReport {
    fn from(h: &SurveyedHost) -> Self {
        let label = |s: State| s.label().to_string();
        let mut found_by = Vec::new();
        if h.by_gossip {
            found_by.push("gossip".to_string());
        }
        if h.by_dht {
            found_by.push("dht".to_string());
        }
        HostReport {
            peer: h.peer.to_base58(),
            found_by,
            addresses: h.addresses.iter().map(ToString::to_string).collect(),
            answered: h.answered,
            tr: h.tr,
            fail_by_cause: h
                .fail_by_cause
                .map(|f| {
                    State::FAILURES
                        .iter()
                        .zip(f)
                        .map(|(s, p)| (label(*s), p))
                        .collect()
                })
                .unwrap_or_default(),
            initial_state: h.initial_state.map(label),
            days_used: h.days_used,
            method: h.method.clone(),
            power: h.power,
            slot_free: h.slot_free,
            state: h.state.map(label),
            logical_cpus: h.logical_cpus,
            memory_mib: h.memory_mib,
            version: h.version.clone(),
            error: h.error.clone(),
            rtt_ms: h.rtt_ms,
            rtt_p50_ms: h.rtt_p50_ms,
            rtt_p99_ms: h.rtt_p99_ms,
            responses: h.responses,
            valid: 0,
            invalid: 0,
            streak: 0,
            landed: 0,
            failed: 0,
            forgotten: 0,
            floods: 0,
            offences: 0,
            standing: crate::model::trust::Standing::Clean.label().to_string(),
            claims: 0,
            brier: None,
            log_score: None,
            claim_discount: 1.0,
            reliability: Vec::new(),
            failures_past_week: h.spells.map(|s| s.episodes),
            mean_uptime_secs: h.spells.and_then(|s| s.mean_uptime_secs()),
            mean_outage_secs: h.spells.and_then(|s| s.mean_outage_secs()),
            up_spell_secs: h
                .spell_lengths
                .as_ref()
                .map(|l| l.up.clone())
                .unwrap_or_default(),
            outage_secs: h
                .spell_lengths
                .as_ref()
                .map(|l| l.outages.clone())
                .unwrap_or_default(),
            summarised: h.summarised,
            heard_secs_ago: h.heard_secs_ago,
            images: h
                .images
                .iter()
                .map(|id| crate::image::ImageId::from_bytes(id).to_string())
                .collect(),
        }
    }
}

/// The version prefix of every path; bumped on incompatible changes.
pub const PREFIX: &str = "/v1";

/// `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The node's process id.
    pub pid: u32,
    pub data_dir: PathBuf,
    /// Unix seconds when the node started, and now.
    pub started_at: i64,
    pub now: i64,
    /// True while the owner withholds the machine (recorded as S5).
    pub paused: bool,
    /// When a `pause --for` ends, Unix seconds.
    pub paused_until: Option<i64>,
    /// The host's state at the last sample ("S1".."S5"); `None` before the first.
    pub state: Option<String>,
    /// Host CPU load L_H at the last sample, percent of all cores, guest excluded.
    pub cpu: Option<f64>,
    /// Memory available to a guest at the last sample, MiB.
    pub free_mib: Option<u64>,
    /// Load is above Th2 but not for the sustain time yet: a guest is suspended.
    pub suspending: bool,
    /// The monitor's regular sampling period, seconds.
    pub period_secs: Option<f64>,
    /// Unix seconds of the last sample.
    pub last_sample: Option<i64>,
    /// Samples in the history.
    pub samples: usize,
    /// Samples found missing at the end of the history when the node started
    /// (a torn last write, which sled drops silently); 0 when none.
    #[serde(default)]
    pub samples_lost_at_start: u64,
    pub guest: Option<GuestReport>,
    /// Predicted temporal reliability from now for 1, 3 and 10 hours.
    pub predictions: Vec<TrReport>,
    /// The method behind `predictions` (the node's default).
    #[serde(default)]
    pub prediction_method: String,
    /// Where the owner's load comes from: "measured on this host", or
    /// "replayed from FILE" under `gleaner node --owner-load FILE`.
    #[serde(default)]
    pub owner_load: String,
    /// The containment layers a guest gets here (cgroup, namespaces, Landlock).
    #[serde(default)]
    pub containment: String,
    /// How the pool reaches this node (AutoNAT, relays, hole punching); `None`
    /// without networking.
    #[serde(default)]
    pub network: Option<crate::net::Reachability>,
    /// Bytes sent and received over libp2p since the node started (libp2p's
    /// bandwidth metrics); `None` without networking.
    #[serde(default)]
    pub traffic: Option<crate::net::Traffic>,
    /// The members known from summaries and their ages; `None` without
    /// networking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_cache: Option<crate::net::SummaryCache>,
    /// Why no guest runs now; `None` while one runs.
    #[serde(default)]
    pub why_idle: Option<crate::model::owner::IdleReason>,
    /// The schedule or the battery withholds the machine now (state S5).
    #[serde(default)]
    pub withheld: Option<crate::model::owner::S5Cause>,
    /// `[owner] hours`, normalised ("always" without one).
    #[serde(default)]
    pub schedule: String,
    /// A `pause --after-job` waits for the running guest.
    #[serde(default)]
    pub pause_after_job: bool,
    /// How `[guest] cpu_limit_percent` is enforced.
    #[serde(default)]
    pub throttle: crate::guest::ThrottleMode,
}

/// The guest as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestReport {
    pub job_id: JobId,
    pub pid: i32,
    /// "running", "stopped" or "exited".
    pub phase: String,
    /// The kernel's nice value of the main process (absent once exited).
    pub nice: Option<i32>,
    /// The policy's view, e.g. `Running(Background)`.
    pub run_state: String,
    pub mem_mib: u64,
    pub started_at: i64,
    pub exit: Option<ExitInfo>,
    pub kill_cause: Option<KillCause>,
}

/// One predicted window of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrReport {
    pub window_secs: u64,
    /// Probability that no failure hits a job in the window.
    pub tr: Option<f64>,
    /// `tr` is the population prior of a host with no day of its own
    /// record yet, not a forecast from its history.
    #[serde(default)]
    pub prior: bool,
    /// "pool prior" or "built-in prior" when `tr` is a prior (missing: none).
    pub prior_source: Option<String>,
    /// Why there is no prediction (e.g. too little history).
    pub error: Option<String>,
}

/// `POST /v1/pause`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PauseRequest {
    /// Resume by itself after this many seconds.
    pub for_secs: Option<u64>,
    /// Let the running guest finish, then pause (`pause --after-job`).
    #[serde(default)]
    pub after_job: bool,
}

/// The answer to `pause` and `resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseReport {
    pub paused: bool,
    /// False when the node already was in the asked-for state.
    pub changed: bool,
    pub until: Option<i64>,
    /// The job the pause killed, if one ran.
    pub killed_job: Option<JobId>,
    /// `pause --after-job`: the running job the node waits for.
    #[serde(default)]
    pub after_job: Option<JobId>,
}

/// `POST /v1/predict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictQuery {
    pub window_secs: u64,
    /// Window start, Unix seconds; now when absent.
    pub at: Option<i64>,
    /// The job's working set, MiB.
    pub mem_mib: u64,
    /// The method to answer with (a name `gleaner eval` knows); the node's
    /// default (`model::baselines::DEFAULT_METHOD`) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// History days to learn from; the node's `[history] days` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<usize>,
    /// Discretisation step, seconds; the history's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_secs: Option<u32>,
}

/// `POST /v1/run`: run a guest on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLocalRequest {
    pub argv: Vec<String>,
    /// Declared working set, MiB.
    pub mem_mib: u64,
    /// Wall-clock limit, seconds; the node's `guest.max_runtime_secs` when absent.
    pub runtime_secs: Option<u64>,
    /// An image archive on this machine to run in (issue 31): `argv` then
    /// overrides its `Cmd`, and may be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<PathBuf>,
}

/// What the node started for a `run-local`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub job_id: JobId,
    pub pid: i32,
    pub dir: PathBuf,
    pub sandbox: SandboxReport,
}

/// One line of the `run-local` stream (JSON Lines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamLine {
    Started(RunStarted),
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    Event {
        event: GuestEvent,
    },
    /// The job ended; `code` is the exit status a shell would show.
    Exit {
        code: i32,
        exit: Option<ExitInfo>,
        cause: Option<KillCause>,
    },
    /// The stream ended without the job's end being seen.
    Error {
        message: String,
    },
}

/// The answer to `POST /v1/history/import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportSummary {
    pub added: u64,
    pub already_present: u64,
}

/// An error answer: HTTP status and a message for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError {
            status: 409,
            message: message.into(),
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: 404,
            message: message.into(),
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: 500,
            message: message.into(),
        }
    }
    /// 503 with a reason: the node cannot answer this now (no host to
    /// estimate with).
    pub fn unavailable_because(message: impl Into<String>) -> Self {
        ApiError {
            status: 503,
            message: message.into(),
        }
    }
    pub fn unavailable() -> Self {
        ApiError {
            status: 503,
            message: "the node is shutting down".into(),
        }
    }
}

/// The exit status a shell shows for a job's end: the code, or 128 + signal.
pub fn shell_code(exit: Option<ExitInfo>) -> i32 {
    match exit {
        Some(ExitInfo::Code(c)) => c,
        Some(ExitInfo::Signal(s)) => 128 + s,
        None => 1,
    }
}
