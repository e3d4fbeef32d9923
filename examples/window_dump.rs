//! Every tested window of `gleaner eval`'s protocol as one CSV row (trace,
//! date, day kind, hour, length, start state, outcome, each method's TR),
//! for diagnosing a method's calibration by slice (hour, day kind, start
//! state) where `gleaner eval` reports only pooled bins. Same protocol as
//! `gleaner eval` with its defaults (N = 10, every hour, test from half).
//! `[TEST_FROM=0.5] cargo run --release --example window_dump -- METHODS MEM_MIB LENGTHS_H FILE...`
use gleaner::eval::load::read_traces;
use gleaner::eval::protocol::{day_cases, request_for, test_days, ProtocolConfig};
use gleaner::eval::registry::methods_from_list;
use gleaner::model::state::Thresholds;
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        eprintln!("usage: window_dump METHODS MEM_MIB LENGTHS_H FILE...");
        std::process::exit(2);
    }
    let Ok(methods) = methods_from_list(&args[0], 1) else {
        eprintln!("unknown method in {}", args[0]);
        std::process::exit(2);
    };
    let mem: u64 = args[1].parse().unwrap_or(0);
    let lengths: Vec<u64> = args[2]
        .split(',')
        .filter_map(|h| h.parse::<u64>().ok())
        .map(|h| h * 3600)
        .collect();
    let paths: Vec<PathBuf> = args[3..].iter().map(PathBuf::from).collect();
    let traces = match read_traces(&paths) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let th = Thresholds {
        job_mem_mib: mem,
        ..Thresholds::default()
    };
    // `TEST_FROM=0.1` dumps nearly every day (for prototyping a method
    // that learns on a method's past forecasts); the default is eval's.
    let test_from = std::env::var("TEST_FROM")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.5);
    let cfg = ProtocolConfig {
        lengths,
        test_from,
        ..ProtocolConfig::new(th)
    };
    let names: Vec<String> = methods.iter().map(|m| m.name()).collect();
    println!("trace,date,kind,hour,T,start,survived,{}", names.join(","));
    for (i, trace) in traces.iter().enumerate() {
        let series = &trace.series;
        for date in test_days(series, &cfg) {
            for case in day_cases(series, i, date, &cfg) {
                let req = request_for(&case, &cfg);
                let trs: Vec<String> = methods
                    .iter()
                    .map(|m| {
                        m.forecast(series, &req)
                            .map_or("NA".to_string(), |f| format!("{:.5}", f.tr))
                    })
                    .collect();
                println!(
                    "{},{},{},{},{},{:?},{},{}",
                    i,
                    date,
                    case.kind.name(),
                    case.hour,
                    case.window_secs / 3600,
                    case.start,
                    u8::from(case.survived),
                    trs.join(",")
                );
            }
        }
    }
}
