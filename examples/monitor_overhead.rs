//! Measures what the resource monitor costs an idle node: runs the real
//! monitor loop for a while, then reports the CPU time this process used
//! (getrusage) as a percentage of one core, and its resident memory.
//!
//! `--source sysinfo` runs the same loop over a `sysinfo`-based load source
//! instead of the `/proc` one, to compare the two.
//!
//!     cargo run --release --example monitor_overhead -- --secs 60
//!     cargo run --release --example monitor_overhead -- --secs 60 --max-period 1 --source sysinfo

use clap::{Parser, ValueEnum};
use gleaner::model::period::PeriodPolicy;
use gleaner::monitor::{
    run, LoadSource, Monitor, MonitorConfig, ProcLoadSource, ProcessScope, RawSample, SampleError,
    SystemClock,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::{Duration, Instant};
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Source {
    Proc,
    Sysinfo,
}

#[derive(Debug, Parser)]
struct Args {
    /// How long to run the monitor.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// The longest sampling period; 1 pins the period at the minimum (worst case).
    #[arg(long, default_value_t = 8)]
    max_period: u64,
    #[arg(long, value_enum, default_value_t = Source::Proc)]
    source: Source,
    /// Instead of the loop, take this many samples 20 ms apart and report the
    /// CPU cost of one sample (sleeping costs nothing, so this isolates it).
    #[arg(long, default_value_t = 0)]
    bench: u32,
    /// Exclude this process (and its tree) as the guest in every sample.
    #[arg(long)]
    guest: Option<i32>,
}

/// The same measurement through `sysinfo`, for comparison only.
struct SysinfoSource {
    system: System,
    cpus: f64,
}

impl SysinfoSource {
    fn new() -> Self {
        let mut system = System::new();
        system.refresh_cpu_usage();
        let cpus = system.cpus().len().max(1) as f64;
        SysinfoSource { system, cpus }
    }
}

impl LoadSource for SysinfoSource {
    /// The same tree found through sysinfo: refresh the process list (pids
    /// and parents only) and follow the parent links.
    fn guest_tree(&mut self, scope: &ProcessScope) -> Vec<i32> {
        let ProcessScope::Tree { root, .. } = scope else {
            return scope.pids();
        };
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing(),
        );
        let mut tree = vec![*root];
        let mut i = 0;
        while i < tree.len() {
            let parent = Pid::from(tree[i] as usize);
            tree.extend(
                self.system
                    .processes()
                    .iter()
                    .filter(|(_, p)| p.parent() == Some(parent))
                    .map(|(pid, _)| pid.as_u32() as i32),
            );
            i += 1;
        }
        tree
    }

    fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError> {
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        let mut guest = 0.0;
        if !guest_pids.is_empty() {
            let pids: Vec<Pid> = guest_pids.iter().map(|&p| Pid::from(p as usize)).collect();
            self.system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&pids),
                true,
                ProcessRefreshKind::nothing().with_cpu(),
            );
            guest = pids
                .iter()
                .filter_map(|p| self.system.process(*p))
                .map(|p| f64::from(p.cpu_usage()) / self.cpus)
                .sum();
        }
        let cpu = (f64::from(self.system.global_cpu_usage()) - guest).clamp(0.0, 100.0);
        Ok(RawSample {
            cpu,
            free_mib: self.system.available_memory() / (1024 * 1024),
        })
    }
}

fn cpu_secs_used() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A `Vm...` line of /proc/self/status, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn monitor_for<S: LoadSource + Send + 'static>(
    source: S,
    config: MonitorConfig,
    secs: u64,
) -> usize {
    let monitor = Monitor::new(config, source, SystemClock, SmallRng::from_os_rng());
    let (_roots_tx, roots) = watch::channel(ProcessScope::Nothing);
    let (tx, mut rx) = mpsc::channel(16);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run(monitor, roots, shutdown.clone(), tx));
    let mut readings = 0;
    let stop = tokio::time::sleep(Duration::from_secs(secs));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            got = rx.recv() => match got {
                Some(_) => readings += 1,
                None => break,
            },
        }
    }
    shutdown.cancel();
    let _ = task.await;
    readings
}

/// CPU microseconds one `sample` costs, averaged over `n` samples.
fn per_sample_cost(mut source: impl LoadSource, n: u32, guest: Option<i32>) -> anyhow::Result<f64> {
    let scope = guest.map_or(ProcessScope::Nothing, |root| ProcessScope::Tree {
        root,
        whole_session: false,
    });
    let mut spent = 0.0;
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(20));
        let before = cpu_secs_used();
        let pids = source.guest_tree(&scope);
        source.sample(&pids)?;
        spent += cpu_secs_used() - before;
    }
    Ok(spent / f64::from(n.max(1)) * 1e6)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.bench > 0 {
        let micros = match args.source {
            Source::Proc => per_sample_cost(ProcLoadSource::new()?, args.bench, args.guest)?,
            Source::Sysinfo => per_sample_cost(SysinfoSource::new(), args.bench, args.guest)?,
        };
        println!(
            "source={:?} guest={:?} samples={} cpu_per_sample={micros:.1} us rss={} KiB",
            args.source,
            args.guest,
            args.bench,
            status_kib("VmRSS")
        );
        return Ok(());
    }
    let config = MonitorConfig {
        period: PeriodPolicy {
            max: Duration::from_secs(args.max_period.max(1)),
            ..PeriodPolicy::default()
        },
        ..MonitorConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let cpu_before = cpu_secs_used();
    let started = Instant::now();
    let readings = runtime.block_on(async {
        Ok::<_, SampleError>(match args.source {
            Source::Proc => monitor_for(ProcLoadSource::new()?, config, args.secs).await,
            Source::Sysinfo => monitor_for(SysinfoSource::new(), config, args.secs).await,
        })
    })?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_secs_used() - cpu_before;
    println!(
        "source={:?} max_period={}s wall={:.1}s readings={} cpu={:.4}s ({:.4} % of one core, {:.1} us/reading) rss={} KiB peak_rss={} KiB",
        args.source,
        args.max_period,
        wall,
        readings,
        cpu,
        cpu / wall * 100.0,
        cpu / readings.max(1) as f64 * 1e6,
        status_kib("VmRSS"),
        status_kib("VmHWM"),
    );
    Ok(())
}
