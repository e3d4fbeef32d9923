//! `gleaner submit`: run one task on the pool and wait for it, as a shell
//! runs a command: its stdout and stderr come out here, its declared output
//! files land in `--output-dir`, and `submit` exits with its status.
//!
//! There is no second way to run work: `submit` queues a batch of one task
//! through the node's batch queue (`gleaner batch`), so placement, retries,
//! restarts of the node and verified results are the batch's. What this
//! module adds is the waiting: it gives up (exit 75, the batch cancelled)
//! when no host has taken the task within `--queue-limit`, as the old
//! single-job path failed when no host could take the job; time the task
//! spends held for a host's later window is not counted (the queue chose
//! that host and time).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use crate::cli::args::parse_duration;
use crate::cli::batch::{short, task_request, warn_if_deadline_at_risk, TaskArgs, EXIT_NOT_RUN};
use crate::cli::control::{block_on, client};
use crate::cli::output::print_json;
use crate::cli::Global;
use crate::control::api::{
    BatchLine, BatchReport, BatchResultsCopied, BatchResultsRequest, BatchSubmitRequest,
    TaskCounts, TaskReport, PREFIX,
};
use crate::control::client::{ControlClient, LineReader};
use crate::model::ids::BatchId;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Where the declared output files are written.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub output_dir: PathBuf,
    /// Give up (exit 75, nothing left queued) when no host has taken the task
    /// within this time of it waiting: every host busy, refusing or gone.
    /// While the task is held for a host's later window (`[batch]
    /// later_windows`), it is not waiting for a host: submit waits for the
    /// window, and the limit counts again from zero if the hold ends.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub queue_limit: u64,
    #[command(flatten)]
    pub task: TaskArgs,
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

/// Most bytes of stdout or stderr the `--json` result line carries; the
/// whole files stay in the node's copy of the batch's results.
const JSON_TEXT_MAX: u64 = 1 << 20;

/// The last line of `submit --json`.
#[derive(Debug, Serialize)]
struct SubmitResult {
    #[serde(rename = "type")]
    kind: &'static str,
    batch: BatchId,
    /// done, failed, cancelled (or queued when it was given up).
    state: String,
    host: Option<String>,
    attempts: u32,
    exit_status: Option<i32>,
    reason: Option<String>,
    /// The task's stdout and stderr as text (invalid UTF-8 replaced), at
    /// most [`JSON_TEXT_MAX`] bytes each.
    stdout: String,
    stderr: String,
    /// True when either was cut at that size.
    truncated: bool,
    /// The declared outputs, where they landed.
    outputs: Vec<PathBuf>,
}

/// `gleaner submit`: exits with the task's status (75 when no host ran it).
pub fn submit(args: &SubmitArgs, global: &Global) -> anyhow::Result<()> {
    let request = task_request(&args.task)?;
    let out_dir = std::path::absolute(&args.output_dir)
        .with_context(|| format!("--output-dir {}", args.output_dir.display()))?;
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("--output-dir {}", out_dir.display()))?;
    let (_, client) = client(global)?;
    let (json, quiet) = (global.json, global.quiet);
    let queue_limit = Duration::from_secs(args.queue_limit.max(1));
    let outputs = args.task.output.clone();
    let code = block_on(async move {
        if !quiet {
            warn_if_deadline_at_risk(&client, &request).await?;
        }
        // Queued and followed in one request, so no event of the task is
        // missed (it may start within milliseconds).
        let mut lines = client
            .post_stream(
                &format!("{PREFIX}/batches"),
                &BatchSubmitRequest {
                    wait: true,
                    ..request
                },
            )
            .await?;
        let Some(first) = lines.next::<BatchLine>().await? else {
            bail!("the node closed the stream before queueing the task");
        };
        let BatchLine::Queued { batch, .. } = first else {
            bail!("the node did not say it queued the task");
        };
        if json {
            print_json(&first)?;
        }
        let report = follow(&client, batch, lines, queue_limit, json, quiet).await?;
        finish(&client, &report, &out_dir, &outputs, json).await
    })??;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// Follows the one task until its batch ends, or cancels it when it waited
/// in the queue for `queue_limit`. Returns the batch as it ended.
async fn follow(
    client: &ControlClient,
    id: BatchId,
    mut lines: LineReader,
    queue_limit: Duration,
    json: bool,
    quiet: bool,
) -> anyhow::Result<BatchReport> {
    let say = |text: String| {
        if !quiet && !json {
            eprintln!("gleaner: {text}");
        }
    };
    let waiting_since = tokio::time::sleep(queue_limit);
    tokio::pin!(waiting_since);
    let mut wait = QueueWait::new();
    let mut last_reason: Option<String> = None;
    let mut last_state: Option<String> = None;
    let mut gave_up = false;
    loop {
        let line = tokio::select! {
            line = lines.next::<BatchLine>() => line?,
            _ = &mut waiting_since, if wait.counts() && !gave_up => {
                gave_up = true;
                say(format!(
                    "no host took the task within {}; giving up{}",
                    crate::human::duration(queue_limit.as_secs()),
                    last_reason.as_deref().map(|r| format!(" (last: {r})")).unwrap_or_default()
                ));
                let _: TaskCounts = client
                    .post_json(&format!("{PREFIX}/batches/{id}/cancel"), &())
                    .await?;
                continue;
            }
        };
        let Some(line) = line else {
            bail!("the node stopped before the task ended; `gleaner batch wait {id}` follows it again");
        };
        if json {
            print_json(&line)?;
        }
        match line {
            BatchLine::Task { task, .. } => {
                if wait.on_task(&task) {
                    waiting_since
                        .as_mut()
                        .reset(tokio::time::Instant::now() + queue_limit);
                }
                // The same state again (the host took the job) is no news.
                let news = task.event.is_some()
                    || last_state.as_deref() != Some(task.state.as_str())
                    || (task.reason.is_some() && task.reason != last_reason);
                if news {
                    progress(&task, &say);
                }
                last_state = Some(task.state.clone());
                // Why it waits (a refusal, a failed host); not the end's
                // own words ("cancelled" after giving up).
                if task.reason.is_some() && matches!(task.state.as_str(), "queued" | "running") {
                    last_reason.clone_from(&task.reason);
                }
            }
            BatchLine::Queued { .. } => {}
            BatchLine::Batch(report) => {
                let mut report = report;
                if gave_up {
                    if let Some(t) = report.tasks.first_mut() {
                        t.reason = Some(format!(
                            "no host took it within {} s{}",
                            queue_limit.as_secs(),
                            last_reason
                                .map(|r| format!("; last: {r}"))
                                .unwrap_or_default()
                        ));
                    }
                }
                return Ok(report);
            }
        }
    }
}

/// What `--queue-limit` counts: time the task spends queued with no host
/// taking it. A task held for a host's later window has a host and a time
/// (the queue chose them over every host free now), so the limit does not
/// run while it is held; before, `submit` cancelled the batch 30 s into
/// the hold and the window was lost.
#[derive(Debug, Clone, Copy, PartialEq)]
struct QueueWait {
    queued: bool,
    held: bool,
}

impl QueueWait {
    /// A task just submitted: queued, not held.
    fn new() -> Self {
        QueueWait {
            queued: true,
            held: false,
        }
    }

    /// Whether the limit runs now.
    fn counts(&self) -> bool {
        self.queued && !self.held
    }

    /// Takes a line of the task's; true when the limit starts counting
    /// again from zero: the task is back in the queue (its host failed or
    /// refused it) or its hold ended with it still queued.
    fn on_task(&mut self, t: &TaskReport) -> bool {
        let counted = self.counts();
        self.queued = t.state == "queued";
        self.held = self.queued && t.waiting_for.is_some();
        !counted && self.counts()
    }
}

fn progress(t: &TaskReport, say: &impl Fn(String)) {
    let host = t.host.as_deref().map(short);
    if let Some(event) = &t.event {
        // A queue's news (a hold) has no host; a host's job event has.
        say(match host {
            Some(host) => format!("{host}: {event}"),
            None => event.clone(),
        });
        return;
    }
    let host = host.unwrap_or("-");
    match t.state.as_str() {
        "running" => say(format!("attempt {} on host {host}", t.attempts)),
        "queued" => {
            if let Some(r) = &t.reason {
                say(format!("waiting for a host: {r}"));
            }
        }
        "done" | "failed" => say(format!(
            "the task ended on {host} after {} attempt(s){}",
            t.attempts,
            t.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )),
        _ => {}
    }
}

/// Brings the task's results out: stdout and stderr here (or in the JSON
/// result line), declared outputs into `out_dir`. Returns the exit code.
async fn finish(
    client: &ControlClient,
    report: &BatchReport,
    out_dir: &Path,
    outputs: &[String],
    json: bool,
) -> anyhow::Result<i32> {
    let Some(task) = report.tasks.first() else {
        bail!("batch {} has no task", report.id);
    };
    let landed = task.exit_status.is_some();
    let mut placed = Vec::new();
    let mut texts = (String::new(), String::new(), false);
    if landed {
        // The node copies the results (it may read its data dir; this user
        // may not) into a staging dir beside the outputs' place, from which
        // they are renamed: a reader never sees half a file.
        let staging = out_dir.join(format!(".gleaner-submit-{}", report.id));
        let copied: BatchResultsCopied = client
            .post_json(
                &format!("{PREFIX}/batches/{}/results", report.id),
                &BatchResultsRequest {
                    out: staging.clone(),
                },
            )
            .await?;
        let dir = copied.out.join(task.task.to_string());
        let result = place_results(&dir, out_dir, outputs, json, &mut placed, &mut texts);
        let _ = std::fs::remove_dir_all(&staging);
        result?;
        if let (false, "failed", Some(0), Some(reason)) = (
            json,
            task.state.as_str(),
            task.exit_status,
            task.reason.as_deref(),
        ) {
            eprintln!("gleaner: {reason}");
        }
    } else if !json {
        eprintln!(
            "gleaner: the task did not run: {}",
            task.reason.as_deref().unwrap_or("no reason given")
        );
    }
    if json {
        print_json(&SubmitResult {
            kind: "result",
            batch: report.id,
            state: task.state.clone(),
            host: task.host.clone(),
            attempts: task.attempts,
            exit_status: task.exit_status,
            reason: task.reason.clone(),
            stdout: texts.0,
            stderr: texts.1,
            truncated: texts.2,
            outputs: placed,
        })?;
    }
    Ok(task.exit_status.unwrap_or(EXIT_NOT_RUN))
}

fn place_results(
    dir: &Path,
    out_dir: &Path,
    outputs: &[String],
    json: bool,
    placed: &mut Vec<PathBuf>,
    texts: &mut (String, String, bool),
) -> anyhow::Result<()> {
    if json {
        let (out, cut_out) = read_text(&dir.join("stdout"))?;
        let (err, cut_err) = read_text(&dir.join("stderr"))?;
        *texts = (out, err, cut_out || cut_err);
    } else {
        copy_stream(&dir.join("stdout"), &mut std::io::stdout())?;
        copy_stream(&dir.join("stderr"), &mut std::io::stderr())?;
    }
    for name in outputs {
        let from = dir.join(name);
        if !from.exists() {
            // The node said so in the task's reason, shown by the caller.
            continue;
        }
        let to = out_dir.join(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("output {}", parent.display()))?;
        }
        std::fs::rename(&from, &to).with_context(|| format!("output {}", to.display()))?;
        placed.push(to);
    }
    Ok(())
}

fn copy_stream(path: &Path, to: &mut impl Write) -> anyhow::Result<()> {
    let mut file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    std::io::copy(&mut file, to)?;
    to.flush()?;
    Ok(())
}

/// A file's first [`JSON_TEXT_MAX`] bytes as text, and whether it was cut.
fn read_text(path: &Path) -> anyhow::Result<(String, bool)> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::new();
    file.take(JSON_TEXT_MAX).read_to_end(&mut bytes)?;
    Ok((
        String::from_utf8_lossy(&bytes).into_owned(),
        len > JSON_TEXT_MAX,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::api::HoldReport;

    fn line(state: &str, held: bool) -> TaskReport {
        TaskReport {
            task: 0,
            state: state.into(),
            host: None,
            attempts: 0,
            exit_status: None,
            started_unix: None,
            ended_unix: None,
            reason: None,
            event: None,
            cpu_secs: None,
            checkpoint_bytes: None,
            copies: Vec::new(),
            owner_kills: 0,
            host_failures: 0,
            waiting_for: held.then(|| HoldReport {
                host: "12D3KooWHeldHostB".into(),
                start_unix: 1_700_007_200,
                p: 0.75,
            }),
        }
    }

    #[test]
    fn the_queue_limit_does_not_run_while_the_task_is_held_for_a_window() {
        let mut wait = QueueWait::new();
        assert!(wait.counts(), "a task just queued waits for a host");
        // Held for a host's later window: nothing to give up on.
        assert!(!wait.on_task(&line("queued", true)));
        assert!(!wait.counts(), "the limit ran through a hold");
        // Another line of the same hold changes nothing.
        assert!(!wait.on_task(&line("queued", true)));
        assert!(!wait.counts());
        // The hold ends with the task still queued: counted from zero.
        assert!(wait.on_task(&line("queued", false)));
        assert!(wait.counts());
        // Held again, then started at its window: no limit while it runs.
        assert!(!wait.on_task(&line("queued", true)));
        assert!(!wait.on_task(&line("running", false)));
        assert!(!wait.counts());
    }

    #[test]
    fn the_queue_limit_starts_again_when_the_task_is_back_in_the_queue() {
        let mut wait = QueueWait::new();
        // Queued news (a refusal) keeps the running count.
        assert!(!wait.on_task(&line("queued", false)));
        assert!(wait.counts());
        assert!(!wait.on_task(&line("running", false)));
        assert!(!wait.counts());
        // Its host failed it: back in the queue, counted from zero.
        assert!(wait.on_task(&line("queued", false)));
        assert!(wait.counts());
    }
}
