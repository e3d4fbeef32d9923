//! Generates a synthetic lab trace, times it, and prints its state shares
//! (job memory 256 MiB) beside those of any trace files given as arguments.
//!
//! cargo run --release --example synth_shares -- [--seed S] [--days D] [--out FILE] [--personality] [TRACE...]

use gleaner::eval::synth::{generate, write_synth, Personality, SynthConfig};
use gleaner::history::trace::{parse_trace, Trace};
use gleaner::model::series::HostSeries;
use gleaner::model::state::{State, Thresholds};
use std::path::Path;
use std::time::Instant;

fn shares(series: &HostSeries) -> [f64; 5] {
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        return [0.0; 5];
    };
    let step = series.step_secs;
    let m = ((last - first) / i64::from(step)) as usize;
    let th = Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    };
    let mut states = Vec::new();
    series.window_states(th, first, step, m, &mut states);
    let mut counts = [0usize; 5];
    for s in &states {
        counts[s.index()] += 1;
    }
    counts.map(|c| 100.0 * c as f64 / states.len().max(1) as f64)
}

/// Reads a trace, dropping rows that break the strictly-increasing time rule
/// (the shared lab samples repeat the time of the row after each `up=0` row).
fn read_lenient(path: &Path) -> anyhow::Result<(Trace, usize)> {
    let text = std::fs::read_to_string(path)?;
    let (mut kept, mut dropped, mut previous) = (String::with_capacity(text.len()), 0, None);
    for line in text.lines() {
        let time = line
            .split(',')
            .next()
            .and_then(|t| t.parse::<i64>().ok())
            .filter(|_| line.contains(','));
        if let Some(time) = time {
            if previous.is_some_and(|p| time <= p) {
                dropped += 1;
                continue;
            }
            previous = Some(time);
        }
        kept.push_str(line);
        kept.push('\n');
    }
    Ok((parse_trace(kept.as_bytes(), path)?, dropped))
}

fn print_row(name: &str, rows: usize, s: [f64; 5]) {
    print!("{name:<28} {rows:>8}");
    for v in s {
        print!(" {v:>6.2}");
    }
    println!();
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    let (mut seed, mut days, mut files, mut out) = (1u64, 35u32, Vec::new(), None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = args.next().unwrap_or_default().parse()?,
            "--days" => days = args.next().unwrap_or_default().parse()?,
            "--out" => out = args.next(),
            "--personality" => {
                println!("{:#?}", Personality::for_seed(seed));
                return Ok(());
            }
            _ => files.push(a),
        }
    }
    let cfg = SynthConfig::new(seed, days, "America/Indiana/Indianapolis")?;
    let began = Instant::now();
    let trace = generate(&cfg);
    let gen_time = began.elapsed();
    let began = Instant::now();
    let mut bytes = Vec::new();
    write_synth(&cfg, &mut bytes)?;
    let write_time = began.elapsed();
    eprintln!(
        "seed {seed}, {days} days: {} rows generated in {:.1} ms; generate+write {} bytes in {:.1} ms",
        trace.series.len(),
        gen_time.as_secs_f64() * 1e3,
        bytes.len(),
        write_time.as_secs_f64() * 1e3
    );
    if let Some(out) = out {
        std::fs::write(out, &bytes)?;
    }
    print!("{:<28} {:>8}", "trace", "rows");
    for s in State::ALL {
        print!(" {:>6}", s.label());
    }
    println!();
    print_row(
        &format!("synth seed {seed}"),
        trace.series.len(),
        shares(&trace.series),
    );
    for f in files {
        let (t, dropped) = read_lenient(Path::new(&f))?;
        if dropped > 0 {
            eprintln!("{f}: dropped {dropped} rows whose time was not after the previous row's");
        }
        let name = Path::new(&f)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or(f);
        print_row(&name, t.series.len(), shares(&t.series));
    }
    Ok(())
}
