//! Command-line interface: one `Cli` parsed by clap, one function per command.
//!
//! Commands return serializable values; `output` prints them as a sentence
//! or table for people, or as JSON with the global `--json`. This layer may
//! read files and the clock; the model below it does neither.

pub mod args;
pub mod eval;
pub mod output;
pub mod predict;
pub mod trace;

use clap::{Parser, Subcommand};

/// Gleaner: share your computer's idle cycles, and know when they will be there.
#[derive(Debug, Parser)]
#[command(name = "gleaner", version, about, long_about = None)]
pub struct Cli {
    /// Print one JSON value instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors in the log.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Predict the temporal reliability of a host for a future window.
    Predict(predict::PredictArgs),
    /// Tools for host trace files (format v1).
    Trace(trace::TraceArgs),
    /// Score reliability methods on host traces (rolling origin, no peeking).
    Eval(eval::EvalArgs),
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Predict(args) => predict::run(&args, cli.json),
        Command::Trace(args) => trace::run(&args),
        Command::Eval(args) => eval::run(&args, cli.json),
    }
}
