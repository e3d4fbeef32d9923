//! Command-line interface: one `Cli` parsed by clap, one function per command.
//!
//! Commands return serializable values; `output` prints them as a sentence
//! or table for people, or as JSON with `--json` (before or after the
//! command's name; `eval` has its own `--json [FILE]`). `node` is the
//! daemon; `status`, `pause`, `resume`, `run-local`, `history`, `images` and
//! `predict` (without `--trace`) are clients of it. This layer may read files and the
//! clock; the model below it does neither.

pub mod args;
pub mod batch;
pub mod control;
pub mod eval;
pub mod images;
pub mod node;
pub mod output;
pub mod pool;
pub mod predict;
pub mod simulate;
pub mod submit;
pub mod trace;

use crate::node::config::Config;
use crate::node::paths::Paths;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Gleaner: share your computer's idle cycles, and know when they will be there.
#[derive(Debug, Parser)]
#[command(name = "gleaner", version, about, long_about = None)]
pub struct Cli {
    /// Print one JSON value instead of text (also accepted after the command's name).
    #[arg(long)]
    pub json: bool,

    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors in the log.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// The node's data dir [default: $GLEANER_DATA_DIR, else the platform's, e.g. ~/.local/share/gleaner].
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The config file [default: $GLEANER_CONFIG_DIR/config.toml, else e.g. ~/.config/gleaner/config.toml].
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// `--json` after a command's name. The top-level `--json` is not a global
/// flag so that `eval` can have its own `--json [FILE]` (clap refuses two
/// `--json` in one command); every other command flattens this one, which
/// is global within that command's subcommands.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct JsonFlag {
    /// Print one JSON value instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The options every command may use.
#[derive(Debug, Clone)]
pub struct Global {
    pub json: bool,
    pub quiet: bool,
    pub data_dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

/// The high layer of the command line (ripgrep's "hiargs"): the paths and
/// the configuration, resolved once with the documented precedence
/// (flags > environment > file > defaults) and validated. Commands read
/// typed fields from here and never reload the file.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub paths: Paths,
    pub config: Config,
}

impl Global {
    /// The node's paths with the documented precedence.
    pub fn paths(&self) -> anyhow::Result<Paths> {
        Ok(Paths::resolve(
            self.data_dir.as_deref(),
            self.config.as_deref(),
        )?)
    }

    /// Reads the config file (bounded, regular files only), applies the
    /// `node` flags and environment over it when given, and validates the
    /// result, naming the key that is wrong.
    pub fn resolve(&self, node_flags: Option<&node::NodeArgs>) -> anyhow::Result<Resolved> {
        let paths = self.paths()?;
        let mut config = Config::load(&paths.config_file)?;
        if let Some(flags) = node_flags {
            flags.apply(&mut config);
            config.validate()?;
        }
        Ok(Resolved { paths, config })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node: monitor this host, keep its history, run guests, answer clients.
    Node(node::NodeArgs),
    /// Show the node's state, load, guest and predicted reliability.
    Status(JsonFlag),
    /// Withhold this machine (recorded as S5); kills a running guest.
    Pause(control::PauseArgs),
    /// Give the machine back after `pause`.
    Resume(JsonFlag),
    /// Predict the temporal reliability of a host for a future window.
    Predict(predict::PredictArgs),
    /// Run a guest job on this node and stream its output; exits with the job's status.
    RunLocal(control::RunLocalArgs),
    /// Export or import the node's history.
    History(control::HistoryArgs),
    /// The node's image cache: list the images, prune those no guest runs in.
    Images(images::ImagesArgs),
    /// Show the configuration, or with --defaults every key's default and meaning.
    Config(node::ConfigArgs),
    /// Tools for host trace files (format v1).
    Trace(trace::TraceArgs),
    /// Score reliability methods on host traces (rolling origin, no peeking).
    Eval(eval::EvalArgs),
    /// Simulate a batch on a pool of hosts replaying traces, once per scheduling policy.
    Simulate(simulate::SimulateArgs),
    /// List the pool's hosts with their reliability for a window, best first.
    Hosts(pool::HostsArgs),
    /// Run a job on the pool's most reliable host; exits with the job's status.
    Submit(submit::SubmitArgs),
    /// Many tasks from one submission: submit, status, wait, list, cancel, results.
    Batch(batch::BatchArgs),
    /// Make the pre-shared key of a private pool.
    SwarmKey(pool::SwarmKeyArgs),
    /// Print a shell completion script (e.g. `gleaner completions bash > /etc/bash_completion.d/gleaner`).
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout (e.g. `gleaner man | man -l -`).
    Man,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Writes the completion script for `shell` to stdout.
fn completions(args: &CompletionsArgs) -> anyhow::Result<()> {
    let mut command = <Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "gleaner", &mut script);
    output::print_text(&String::from_utf8_lossy(&script))
}

/// Writes the man page to stdout: the top-level page, then one section per
/// command with that command's own options.
fn man() -> anyhow::Result<()> {
    let command = <Cli as clap::CommandFactory>::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    let mut text = String::from_utf8_lossy(&page).into_owned();
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut part = Vec::new();
        clap_mangen::Man::new(sub.clone()).render(&mut part)?;
        text.push_str(&format!(
            ".SH \"GLEANER {}\"\n",
            sub.get_name().to_ascii_uppercase()
        ));
        // The command's own page, its title line dropped and its sections
        // demoted to subsections of this one.
        for line in String::from_utf8_lossy(&part).lines() {
            if line.starts_with(".TH") {
                continue;
            }
            match line.strip_prefix(".SH ") {
                Some(heading) => text.push_str(&format!(".SS {heading}\n")),
                None => {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    output::print_text(&text)
}

impl Command {
    /// True when `--json` was given after the command's name (not for
    /// `eval`, whose `--json` takes a file).
    fn json_flag(&self) -> bool {
        match self {
            Command::Node(a) => a.out.json,
            Command::Status(f) | Command::Resume(f) => f.json,
            Command::Pause(a) => a.out.json,
            Command::Predict(a) => a.out.json,
            Command::RunLocal(a) => a.out.json,
            Command::History(a) => a.out.json,
            Command::Images(a) => a.out.json,
            Command::Config(a) => a.out.json,
            Command::Trace(a) => a.out.json,
            Command::Hosts(a) => a.out.json,
            Command::Submit(a) => a.out.json,
            Command::Batch(a) => a.out.json,
            Command::Eval(_)
            | Command::Simulate(_)
            | Command::SwarmKey(_)
            | Command::Completions(_)
            | Command::Man => false,
        }
    }
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let global = Global {
        json: cli.json || cli.command.json_flag(),
        quiet: cli.quiet,
        data_dir: cli.data_dir,
        config: cli.config,
    };
    match cli.command {
        Command::Node(args) => node::run(&args, &global),
        Command::Status(_) => control::status(&global),
        Command::Pause(args) => control::pause(&args, &global),
        Command::Resume(_) => control::resume(&global),
        Command::Predict(args) => match &args.trace {
            Some(trace) => predict::run_on_trace(&args, trace, global.json),
            None => control::predict(&args, &global),
        },
        Command::RunLocal(args) => control::run_local(&args, &global),
        Command::History(args) => control::history(&args, &global),
        Command::Images(args) => images::run(&args, &global),
        Command::Config(args) => node::config(&args, &global),
        Command::Trace(args) => trace::run(&args),
        Command::Eval(args) => eval::run(&args, global.json),
        Command::Simulate(args) => simulate::run(&args, global.json),
        Command::Hosts(args) => pool::hosts(&args, &global),
        Command::Submit(args) => submit::submit(&args, &global),
        Command::Batch(args) => batch::run(&args, &global),
        Command::SwarmKey(args) => pool::swarm_key(&args),
        Command::Completions(args) => completions(&args),
        Command::Man => man(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from([&["gleaner"], args].concat()).expect("parses")
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn json_before_or_after_the_command() {
        for args in [
            &["--json", "status"][..],
            &["status", "--json"],
            &["history", "export", "--json"],
            &["images", "list", "--json"],
            &["images", "--json", "prune", "--keep-mib", "100"],
            &["--json", "predict", "--window", "1h"],
            &["predict", "--window", "1h", "--json"],
            &["hosts", "--json"],
            &["submit", "--json", "--", "true"],
            &["--json", "submit", "--", "true"],
        ] {
            let cli = parse(args);
            assert!(cli.json || cli.command.json_flag(), "{args:?}");
        }
        assert!(!parse(&["status"]).command.json_flag());
    }

    #[test]
    fn eval_json_takes_an_optional_file() {
        let eval_json = |args: &[&str]| match parse(args).command {
            Command::Eval(e) => e.json.map(|p| p.display().to_string()),
            _ => panic!("not eval"),
        };
        assert_eq!(
            eval_json(&["eval", "--json", "r.json", "--trace", "a"]),
            Some("r.json".into())
        );
        assert_eq!(
            eval_json(&["eval", "--json-out", "r.json", "--trace", "a"]),
            Some("r.json".into())
        );
        assert_eq!(
            eval_json(&["eval", "--json", "--trace", "a", "b"]),
            Some("-".into())
        );
        assert_eq!(
            eval_json(&["eval", "--trace", "a", "--json"]),
            Some("-".into())
        );
        assert_eq!(eval_json(&["eval", "--trace", "a"]), None);
        let top = parse(&["--json", "eval", "--trace", "a"]);
        assert!(top.json);
    }

    #[test]
    fn simulate_runs_tail_copies_by_default_as_the_queue_does_and_off_turns_them_off() {
        let tail = |extra: &[&str]| {
            let args = [
                &[
                    "simulate",
                    "--trace",
                    "a",
                    "--tasks",
                    "1",
                    "--runtime",
                    "1h",
                ],
                extra,
            ]
            .concat();
            match parse(&args).command {
                Command::Simulate(s) => s.tail_copies,
                _ => panic!("not simulate"),
            }
        };
        assert!(tail(&[]));
        assert_eq!(
            tail(&[]),
            crate::consumer::batch::queue::TAIL_COPIES_DEFAULT
        );
        assert!(!tail(&["--tail-copies", "off"]));
        assert!(tail(&["--tail-copies", "on"]));
    }
}
