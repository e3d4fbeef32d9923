//! The no-peeking rule on a synthetic lab trace: every registry method gives
//! the same forecast from a series cut at W as from the whole series. It lives
//! here, not in the model crate, because the synthetic host generator writes
//! trace files and so belongs to the binary crate.

use gleaner::eval::synth::{generate, SynthConfig};
use gleaner::model::baselines::{method_by_name, method_names, truncated};
use gleaner::model::predict::PredictRequest;
use gleaner::model::state::Thresholds;

const DAY: i64 = 86_400;
const HOUR: i64 = 3600;

fn request(at: i64, window: u64, th: Thresholds) -> PredictRequest {
    PredictRequest::new(at, window, th)
}

#[test]
fn no_method_peeks_past_w() {
    let trace = generate(&SynthConfig::new(11, 17, "UTC").unwrap());
    let series = &trace.series;
    let start = series.first_time().unwrap();
    let th = Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    };
    let mut checked = 0;
    for (day, hour) in [(14, 8), (15, 13), (16, 21)] {
        // W on a row, so the state at W reads the same from both copies.
        let nominal = start + day * DAY + hour * HOUR;
        let row = series.row_at(nominal).unwrap();
        let at = series.get(row).unwrap().time;
        let cut = truncated(series, at);
        let req = request(at, 2 * 3600, th);
        for name in method_names() {
            let method = method_by_name(name, 3).unwrap();
            let full = method.forecast(series, &req);
            let known = method.forecast(&cut, &req);
            assert_eq!(full, known, "{name} at {at}");
            if full.is_ok() {
                checked += 1;
            }
        }
    }
    assert!(checked >= 40, "only {checked} forecasts succeeded");
}

/// The same rule for the logistic methods on a record long enough for
/// `logistic+cal`'s held-out fortnight (28 days before W's date), where its
/// recalibration reads the fit of two weeks earlier and the windows since.
#[test]
fn logistic_methods_do_not_peek_with_the_held_out_days_active() {
    let trace = generate(&SynthConfig::new(11, 36, "UTC").unwrap());
    let series = &trace.series;
    let start = series.first_time().unwrap();
    let th = Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    };
    let mut checked = 0;
    for (day, hour) in [(30, 8), (33, 13), (35, 21)] {
        let nominal = start + day * DAY + hour * HOUR;
        let row = series.row_at(nominal).unwrap();
        let at = series.get(row).unwrap().time;
        let cut = truncated(series, at);
        for window in [3600, 10 * 3600] {
            let req = request(at, window, th);
            for name in [
                "logistic",
                "logistic+cal",
                "logistic+iso",
                "nws",
                "nws+mix",
                "logistic+hourbias",
                "logistic+hostcal",
            ] {
                let method = method_by_name(name, 3).unwrap();
                let full = method.forecast(series, &req);
                let known = method.forecast(&cut, &req);
                assert_eq!(full, known, "{name} at {at}, {window} s");
                if full.is_ok() {
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} forecasts succeeded");
}
