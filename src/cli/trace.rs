//! `gleaner trace …`: tools for host trace files (format v1).

use crate::eval::synth::{write_synth, SynthConfig};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Generate a synthetic desktop-lab host trace (deterministic per seed).
    Synth(SynthArgs),
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Seed: the same seed gives the same host and the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Length of the trace in days.
    #[arg(long, default_value_t = 35)]
    pub days: u32,
    /// IANA time zone of the owner's daily rhythm.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// Sampling period in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 6)]
    pub step: u32,
    /// End the trace at the start of this time's local day (`now`, RFC 3339 or
    /// Unix seconds) instead of starting on 2025-09-01: recent history for a
    /// demo node (`gleaner history import`).
    #[arg(long, value_name = "TIME", value_parser = parse_end)]
    pub end: Option<i64>,
    /// The kind of owner: any (whatever the seed draws), office,
    /// evening, nights-off or weekends-away.
    #[arg(long, value_name = "HABIT", default_value = "any")]
    pub habit: crate::eval::synth::Habit,
    /// Output file; `-` writes to stdout.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(args: &TraceArgs) -> anyhow::Result<()> {
    match &args.command {
        TraceCommand::Synth(a) => synth(a),
    }
}

fn synth(a: &SynthArgs) -> anyhow::Result<()> {
    let mut cfg = SynthConfig::new(a.seed, a.days, &a.tz)?
        .with_step(a.step)?
        .with_habit(a.habit);
    if let Some(end) = a.end {
        cfg = cfg.ending_on_date_of(end)?;
    }
    if a.out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        return match write_synth(&cfg, stdout.lock()) {
            // `gleaner trace synth --out - | head` is fine.
            Err(e) if is_broken_pipe(&e) => Ok(()),
            other => Ok(other?),
        };
    }
    // Write beside the target and rename, so a failed run leaves no half file.
    let tmp = a.out.with_extension("csv.partial");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut out = std::io::BufWriter::new(file);
    write_synth(&cfg, &mut out)?;
    out.flush()?;
    std::fs::rename(&tmp, &a.out).with_context(|| format!("cannot write {}", a.out.display()))?;
    Ok(())
}

fn is_broken_pipe(e: &crate::eval::synth::SynthError) -> bool {
    use std::error::Error;
    let mut source: Option<&dyn Error> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::BrokenPipe;
        }
        source = err.source();
    }
    false
}

/// `now` or a time as `--at` takes it.
fn parse_end(text: &str) -> Result<i64, String> {
    if text.trim() == "now" {
        return Ok(jiff::Timestamp::now().as_second());
    }
    crate::cli::args::parse_time(text)
}
