//! The consumer's commands: `gleaner hosts` (who in the pool will stay
//! available for a window) and `gleaner submit` (run a job on the best host,
//! with outputs brought back and automatic retries), both through the local
//! node; and `gleaner swarm-key` (make the pre-shared key of a private pool).
//!
//! This module checks input files (the node reads and offers them by hash),
//! writes output files and prints; ranking, retries and the network are the
//! node's (`consumer`). An output file is written under a temporary name
//! (`NAME.part`) and renamed only when the node says it matched its host's
//! hash, so a corrupted output never lands in the output directory.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use base64::Engine;
use clap::{Args, Subcommand};

use crate::cli::args::parse_duration;
use crate::cli::control::{block_on, client};
use crate::cli::output::{print_json, print_text};
use crate::cli::Global;
use crate::control::api::{HostReport, HostsQuery, HostsReport, SubmitLine, SubmitRequest, PREFIX};
use crate::data::InputSpec;
use crate::guest::safe_relative_path;

#[derive(Debug, Args)]
pub struct HostsArgs {
    /// The job's window length (90m, 3h) from now.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "1h")]
    pub window: u64,
    /// The job's working set, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,
    /// Query each host this many times and report round-trip p50/p99.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rounds: u32,
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job's working set, MiB (less free memory on the host kills it: S4).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,
    /// Expected runtime (90m, 2h): hosts are ranked by TR over [now, now + runtime].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10m")]
    pub runtime: u64,
    /// Wall-time limit on the host [default: twice the runtime].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub limit: Option<u64>,
    /// A file to send with the job, placed in its work dir under its file name
    /// (or `--input LOCAL=REMOTE` for another relative path). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub input: Vec<String>,
    /// A file the job writes in its work dir, to bring back. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub output: Vec<String>,
    /// Where output files are written.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub output_dir: PathBuf,
    /// An environment variable for the job (NAME=VALUE). Repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

#[derive(Debug, Args)]
pub struct SwarmKeyArgs {
    #[command(subcommand)]
    pub command: SwarmKeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum SwarmKeyCommand {
    /// Print a new random pre-shared key (save it as swarm.key, mode 600, and
    /// give it to every member of the private pool).
    New,
}

/// `gleaner hosts`.
pub fn hosts(args: &HostsArgs, global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let query = HostsQuery {
        at: None,
        window_secs: args.window,
        mem_mib: args.mem,
        rounds: args.rounds,
    };
    let report: HostsReport = block_on(client.post_json(&format!("{PREFIX}/hosts"), &query))??;
    if global.json {
        return print_json(&report);
    }
    print_text(&hosts_table(&report))
}

fn hosts_table(r: &HostsReport) -> String {
    let window = crate::cli::predict::human_duration(r.window_secs);
    if r.hosts.is_empty() {
        return format!(
            "pool {}: no other member found yet (mDNS, bootstrap peers and the DHT are searched; try again in a few seconds)\n",
            r.pool
        );
    }
    let mut out = format!(
        "pool {}, window {window} from now, {} host(s), best first:\n",
        r.pool,
        r.hosts.len(),
    );
    out.push_str(&crate::cli::output::table(
        &[
            "peer", "TR", "state", "power", "slot", "days", "rtt ms", "note",
        ],
        r.hosts.iter().map(host_row),
        true,
    ));
    out
}

fn host_row(h: &HostReport) -> Vec<String> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let slot = match h.slot_free {
        Some(true) => "free",
        Some(false) => "busy",
        None => "-",
    };
    let rtt = match (h.rtt_p50_ms, h.rtt_p99_ms, h.responses) {
        (Some(p50), Some(p99), n) if n > 1 => format!("{p50:.2}/{p99:.2}"),
        _ => opt(h.rtt_ms.map(|v| format!("{v:.2}"))),
    };
    vec![
        h.peer.clone(),
        opt(h.tr.map(|t| format!("{t:.3}"))),
        opt(h.initial_state.clone().or_else(|| h.state.clone())),
        opt(h.power.map(|p| format!("{p:.2}"))),
        slot.to_string(),
        opt(h.days_used.map(|d| d.to_string())),
        rtt,
        h.error.clone().unwrap_or_default(),
    ]
}

/// `gleaner submit`: exits with the job's status (75 when no host could run it).
pub fn submit(args: &SubmitArgs, global: &Global) -> anyhow::Result<()> {
    let request = submit_request(args)?;
    let (_, client) = client(global)?;
    let json = global.json;
    let quiet = global.quiet;
    let output_dir = args.output_dir.clone();
    let code = block_on(async move {
        let mut lines = client
            .post_stream(&format!("{PREFIX}/submit"), &request)
            .await?;
        let mut outputs = OutputFiles::new(output_dir);
        let mut code = EXIT_NOT_RUN;
        while let Some(line) = lines.next::<SubmitLine>().await? {
            if json {
                print_json(&line)?;
                // Declared output files are written with --json too; stdout
                // and stderr stay in the JSON lines (stdout is the stream).
                match &line {
                    SubmitLine::Output { name, data } if name != "stdout" && name != "stderr" => {
                        outputs.write(name, &decode_output(data)?)?;
                    }
                    SubmitLine::OutputVerified { name, .. } => outputs.verified(name)?,
                    SubmitLine::HostFailed { .. } | SubmitLine::Submitted { .. } => {
                        outputs.discard()
                    }
                    _ => {}
                }
            } else {
                show(&line, quiet, &mut outputs)?;
            }
            match line {
                SubmitLine::Done { exit_status, .. } => code = exit_status,
                SubmitLine::Failed { .. } => code = EXIT_NOT_RUN,
                _ => {}
            }
        }
        anyhow::Ok(code)
    })??;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// Exit status of `submit` when no host ran the job to its end (EX_TEMPFAIL).
const EXIT_NOT_RUN: i32 = 75;

fn submit_request(args: &SubmitArgs) -> anyhow::Result<SubmitRequest> {
    // The progress stream names stdout and stderr by these words: an output
    // file called so would be mistaken for them.
    if let Some(name) = args
        .output
        .iter()
        .find(|o| *o == "stdout" || *o == "stderr")
    {
        bail!("--output {name}: that name is reserved for the job's own {name}; rename the file");
    }
    // The node reads the inputs itself (it runs as this user: the control
    // socket is 0600) and offers them by hash; here they are only checked,
    // so a wrong name fails before anything is sent.
    let mut inputs = Vec::new();
    for spec in &args.input {
        let (local, remote) = match spec.split_once('=') {
            Some((l, r)) => (PathBuf::from(l), r.to_string()),
            None => {
                let local = PathBuf::from(spec);
                let name = local
                    .file_name()
                    .and_then(|n| n.to_str())
                    .with_context(|| format!("input {spec}: no file name"))?
                    .to_string();
                (local, name)
            }
        };
        if !safe_relative_path(&remote) {
            bail!("input {spec}: {remote:?} must be a relative path without '..'");
        }
        // Devices and FIFOs are refused by name, never waited on.
        crate::fsutil::open_regular(&local).map_err(|e| anyhow::anyhow!("input {e}"))?;
        let local = local
            .canonicalize()
            .with_context(|| format!("input {}", local.display()))?;
        inputs.push(InputSpec {
            path: remote,
            local,
        });
    }
    for o in &args.output {
        if !safe_relative_path(o) {
            bail!("output {o:?} must be a relative path without '..'");
        }
    }
    let env = args
        .env
        .iter()
        .map(|e| {
            e.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--env {e:?}: use NAME=VALUE"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(SubmitRequest {
        argv: args.command.clone(),
        env,
        inputs,
        outputs: args.output.clone(),
        mem_mib: args.mem,
        runtime_secs: args.runtime,
        wall_limit_secs: args.limit.unwrap_or(args.runtime.saturating_mul(2)).max(1),
    })
}

/// Output files being written as their chunks arrive, each under
/// `NAME.part` until the node verified it.
struct OutputFiles {
    dir: PathBuf,
    open: HashMap<String, File>,
}

impl Drop for OutputFiles {
    fn drop(&mut self) {
        self.discard();
    }
}

impl OutputFiles {
    fn new(dir: PathBuf) -> OutputFiles {
        OutputFiles {
            dir,
            open: HashMap::new(),
        }
    }

    fn write(&mut self, name: &str, data: &[u8]) -> anyhow::Result<()> {
        // The name came from our own --output list, but the node relays what
        // the host said: check again before creating anything.
        if !safe_relative_path(name) {
            bail!("refusing output name {name:?}");
        }
        if !self.open.contains_key(name) {
            let path = self.part(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let file = File::create(&path).with_context(|| format!("output {}", path.display()))?;
            self.open.insert(name.to_string(), file);
        }
        if let Some(f) = self.open.get_mut(name) {
            f.write_all(data)?;
        }
        Ok(())
    }

    fn part(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.part"))
    }

    /// The output matched its hash: it takes its real name.
    fn verified(&mut self, name: &str) -> anyhow::Result<()> {
        if !safe_relative_path(name) {
            bail!("refusing output name {name:?}");
        }
        if let Some(file) = self.open.remove(name) {
            file.sync_all()?;
            let target = self.dir.join(name);
            std::fs::rename(self.part(name), &target)
                .with_context(|| format!("output {}", target.display()))?;
        } else if name != "stdout" && name != "stderr" {
            // An empty output: nothing was written yet.
            let target = self.dir.join(name);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            File::create(&target).with_context(|| format!("output {}", target.display()))?;
        }
        Ok(())
    }

    /// Drops every output not verified (the attempt failed, or the stream ended).
    fn discard(&mut self) {
        let names: Vec<String> = self.open.drain().map(|(n, _)| n).collect();
        for name in names {
            let _ = std::fs::remove_file(self.part(&name));
        }
    }
}

fn decode_output(data: &str) -> anyhow::Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .context("the node sent output that is not base64")
}

fn show(line: &SubmitLine, quiet: bool, outputs: &mut OutputFiles) -> anyhow::Result<()> {
    let say = |text: String| {
        if !quiet {
            eprintln!("gleaner: {text}");
        }
    };
    match line {
        SubmitLine::Ranked { attempt, hosts } => say(format!(
            "attempt {}: {} host(s) can take the job{}",
            attempt + 1,
            hosts.len(),
            hosts
                .first()
                .map(|h| format!(
                    "; best {} (TR {})",
                    short(&h.peer),
                    h.tr.map_or("unknown".into(), |t| format!("{t:.3}"))
                ))
                .unwrap_or_default()
        )),
        SubmitLine::Rejected { host, reason } => say(format!("{} refused: {reason}", short(host))),
        SubmitLine::Submitted { host, job_id, .. } => {
            say(format!("job {job_id} accepted by {}", short(host)))
        }
        SubmitLine::Event { host, event, .. } => say(format!("{}: {event}", short(host))),
        SubmitLine::HostFailed { host, reason } => {
            outputs.discard();
            say(format!(
                "{} failed the job: {reason}; trying another host",
                short(host)
            ))
        }
        SubmitLine::OutputVerified { name, .. } => outputs.verified(name)?,
        SubmitLine::Output { name, data } => {
            let bytes = decode_output(data)?;
            match name.as_str() {
                "stdout" => std::io::stdout().write_all(&bytes)?,
                "stderr" => std::io::stderr().write_all(&bytes)?,
                file => outputs.write(file, &bytes)?,
            }
        }
        SubmitLine::OutputMissing { name, reason } => {
            if let Some(_file) = outputs.open.remove(name) {
                let _ = std::fs::remove_file(outputs.part(name));
            }
            eprintln!("gleaner: output {name} not brought back: {reason}")
        }
        SubmitLine::Done {
            host,
            exit_status,
            attempts,
        } => say(format!(
            "job finished on {} with status {exit_status} after {attempts} attempt(s)",
            short(host)
        )),
        SubmitLine::Failed { reason, .. } => eprintln!("gleaner: the job did not run: {reason}"),
    }
    Ok(())
}

/// The last characters of a peer id: enough to tell hosts apart in progress lines.
fn short(peer: &str) -> String {
    let n = peer.chars().count();
    let tail: String = peer.chars().skip(n.saturating_sub(8)).collect();
    format!("…{tail}")
}

/// `gleaner swarm-key new`: a pnet key file (`/key/swarm/psk/1.0.0/`, base16).
pub fn swarm_key(args: &SwarmKeyArgs) -> anyhow::Result<()> {
    match args.command {
        SwarmKeyCommand::New => print_text(&new_swarm_key(rand::random())),
    }
}

fn new_swarm_key(bytes: [u8; 32]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("/key/swarm/psk/1.0.0/\n/base16/\n{hex}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_files_cannot_take_the_names_of_the_streams() {
        let args = |output: &str| SubmitArgs {
            mem: 0,
            runtime: 60,
            limit: None,
            input: Vec::new(),
            output: vec![output.to_string()],
            output_dir: PathBuf::from("."),
            env: Vec::new(),
            command: vec!["true".into()],
            out: crate::cli::JsonFlag { json: false },
        };
        for reserved in ["stdout", "stderr"] {
            let err = submit_request(&args(reserved)).unwrap_err().to_string();
            assert!(err.contains("reserved"), "{err}");
        }
        assert!(submit_request(&args("result.txt")).is_ok());
    }

    #[test]
    fn a_new_swarm_key_parses_as_a_pnet_key() {
        let text = new_swarm_key([7; 32]);
        let key: libp2p::pnet::PreSharedKey = text.parse().unwrap();
        assert_ne!(key.fingerprint().to_string(), "");
    }
}
