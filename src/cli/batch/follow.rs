//! Following a batch to its end (`--wait`, `batch wait`): the node's wait
//! stream read line by line, a progress bar on a terminal (one line per
//! ended task elsewhere, nothing with `--json` or `--quiet`), and the final
//! status and exit code.
//!
//! It must not build requests or parse arguments.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::bail;

use super::exit_code;
use super::show::status_text;
use crate::cli::output::{print_json, print_text};
use crate::control::api::{BatchLine, BatchReport, PREFIX};
use crate::control::client::ControlClient;
use crate::model::ids::BatchId;

/// Follows a batch to its end; returns the exit status `wait` ends with.
pub(super) async fn wait(
    client: &ControlClient,
    id: BatchId,
    json: bool,
    quiet: bool,
) -> anyhow::Result<i32> {
    let lines = client
        .post_stream(&format!("{PREFIX}/batches/{id}/wait"), &())
        .await?;
    follow(client, id, lines, json, quiet).await
}

/// Shows a batch's wait stream to its end; returns the exit status.
pub(super) async fn follow(
    client: &ControlClient,
    id: BatchId,
    mut lines: crate::control::client::LineReader,
    json: bool,
    quiet: bool,
) -> anyhow::Result<i32> {
    let first: BatchReport = client.get_json(&format!("{PREFIX}/batches/{id}")).await?;
    let mut progress = Progress::new(&first, json || quiet);
    let mut last = None;
    while let Some(line) = lines.next::<BatchLine>().await? {
        if json {
            print_json(&line)?;
        }
        match line {
            BatchLine::Task { task, .. } => progress.task(&task),
            BatchLine::Batch(report) => last = Some(report),
            BatchLine::Queued { .. } => {}
        }
    }
    progress.finish();
    let Some(report) = last else {
        bail!(
            "the node stopped before batch {id} ended; `gleaner batch wait {id}` follows it again"
        );
    };
    if !json && !quiet {
        print_text(&status_text(&report))?;
    }
    Ok(exit_code(&report))
}

/// The progress bar of `--wait` on a terminal; one line per ended task
/// elsewhere.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    states: Vec<String>,
    hosts: Vec<Option<String>>,
    started: std::time::Instant,
    ended_here: u32,
}

impl Progress {
    fn new(first: &BatchReport, silent: bool) -> Progress {
        let total = first.tasks.len() as u64;
        let terminal = !silent && std::io::stderr().is_terminal();
        let bar = terminal.then(|| {
            let bar = indicatif::ProgressBar::new(total);
            let style = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} ended {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        let p = Progress {
            bar,
            lines: !silent && !terminal,
            states: first.tasks.iter().map(|t| t.state.clone()).collect(),
            hosts: first.tasks.iter().map(|t| t.host.clone()).collect(),
            started: std::time::Instant::now(),
            ended_here: 0,
        };
        p.redraw();
        p
    }

    fn task(&mut self, t: &crate::control::api::TaskReport) {
        let i = t.task as usize;
        if i >= self.states.len() {
            return;
        }
        let was_final = matches!(self.states[i].as_str(), "done" | "failed" | "cancelled");
        self.states[i] = t.state.clone();
        self.hosts[i] = t.host.clone();
        let is_final = matches!(t.state.as_str(), "done" | "failed" | "cancelled");
        if is_final && !was_final {
            self.ended_here += 1;
            if self.lines {
                eprintln!(
                    "task {} {}{}",
                    t.task,
                    t.state,
                    t.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                );
            }
        }
        self.redraw();
    }

    fn redraw(&self) {
        let Some(bar) = &self.bar else {
            return;
        };
        let count = |s: &str| self.states.iter().filter(|x| *x == s).count();
        let ended = count("done") + count("failed") + count("cancelled");
        let running = count("running");
        let hosts: std::collections::HashSet<&String> = self
            .states
            .iter()
            .zip(&self.hosts)
            .filter(|(s, _)| *s == "running")
            .filter_map(|(_, h)| h.as_ref())
            .collect();
        let minutes = self.started.elapsed().as_secs_f64() / 60.0;
        let rate = if minutes > 0.0 {
            f64::from(self.ended_here) / minutes
        } else {
            0.0
        };
        let left = self.states.len() - ended;
        let eta = if rate > 0.0 {
            format!(", ETA {:.0} s", left as f64 / rate * 60.0)
        } else {
            String::new()
        };
        bar.set_position(ended as u64);
        bar.set_message(format!(
            "({} done, {running} running, {} queued, {} failed) on {} host(s), {rate:.1}/min{eta}",
            count("done"),
            count("queued"),
            count("failed"),
            hosts.len()
        ));
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}
