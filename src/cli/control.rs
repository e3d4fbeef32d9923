//! The node's client commands: `status`, `pause`, `resume`, `run-local`,
//! `history export|import`, and `predict` without `--trace`. They talk to
//! the running node over its control socket; `predict` and `history` fall
//! back to the stopped node's database, opened under the data-dir lock so
//! that a node cannot start on it meanwhile (sled allows one process).
//!
//! This module owns the printing of the answers; it must not compute them.

use crate::cli::args::parse_duration;
use crate::cli::output::{print_json, print_text};
use crate::cli::predict::{print_report, PredictArgs};
use crate::cli::Global;
use crate::cli::Resolved;
use crate::control::api::{
    ImportSummary, PauseReport, PauseRequest, PredictQuery, RunLocalRequest, StatusReport,
    StreamLine, PREFIX,
};
use crate::control::client::{ClientError, ControlClient};
use crate::fsutil::BoundedFile;
use crate::history::store::{HistoryStore, StoreOptions};
use crate::history::trace::MAX_TRACE_BYTES;
use crate::model::predict::PredictRequest;
use crate::node::paths::{DataDirLock, Paths};
use crate::report::{predict_report, PredictReport, ReportRequest};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
    /// Resume by itself after this long (90m, 2h); until `resume` otherwise.
    #[arg(long = "for", value_name = "DUR", value_parser = parse_duration)]
    pub for_secs: Option<u64>,
    /// Let the running guest finish, then pause (no new guest starts meanwhile).
    #[arg(long)]
    pub after_job: bool,
}

#[derive(Debug, Args)]
pub struct RunLocalArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
    /// The job's working set in MiB: less free memory than this kills it (S4).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,
    /// Wall-clock limit (90m, 2h) [default: the node's guest.max_runtime_secs].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub runtime: Option<u64>,
    /// Run in this image: a `docker save` / `podman save` archive, an OCI
    /// layout tarball or a root-filesystem tar (its Env, WorkingDir,
    /// Entrypoint and Cmd are honoured; the command after `--` replaces Cmd).
    #[arg(long, value_name = "FILE")]
    pub image: Option<std::path::PathBuf>,
    /// The command and its arguments, after `--` (may be left out with
    /// `--image`: the image's Cmd runs).
    #[arg(last = true, value_name = "CMD", required_unless_present = "image")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
    #[command(subcommand)]
    pub command: HistoryCommand,
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Write the node's history as a trace (format v1).
    Export {
        /// Output file [default: stdout].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Seed the node's history with a trace's rows (only before its first row).
    Import {
        /// Trace file (format v1).
        file: PathBuf,
    },
}

/// Runs `fut` on a small runtime of its own: client commands are one request.
pub(crate) fn block_on<F: Future>(fut: F) -> anyhow::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(runtime.block_on(fut))
}

pub(crate) fn client(global: &Global) -> anyhow::Result<(Paths, ControlClient)> {
    let paths = global.paths()?;
    let client = ControlClient::new(&paths.socket());
    Ok((paths, client))
}

pub fn status(global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let report: StatusReport = block_on(client.get_json(&format!("{PREFIX}/status")))??;
    if global.json {
        return print_json(&report);
    }
    print_text(&status_text(&report))
}

fn status_text(r: &StatusReport) -> String {
    let mut rows: Vec<(String, String)> = vec![
        ("node pid".into(), r.pid.to_string()),
        ("data dir".into(), r.data_dir.display().to_string()),
    ];
    let state = match (&r.state, r.paused) {
        (_, false) if r.withheld.is_some() => format!(
            "S5 (withheld: {})",
            r.withheld.map(|c| c.to_string()).unwrap_or_default()
        ),
        (_, true) => match r.paused_until {
            Some(t) => format!("S5 (paused by the owner until {})", local_time(t)),
            None => "S5 (paused by the owner)".to_string(),
        },
        (Some(s), false) => {
            let meaning = s
                .parse::<crate::model::state::State>()
                .map(|s| s.describe())
                .unwrap_or("");
            let susp = if r.suspending {
                ", guest suspended"
            } else {
                ""
            };
            format!("{s} ({meaning}{susp})")
        }
        (None, false) => "not sampled yet".to_string(),
    };
    rows.push(("state".into(), state));
    if let Some(cpu) = r.cpu {
        rows.push((
            "host load".into(),
            format!("{cpu:.1} % of all cores (guest excluded)"),
        ));
    }
    if let Some(free) = r.free_mib {
        rows.push(("free memory".into(), format!("{free} MiB")));
    }
    if let Some(p) = r.period_secs {
        rows.push(("monitor period".into(), format!("{p} s")));
    }
    rows.push(("samples".into(), r.samples.to_string()));
    if r.samples_lost_at_start > 0 {
        // A torn tail of the store (a crash mid-write) was cut at start.
        rows.push((
            "lost at start".into(),
            format!(
                "{} sample(s) of a torn write before the last stop",
                r.samples_lost_at_start
            ),
        ));
    }
    if !r.owner_load.is_empty() {
        rows.push(("owner load".into(), r.owner_load.clone()));
    }
    if let Some(why) = &r.why_idle {
        rows.push(("why no guest".into(), why.to_string()));
    }
    if r.pause_after_job {
        rows.push((
            "pause after job".into(),
            "the node pauses once the running guest has finished".into(),
        ));
    }
    if !r.schedule.is_empty() {
        rows.push(("owner hours".into(), r.schedule.clone()));
    }
    rows.push(("cpu limit".into(), r.throttle.to_string()));
    if !r.containment.is_empty() {
        rows.push(("containment".into(), r.containment.clone()));
    }
    match &r.guest {
        Some(g) => {
            let nice = g.nice.map_or("-".to_string(), |n| n.to_string());
            let mut text = format!(
                "{} pid {} {} nice {nice} ({})",
                g.job_id, g.pid, g.phase, g.run_state
            );
            if let Some(cause) = g.kill_cause {
                text.push_str(&format!(", killed: {cause}"));
            }
            rows.push(("guest".into(), text));
        }
        None => rows.push(("guest".into(), "none".to_string())),
    }
    for p in &r.predictions {
        let value = match (p.tr, &p.error) {
            (Some(tr), _) if p.prior => format!(
                "{:.1} % (a prior: no past day of this kind in the record yet), {}",
                tr * 100.0,
                p.prior_source.as_deref().unwrap_or("built-in prior")
            ),
            (Some(tr), _) => format!("{:.1} %", tr * 100.0),
            (None, Some(e)) => format!("unknown ({e})"),
            (None, None) => "unknown".to_string(),
        };
        let key = if r.prediction_method.is_empty() {
            format!("TR next {}", crate::human::duration(p.window_secs))
        } else {
            format!(
                "TR next {} ({})",
                crate::human::duration(p.window_secs),
                r.prediction_method
            )
        };
        rows.push((key, value));
    }
    if let Some(n) = &r.network {
        network_rows(n, &mut rows);
    }
    if let Some(c) = &r.summary_cache {
        rows.push(("summary cache".into(), c.text(crate::human::duration)));
    }
    if let Some(t) = &r.traffic {
        rows.push((
            "traffic".into(),
            format!(
                "{} bytes in, {} bytes out since start",
                t.bytes_in, t.bytes_out
            ),
        ));
    }
    crate::cli::output::key_values(&rows)
}

/// The `status` rows about reachability: behind NAT or not, where peers reach us,
/// relay slots and hole punching.
fn network_rows(n: &crate::net::Reachability, rows: &mut Vec<(String, String)>) {
    use crate::net::NatStatus;
    let nat = match n.nat {
        NatStatus::Unknown => "not known yet",
        NatStatus::Private => "behind NAT (peers reach this node through a relay)",
        NatStatus::Public => "directly reachable",
    };
    rows.push((
        "reachability".into(),
        format!(
            "{nat} (AutoNAT: {} ok, {} failed)",
            n.autonat_ok, n.autonat_failed
        ),
    ));
    let at = if n.reachable_at.is_empty() {
        "no confirmed address".to_string()
    } else {
        n.reachable_at.join(", ")
    };
    rows.push(("reachable at".into(), at));
    for r in &n.relays {
        let state = if r.reserved {
            "slot reserved".to_string()
        } else {
            format!(
                "no slot ({})",
                r.last_error.as_deref().unwrap_or("reserving")
            )
        };
        rows.push((
            "relay".into(),
            format!("{} {state}, {} reservations", r.relay, r.reservations),
        ));
    }
    if n.dcutr_upgraded > 0 || n.dcutr_failed > 0 {
        rows.push((
            "hole punching".into(),
            format!("{} upgraded, {} failed", n.dcutr_upgraded, n.dcutr_failed),
        ));
    }
    let direct = n.peers.iter().filter(|p| p.direct > 0).count();
    let relayed = n
        .peers
        .iter()
        .filter(|p| p.direct == 0 && p.relayed > 0)
        .count();
    rows.push((
        "peers".into(),
        format!("{direct} direct, {relayed} through a relay only"),
    ));
    let c = &n.contact;
    let pool = match c.alone_text(clock_time) {
        Some(why) => why,
        None => format!("{} member(s) connected", c.members_connected),
    };
    rows.push(("pool contact".into(), pool));
    if n.summaries.large_pool {
        let heard = if n.summaries.listening {
            "listening while asked about the pool (large pool)"
        } else {
            "not listening: large pool, nothing here asks about it (ours still go out)"
        };
        rows.push(("summaries".into(), heard.into()));
    }
    if c.peer_book {
        rows.push((
            "peer book".into(),
            format!("{} member(s) remembered", c.remembered),
        ));
    }
}

/// A Unix time as the local clock shows it ("12:03:10").
pub(crate) fn clock_time(t: i64) -> String {
    jiff::Timestamp::from_second(t)
        .map(|ts| {
            ts.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|_| t.to_string())
}

pub(crate) fn local_time(t: i64) -> String {
    jiff::Timestamp::from_second(t)
        .map(|ts| {
            ts.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%Y-%m-%d %H:%M")
                .to_string()
        })
        .unwrap_or_else(|_| t.to_string())
}

pub fn pause(args: &PauseArgs, global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let body = PauseRequest {
        for_secs: args.for_secs,
        after_job: args.after_job,
    };
    let report: PauseReport = block_on(client.post_json(&format!("{PREFIX}/pause"), &body))??;
    if global.json {
        return print_json(&report);
    }
    if let Some(job) = &report.after_job {
        return print_text(&format!(
            "pausing once guest job {job} has finished (no new guest starts meanwhile)\n"
        ));
    }
    let mut text = match (report.changed, report.until) {
        (_, Some(t)) => format!("paused until {}", local_time(t)),
        (true, None) => "paused until `gleaner resume`".to_string(),
        (false, None) => "already paused".to_string(),
    };
    if let Some(job) = &report.killed_job {
        text.push_str(&format!("; killed guest job {job}"));
    }
    print_text(&format!("{text}\n"))
}

pub fn resume(global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let report: PauseReport =
        block_on(client.post_json(&format!("{PREFIX}/resume"), &serde_json::json!({})))??;
    if global.json {
        return print_json(&report);
    }
    print_text(if report.changed {
        "resumed\n"
    } else {
        "was not paused\n"
    })
}

/// `predict` without `--trace`: asks the node, or reads the stopped node's database.
pub fn predict(args: &PredictArgs, global: &Global) -> anyhow::Result<()> {
    args.refuse_trace_only_flags()?;
    let method = args.method_name()?;
    let (_, client) = client(global)?;
    let query = PredictQuery {
        window_secs: args.window,
        at: args.at,
        mem_mib: args.mem,
        method: method.map(|m| m.to_string()),
        days: None,
        step_secs: None,
    };
    let answer: Result<PredictReport, ClientError> =
        block_on(client.post_json(&format!("{PREFIX}/predict"), &query))?;
    let report = match answer {
        Ok(report) => report,
        Err(e) if e.is_not_running() => {
            tracing::debug!("no node answers; predicting from its database");
            let Resolved { paths, config } = global.resolve(None)?;
            with_offline_store(&paths, |store| {
                let meta = store.meta();
                let series = store.to_series(meta.tz.clone(), meta.step_secs, meta.max_gap_secs)?;
                let at = args
                    .at
                    .unwrap_or_else(|| jiff::Timestamp::now().as_second());
                let mut window = PredictRequest::new(at, args.window, config.thresholds(args.mem));
                window.days = config.history.days;
                let request = ReportRequest::with_method(window, method);
                predict_report(&series, meta.host.clone(), &request)
                    .context("cannot predict from the node's history")
            })?
        }
        Err(e) => return Err(e.into()),
    };
    print_report(&report, global.json)
}

/// A query-string value with everything but unreserved characters escaped.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An output file written beside its final name and renamed into place
/// once whole, so a failed export leaves no half file behind.
struct PartialFile(std::io::BufWriter<std::fs::File>);

impl PartialFile {
    fn partial(path: &std::path::Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".partial");
        PathBuf::from(name)
    }

    fn create(path: &std::path::Path) -> anyhow::Result<PartialFile> {
        let tmp = Self::partial(path);
        let file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        Ok(PartialFile(std::io::BufWriter::new(file)))
    }

    fn commit(path: &std::path::Path) -> anyhow::Result<()> {
        std::fs::rename(Self::partial(path), path)
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

impl Write for PartialFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Opens the history of a stopped node, holding its lock meanwhile.
fn with_offline_store<T>(
    paths: &Paths,
    f: impl FnOnce(&HistoryStore) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    with_offline_store_opts(paths, None, f)
}

/// Like [`with_offline_store`]; with `create` (the node's store options) a
/// node that never ran gets its data dir and history made, as its first
/// start would (`history import` seeds a new node this way).
fn with_offline_store_opts<T>(
    paths: &Paths,
    create: Option<StoreOptions>,
    f: impl FnOnce(&HistoryStore) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let dir = paths.history_dir();
    if let Some(options) = create.filter(|_| !dir.exists()) {
        paths.create_data_dir()?;
        let _lock =
            DataDirLock::acquire(paths).context("the data dir is locked (is a node starting?)")?;
        let now = jiff::Timestamp::now().as_second();
        let store = HistoryStore::open(&dir, &options, now)?;
        return f(&store);
    }
    if !dir.exists() {
        anyhow::bail!(
            "no node is running and there is no history at {} yet; start one with `gleaner node`",
            dir.display()
        );
    }
    let _lock = DataDirLock::acquire(paths).context(
        "no node answers on the control socket, yet the data dir is locked (is a node starting or stopping?)",
    )?;
    let now = jiff::Timestamp::now().as_second();
    let store = HistoryStore::open(&dir, &StoreOptions::default(), now)?;
    f(&store)
}

pub fn history(args: &HistoryArgs, global: &Global) -> anyhow::Result<()> {
    let (paths, client) = client(global)?;
    match &args.command {
        HistoryCommand::Export { out } => {
            // Streamed from the node (or the stopped node's store) to the
            // file or stdout: the history never sits in memory here.
            let mut sink: Box<dyn Write + Send> = match out {
                Some(path) => Box::new(PartialFile::create(path)?),
                None => Box::new(std::io::stdout()),
            };
            let path = format!("{PREFIX}/history/export");
            match block_on(client.get_into(&path, &mut sink))? {
                Ok(_) => {}
                Err(e) if e.is_not_running() => with_offline_store(&paths, |store| {
                    store.export(&mut sink)?;
                    Ok(())
                })?,
                Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(())
                }
                Err(e) => return Err(e.into()),
            }
            sink.flush()?;
            drop(sink);
            if let Some(path) = out {
                PartialFile::commit(path)?;
            }
            Ok(())
        }
        HistoryCommand::Import { file } => {
            // Streamed (bounded, regular files only): the node spools and
            // checks it off its loop, and names `file` in every error.
            let upload = BoundedFile::open(file, MAX_TRACE_BYTES)?;
            let path = format!(
                "{PREFIX}/history/import?name={}",
                percent_encode(&file.display().to_string())
            );
            let summary = match block_on(client.post_reader::<ImportSummary>(&path, upload))? {
                Ok(s) => s,
                Err(e) if e.is_not_running() => {
                    let config = global.resolve(None)?.config;
                    let options = crate::daemon::store_options(&config);
                    with_offline_store_opts(&paths, Some(options), |store| {
                        let r = store.import_file(file, file)?;
                        Ok(ImportSummary {
                            added: r.added,
                            already_present: r.already_present,
                        })
                    })?
                }
                Err(e) => return Err(e.into()),
            };
            if global.json {
                print_json(&summary)
            } else {
                print_text(&format!(
                    "imported {} rows ({} already present)\n",
                    summary.added, summary.already_present
                ))
            }
        }
    }
}

/// `run-local`: runs a guest on this node and streams its output; the
/// process exits with the job's status.
pub fn run_local(args: &RunLocalArgs, global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let request = RunLocalRequest {
        argv: args.command.clone(),
        mem_mib: args.mem,
        runtime_secs: args.runtime,
        // The node reads the file itself: it gets the absolute path.
        image: match &args.image {
            Some(p) => Some(
                std::fs::canonicalize(p)
                    .map_err(|e| anyhow::anyhow!("--image {}: {e}", p.display()))?,
            ),
            None => None,
        },
    };
    let json = global.json;
    let quiet = global.quiet;
    let code = block_on(async move {
        let mut lines = client
            .post_stream(&format!("{PREFIX}/run"), &request)
            .await?;
        let mut code = 1;
        while let Some(line) = lines.next::<StreamLine>().await? {
            if json {
                print_json(&line)?;
            } else {
                show_line(&line, quiet)?;
            }
            if let StreamLine::Exit { code: c, .. } = line {
                code = c;
            }
        }
        anyhow::Ok(code)
    })??;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

fn show_line(line: &StreamLine, quiet: bool) -> anyhow::Result<()> {
    match line {
        StreamLine::Stdout { data } => print_text(data)?,
        StreamLine::Stderr { data } => {
            let _ = std::io::stderr().write_all(data.as_bytes());
        }
        StreamLine::Started(s) if !quiet => {
            eprintln!(
                "gleaner: job {} started, pid {} in {}",
                s.job_id,
                s.pid,
                s.dir.display()
            );
        }
        StreamLine::Event { event } if !quiet => {
            eprintln!("gleaner: job {}: {}", event.job_id, event.kind);
        }
        StreamLine::Exit { code, cause, .. } if !quiet => match cause {
            Some(cause) => eprintln!("gleaner: job ended with status {code}: {cause}"),
            None => eprintln!("gleaner: job ended with status {code}"),
        },
        StreamLine::Error { message } => eprintln!("gleaner: {message}"),
        _ => {}
    }
    Ok(())
}
