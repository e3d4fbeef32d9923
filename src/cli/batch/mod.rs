//! `gleaner batch`: submit many tasks at once, follow them, cancel them and
//! collect their results, through the local node's batch queue.
//!
//! This module reads the params file, resolves paths against the working
//! directory, checks what it can before anything is sent, and shows
//! progress; the queue, placement and retries are the node's
//! (`consumer::batch`).
//!
//! This file holds the arguments, the requests built from them and the
//! commands run; `show` formats what is printed and `follow` follows a
//! batch to its end.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use crate::cli::args::{parse_deadline, parse_duration, Deadline};
use crate::cli::control::{block_on, client};
use crate::cli::output::{print_json, print_text};
use crate::cli::Global;
use crate::consumer::batch::{spec, PolicyName};
use crate::control::api::{
    BatchCreated, BatchInput, BatchLine, BatchReport, BatchResultsCopied, BatchResultsRequest,
    BatchSubmitRequest, EstimateReport, ParamsTable, TaskCounts, PREFIX,
};
use crate::control::client::ControlClient;
use crate::model::ids::BatchId;

mod follow;
mod show;

use follow::{follow, wait};
pub use show::short;
use show::{counts_text, estimate_text, list_table, status_text, task_etas_text};

/// Largest params file read, bytes.
const PARAMS_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Exit status when every task ended with status 0.
pub const EXIT_ALL_OK: i32 = 0;
/// Exit status when some task ended with another status.
pub const EXIT_SOME_FAILED: i32 = 1;
/// Exit status when some task could not be run (EX_TEMPFAIL).
pub const EXIT_NOT_RUN: i32 = 75;

#[derive(Debug, Args)]
pub struct BatchArgs {
    #[command(subcommand)]
    pub command: BatchCommand,
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

#[derive(Debug, Subcommand)]
pub enum BatchCommand {
    /// Queue a batch: one task per `--range` value or `--params` row.
    Submit(Box<BatchSubmitArgs>),
    /// Estimate when a batch would end, and its chance of meeting
    /// `--deadline`: the submit flags; nothing is queued or sent but a
    /// survey of the pool.
    Estimate(Box<BatchSubmitArgs>),
    /// Show a batch and its tasks (with the estimate of its end while it runs).
    Status(BatchIdArg),
    /// Follow a batch until every task has ended; exits 0 when all ended
    /// with status 0, 1 when some did not, 75 when some could not run.
    Wait(BatchIdArg),
    /// List this node's batches.
    List,
    /// Cancel a batch's tasks that have not ended (running copies are killed).
    Cancel(BatchIdArg),
    /// Copy a batch's landed results into DIR/<task>/ (again; idempotent).
    Results(BatchResultsArgs),
    /// Forget an ended batch and the node's copy of its results (what was
    /// copied to its output directory stays). Cancel a running batch first.
    Remove(BatchIdArg),
}

#[derive(Debug, Args)]
pub struct BatchIdArg {
    /// The batch id, as `batch submit` and `batch list` print it (b…).
    pub id: BatchId,
}

#[derive(Debug, Args)]
pub struct BatchResultsArgs {
    pub id: BatchId,
    /// Where to copy the results.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// What every submission says about its task(s): `gleaner submit` and
/// `gleaner batch submit` share these flags.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task's working set, MiB (less free memory on the host kills it: S4).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,
    /// The task's expected runtime (90m, 2h): hosts are ranked for it.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10m")]
    pub runtime: u64,
    /// The task's wall-time limit on a host [default: twice the runtime].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub limit: Option<u64>,
    /// A file sent with the task, `FILE` (placed under its file name) or
    /// `FILE=REMOTE` (a relative path in the work dir). In a batch both may
    /// hold `{}` or `{column}`. Repeatable.
    #[arg(long, value_name = "FILE[=REMOTE]")]
    pub input: Vec<String>,
    /// A file the task writes in its work dir, to bring back. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub output: Vec<String>,
    /// An environment variable for the task (NAME=VALUE; in a batch the
    /// value may hold placeholders). Repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// How hosts are chosen: `proactive` (least expected turnaround from
    /// each host's speed, predicted availability and TR curve), `tr`
    /// (highest TR for the runtime), `power` (highest Γ), `random`.
    #[arg(long, value_name = "POLICY", default_value = "proactive")]
    pub policy: PolicyName,
    /// When the work must be done: a duration from now (3h) or a time
    /// (RFC 3339 or Unix seconds). The chance of meeting it is estimated
    /// before anything is sent; while it runs, a task whose chance falls
    /// gets a second copy on another free host (the first result wins).
    #[arg(long, value_name = "TIME|DUR", value_parser = parse_deadline)]
    pub deadline: Option<Deadline>,
    /// A file the task saves its state to (a relative path in its work
    /// dir) and resumes from when it is there: a task killed on one host
    /// continues on the next from its latest checkpoint (docs/checkpoint.md).
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<String>,
    /// What one checkpoint costs the task (5s, 1m): with the host's
    /// predicted time to failure it sets the interval the task is asked to
    /// checkpoint at (Young/Daly); measured checkpoints replace it when longer.
    /// [default: 5s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "checkpoint")]
    pub checkpoint_cost: Option<u64>,
    /// How results are checked (docs/trust.md): `none` (the default: one
    /// copy, taken as it comes), `replicate` (--replicas K copies on
    /// distinct hosts, accepted when --quorum Q agree) or `adaptive` (two
    /// copies until a host has a run of valid results, then single copies
    /// with spot checks).
    #[arg(long, value_name = "MODE")]
    pub verify: Option<crate::consumer::batch::verify::VerifyMode>,
    /// K: copies of each task on distinct hosts (implies --verify replicate).
    #[arg(long, value_name = "K")]
    pub replicas: Option<u32>,
    /// Q: agreeing copies that accept a result [default: a majority of K].
    #[arg(long, value_name = "Q")]
    pub quorum: Option<u32>,
    /// A command run on this node as `CMD DIR_A DIR_B` that exits 0 when two
    /// results are equivalent (for output that is not bit-identical).
    #[arg(long, value_name = "CMD")]
    pub validator: Option<String>,
    /// Run in this image: a `docker save` / `podman save` archive, an OCI
    /// layout tarball or a root-filesystem tar. This node checks it whole
    /// first; each host reads it once and keeps it unpacked (docs/images.md).
    /// Its Env, WorkingDir, Entrypoint and Cmd are honoured; the command
    /// after `--` replaces Cmd.
    #[arg(long, value_name = "FILE")]
    pub image: Option<PathBuf>,
    /// The command and its arguments, after `--` (may be left out with
    /// `--image`: the image's Cmd runs).
    #[arg(last = true, value_name = "CMD", required_unless_present = "image")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct BatchSubmitArgs {
    /// A name for the batch, shown by `batch list`.
    #[arg(long)]
    pub name: Option<String>,
    /// Where results land, as DIR/<task>/ [default: ./gleaner-results/<batch id>].
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// One task per integer in A..B (B excluded); `{}` is the integer.
    #[arg(long, value_name = "A..B", conflicts_with = "params", value_parser = parse_range)]
    pub range: Option<(i64, i64)>,
    /// One task per row of a CSV file whose header names the columns; `{name}`
    /// is the row's value, `{}` its index.
    #[arg(long, value_name = "FILE.csv")]
    pub params: Option<PathBuf>,
    /// At most this many tasks of the batch run at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_running: Option<u32>,
    /// Follow the batch until it ends (see `batch wait`).
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub task: TaskArgs,
}

fn parse_range(text: &str) -> Result<(i64, i64), String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?}: write the range as A..B (B excluded), e.g. 0..100"))?;
    let parse = |s: &str| {
        s.trim()
            .parse::<i64>()
            .map_err(|e| format!("{text:?}: {s:?} is not an integer ({e})"))
    };
    let (start, end) = (parse(a)?, parse(b)?);
    if end <= start {
        return Err(format!("{text:?}: the range is empty"));
    }
    Ok((start, end))
}

pub fn run(args: &BatchArgs, global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let json = global.json;
    match &args.command {
        BatchCommand::Estimate(a) => {
            let request = submit_request(a)?;
            let report: EstimateReport =
                block_on(client.post_json(&format!("{PREFIX}/batches/estimate"), &request))??;
            if json {
                return print_json(&report);
            }
            let mut text = estimate_text(&report);
            text.push_str(&task_etas_text(&report));
            print_text(&text)
        }
        BatchCommand::Submit(a) => {
            let mut request = submit_request(a)?;
            if !global.quiet {
                block_on(warn_if_deadline_at_risk(&client, &request))??;
            }
            if a.wait {
                request.wait = true;
                let quiet = global.quiet;
                let code = block_on(async {
                    let mut lines = client
                        .post_stream(&format!("{PREFIX}/batches"), &request)
                        .await?;
                    let Some(BatchLine::Queued { batch, tasks }) =
                        lines.next::<BatchLine>().await?
                    else {
                        bail!("the node did not say it queued the batch");
                    };
                    if json {
                        print_json(&BatchLine::Queued { batch, tasks })?;
                    } else if !quiet {
                        eprintln!("batch {batch} queued: {tasks} task(s)");
                    }
                    follow(&client, batch, lines, json, quiet).await
                })??;
                exit(code);
            }
            let created: BatchCreated =
                block_on(client.post_json(&format!("{PREFIX}/batches"), &request))??;
            if json {
                return print_json(&created);
            }
            print_text(&format!(
                "batch {} queued: {} task(s); `gleaner batch wait {}` follows it\n",
                created.id, created.tasks, created.id
            ))
        }
        BatchCommand::Status(a) => {
            let report: BatchReport =
                block_on(client.get_json(&format!("{PREFIX}/batches/{}", a.id)))??;
            if json {
                return print_json(&report);
            }
            print_text(&status_text(&report))
        }
        BatchCommand::Wait(a) => {
            let code = block_on(wait(&client, a.id, json, global.quiet))??;
            exit(code)
        }
        BatchCommand::List => {
            let list: Vec<BatchReport> = block_on(client.get_json(&format!("{PREFIX}/batches")))??;
            if json {
                return print_json(&list);
            }
            print_text(&list_table(&list))
        }
        BatchCommand::Cancel(a) => {
            let counts: TaskCounts =
                block_on(client.post_json(&format!("{PREFIX}/batches/{}/cancel", a.id), &()))??;
            if json {
                return print_json(&counts);
            }
            print_text(&format!(
                "batch {} cancelled: {}\n",
                a.id,
                counts_text(&counts)
            ))
        }
        BatchCommand::Remove(a) => {
            let counts: TaskCounts =
                block_on(client.delete_json(&format!("{PREFIX}/batches/{}", a.id)))??;
            if json {
                return print_json(&counts);
            }
            print_text(&format!(
                "batch {} removed ({})\n",
                a.id,
                counts_text(&counts)
            ))
        }
        BatchCommand::Results(a) => {
            let out = absolute(&a.out)?;
            let copied: BatchResultsCopied = block_on(client.post_json(
                &format!("{PREFIX}/batches/{}/results", a.id),
                &BatchResultsRequest { out },
            ))??;
            if json {
                return print_json(&copied);
            }
            print_text(&format!(
                "{} task(s) copied into {}\n",
                copied.tasks,
                copied.out.display()
            ))
        }
    }
}

fn exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path)
        .with_context(|| format!("{}: cannot make it absolute", path.display()))
}

/// Builds the request, checking locally what needs no node: the params
/// file, placeholders, output names, input files.
pub fn submit_request(a: &BatchSubmitArgs) -> anyhow::Result<BatchSubmitRequest> {
    let params = match &a.params {
        Some(path) => {
            let text = crate::fsutil::read_bounded(path, PARAMS_MAX_BYTES)
                .with_context(|| format!("--params {}", path.display()))?;
            let p = spec::parse_params(&text, &path.display().to_string())?;
            Some(ParamsTable {
                columns: p.columns,
                rows: p.rows,
            })
        }
        None => None,
    };
    let output_dir = match &a.output_dir {
        Some(dir) => absolute(dir)?,
        None => absolute(Path::new("gleaner-results"))?.join("{batch}"),
    };
    Ok(BatchSubmitRequest {
        name: a.name.clone(),
        output_dir: Some(output_dir),
        range: a.range,
        params,
        max_running: a.max_running,
        ..task_request(&a.task)?
    })
}

/// The request for one task (no sweep, no output directory): what `submit`
/// sends, and the part of every batch the task flags make.
pub fn task_request(a: &TaskArgs) -> anyhow::Result<BatchSubmitRequest> {
    let mut inputs = Vec::with_capacity(a.input.len());
    for text in &a.input {
        let (local, remote) = match text.split_once('=') {
            Some((l, r)) => (l.to_string(), r.to_string()),
            None => {
                let name = Path::new(text)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .with_context(|| format!("--input {text}: no file name"))?;
                (text.clone(), name.to_string())
            }
        };
        // A file without placeholders is checked now; one with them when
        // the node expands the tasks (it names the task's file). Devices
        // and FIFOs are refused by name, never waited on.
        if !local.contains('{') {
            crate::fsutil::open_regular(Path::new(&local))
                .with_context(|| format!("--input {text}"))?;
        }
        inputs.push(BatchInput {
            local: absolute(Path::new(&local))?,
            remote,
        });
    }
    let mut env = Vec::with_capacity(a.env.len());
    for pair in &a.env {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--env {pair}: write NAME=VALUE");
        };
        env.push((name.to_string(), value.to_string()));
    }
    for name in &a.output {
        spec::check_output(name)?;
    }
    if let Some(path) = &a.checkpoint {
        spec::check_checkpoint(path)?;
    }
    // The node reads the file itself: it gets the absolute path, and a
    // device or FIFO is refused by name here, never waited on.
    let image = match &a.image {
        Some(path) => {
            crate::fsutil::open_regular(path)
                .with_context(|| format!("--image {}", path.display()))?;
            Some(absolute(path)?)
        }
        None => None,
    };
    Ok(BatchSubmitRequest {
        name: None,
        argv: a.command.clone(),
        env,
        inputs,
        outputs: a.output.clone(),
        output_dir: None,
        mem_mib: a.mem,
        runtime_secs: a.runtime,
        limit_secs: a.limit.unwrap_or(a.runtime.saturating_mul(2)).max(1),
        range: None,
        params: None,
        max_running: None,
        policy: Some(a.policy.to_string()),
        deadline_unix: a.deadline.map(|d| d.at(jiff::Timestamp::now().as_second())),
        checkpoint: a.checkpoint.clone(),
        checkpoint_cost_secs: a.checkpoint_cost,
        verify: verify_spec(a)?,
        wait: false,
        image,
    })
}

/// The verification flags, checked here so a mistake is told before
/// anything is sent; `None` when none was given.
fn verify_spec(a: &TaskArgs) -> anyhow::Result<Option<crate::consumer::batch::verify::VerifySpec>> {
    if a.verify.is_none() && a.replicas.is_none() && a.quorum.is_none() && a.validator.is_none() {
        return Ok(None);
    }
    let spec = crate::consumer::batch::verify::VerifySpec {
        mode: a.verify.unwrap_or_default(),
        replicas: a.replicas.unwrap_or(0),
        quorum: a.quorum.unwrap_or(0),
        validator: a.validator.clone(),
    }
    .checked()
    .map_err(|e| anyhow::anyhow!(e))?;
    Ok(Some(spec))
}

/// 0 when every task ended with status 0, 1 when some task ended with
/// another status, 75 when some task could not be run (or was cancelled).
pub fn exit_code(report: &BatchReport) -> i32 {
    // A task ran and failed: another status than 0, or a declared output
    // it did not write.
    let nonzero = report
        .tasks
        .iter()
        .any(|t| t.exit_status.is_some() && t.state == "failed");
    let not_run = report
        .tasks
        .iter()
        .any(|t| t.exit_status.is_none() && t.state != "done");
    if nonzero {
        EXIT_SOME_FAILED
    } else if not_run {
        EXIT_NOT_RUN
    } else {
        EXIT_ALL_OK
    }
}

/// Before a submission with `--deadline`: estimates it and warns when the
/// chance of meeting the deadline is under one half (the batch is queued
/// all the same). An estimate that cannot be made is said, not fatal.
pub async fn warn_if_deadline_at_risk(
    client: &ControlClient,
    request: &BatchSubmitRequest,
) -> anyhow::Result<()> {
    if request.deadline_unix.is_none() {
        return Ok(());
    }
    match client
        .post_json::<_, EstimateReport>(&format!("{PREFIX}/batches/estimate"), request)
        .await
    {
        Ok(e) => {
            if let Some(p) = e.p_deadline.filter(|p| *p < 0.5) {
                eprintln!(
                    "warning: the estimate gives this work a {:.0} % chance of ending by the deadline (expected end {}); queued all the same",
                    p * 100.0,
                    show::in_d(e.makespan_p50_secs)
                );
            }
        }
        Err(e) => eprintln!("warning: no estimate for the deadline: {e}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
