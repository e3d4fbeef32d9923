//! The control API's bodies for the batch queue (`POST /v1/batches`,
//! `gleaner submit`, `gleaner batch status|results|cancel`), re-exported
//! by [`super::api`] with every other body: a file of their own so that
//! `api.rs` stays one job's length. Knows nothing about HTTP or the node.

use crate::model::ids::BatchId;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `POST /v1/batches`: a new batch. Paths are absolute (the client resolves
/// them against its working directory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSubmitRequest {
    #[serde(default)]
    pub name: Option<String>,
    /// The command template (`{}` and `{column}` are filled per task).
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    #[serde(default)]
    pub inputs: Vec<BatchInput>,
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Where each task's results are copied as it lands (`DIR/<task>/`).
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
    #[serde(default)]
    pub mem_mib: u64,
    pub runtime_secs: u64,
    pub limit_secs: u64,
    /// `--range A..B`: one task per integer, B excluded.
    #[serde(default)]
    pub range: Option<(i64, i64)>,
    /// `--params FILE.csv`, parsed by the client.
    #[serde(default)]
    pub params: Option<ParamsTable>,
    #[serde(default)]
    pub max_running: Option<u32>,
    /// `--policy`: how hosts are chosen (`proactive`, `tr`, `power`,
    /// `random`); the default is `proactive`.
    #[serde(default)]
    pub policy: Option<String>,
    /// `--deadline`, Unix seconds.
    #[serde(default)]
    pub deadline_unix: Option<i64>,
    /// `--checkpoint FILE`: the file each task saves its state to
    /// (relative to its work directory).
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// `--checkpoint-cost`: seconds one checkpoint costs, as declared.
    #[serde(default)]
    pub checkpoint_cost_secs: Option<u64>,
    /// `--verify`, `--replicas`, `--quorum`, `--validator` (docs/trust.md);
    /// absent: no verification.
    #[serde(default)]
    pub verify: Option<crate::consumer::batch::verify::VerifySpec>,
    /// Answer with the `wait` stream (JSON lines, from a first `queued`
    /// line on) instead of [`BatchCreated`]: no event is missed between
    /// queueing and waiting.
    #[serde(default)]
    pub wait: bool,
    /// `--image FILE` (absolute): every task runs in this image; `argv`
    /// then replaces its `Cmd` and may be empty (docs/images.md).
    #[serde(default)]
    pub image: Option<PathBuf>,
}

/// One `--input LOCAL[=REMOTE]`; both may hold placeholders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchInput {
    pub local: PathBuf,
    pub remote: String,
}

/// A params file: the header's columns and one row per task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamsTable {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// The answer to `POST /v1/batches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchCreated {
    pub id: BatchId,
    pub tasks: u32,
}

/// Tasks by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCounts {
    pub queued: u32,
    pub running: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
}

/// One task as `batch status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    pub task: u32,
    /// queued, running, done, failed or cancelled.
    pub state: String,
    pub host: Option<String>,
    pub attempts: u32,
    pub exit_status: Option<i32>,
    pub started_unix: Option<i64>,
    pub ended_unix: Option<i64>,
    #[serde(default)]
    pub reason: Option<String>,
    /// In a `wait` stream: the host's job event this line reports
    /// ("inputs ready: …", "started", "reniced …"), when that is the news.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// CPU seconds the task's guests used so far, as their hosts reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_secs: Option<f64>,
    /// Size of the task's latest checkpoint kept by this node, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_bytes: Option<u64>,
    /// A verified task's copies (`batch status` only): while it is being
    /// decided from the queue, after from its `provenance.json`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<CopyReport>,
    /// Attempts killed because their host's owner took it back (S3, S4,
    /// S5): not counted against the task's retries.
    #[serde(default)]
    pub owner_kills: u32,
    /// Hosts the task failed on for other reasons (gone, wall-time limit,
    /// bad output): counted against `max_retries`.
    #[serde(default)]
    pub host_failures: u32,
    /// A queued task held for a host's later window (`batch status` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<HoldReport>,
}

/// The later window a queued task waits for: no free host is likely to
/// finish it now, and this host's forecast says it will then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HoldReport {
    /// The host, base58.
    pub host: String,
    /// When the window opens, Unix seconds.
    pub start_unix: i64,
    /// The host's TR for a run in that window.
    pub p: f64,
}

/// One copy of a verified task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyReport {
    pub host: String,
    /// While the task is decided: `running`, `judging` or `landed`; after:
    /// `accepted` (its copy is the result), `agreed` or `disagreed`.
    pub state: String,
    /// Landed copies with the same group agree (while being decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// Whether it agrees with the accepted result (once decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agrees: Option<bool>,
    /// BLAKE3 digest of its result, hex (once decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// How a batch's results are checked (docs/trust.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerificationReport {
    /// `none`, `replicate` or `adaptive`.
    pub mode: String,
    pub replicas: u32,
    pub quorum: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
}

impl Default for VerificationReport {
    fn default() -> Self {
        VerificationReport {
            mode: "none".into(),
            replicas: 1,
            quorum: 1,
            validator: None,
        }
    }
}

/// `GET /v1/batches/{id}`; without `tasks` in `batch list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchReport {
    pub id: BatchId,
    pub name: Option<String>,
    pub created_unix: i64,
    pub counts: TaskCounts,
    #[serde(default)]
    pub tasks: Vec<TaskReport>,
    pub eta_unix: Option<i64>,
    /// The node's copy of the results.
    pub results_dir: PathBuf,
    pub output_dir: Option<PathBuf>,
    pub cancelled: bool,
    /// How its hosts are chosen (`proactive`, `tr`, `power`, `random`).
    #[serde(default)]
    pub policy: String,
    #[serde(default)]
    pub deadline_unix: Option<i64>,
    /// How its results are checked.
    #[serde(default)]
    pub verification: VerificationReport,
    /// The estimate of its end (`batch status` of a batch still running,
    /// once the node has surveyed the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<EstimateReport>,
    /// While no pool member is reachable: since when, and what the node is
    /// trying (`batch status` says why tasks stay queued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<crate::net::Contact>,
    /// The members known from summaries and their ages, which the batch's
    /// placement ranks from (`batch status`). Boxed: a batch's line of
    /// `wait` would otherwise outgrow a task's by more than clippy allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_cache: Option<Box<crate::net::SummaryCache>>,
}

/// `POST /v1/batches/estimate`, and a running batch's in `batch status`:
/// CISNE's Algorithm 1 over the pool's hosts (Monte Carlo, SDPN slowdowns,
/// failures drawn from each host's TR curve).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateReport {
    /// When it was made, Unix seconds.
    pub at_unix: i64,
    /// Seconds from then until the last task ends: 10th, 50th and 90th
    /// percentile and the mean over the runs. `None` (JSON `null`) where
    /// that share of the runs never ended: runs that gave up on a task no
    /// host of the survey is likely to finish (one held for a later
    /// window, say) have no end, so the quantiles past them, and the mean,
    /// have none either. A number is always finite.
    pub makespan_p10_secs: Option<f64>,
    pub makespan_p50_secs: Option<f64>,
    pub makespan_p90_secs: Option<f64>,
    pub makespan_mean_secs: Option<f64>,
    /// The chance of ending by the deadline, when there is one.
    pub p_deadline: Option<f64>,
    pub deadline_unix: Option<i64>,
    /// Hosts the tasks were spread over, and Monte Carlo runs.
    pub hosts: usize,
    pub runs: usize,
    /// Runs that gave up on a task (it was killed on host after host): the
    /// runs with no end.
    #[serde(default)]
    pub unfinished_runs: usize,
    /// Each task not yet ended, by number: when it is expected to end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskEtaReport>,
}

/// When one task is expected to end, seconds from the estimate's `at_unix`;
/// `None` where that share of the runs never ended it (as the makespan's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEtaReport {
    pub task: u32,
    pub end_p10_secs: Option<f64>,
    pub end_p50_secs: Option<f64>,
    pub end_p90_secs: Option<f64>,
}

/// One line of `POST /v1/batches/{id}/wait`: task events, then the batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BatchLine {
    /// First line of `POST /v1/batches` with `wait`: the batch is queued.
    Queued { batch: BatchId, tasks: u32 },
    /// A task changed state.
    Task {
        batch: BatchId,
        #[serde(flatten)]
        task: TaskReport,
    },
    /// The batch has ended (or, with `follow: false`, as it stands).
    Batch(BatchReport),
}

/// `POST /v1/batches/{id}/results`: copy what landed into `out`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchResultsRequest {
    pub out: PathBuf,
}

/// The answer to `POST /v1/batches/{id}/results`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResultsCopied {
    /// Tasks whose results were copied.
    pub tasks: u32,
    pub out: PathBuf,
}
