//! Properties of the predictor that hold for any data: the estimators agree
//! where they should, the solver agrees with a simulation of the process it
//! solves, and the trace reader survives hostile bytes.

use gleaner::history::trace::parse_trace;
use gleaner::model::kernel::{HoldingTimeKernel, Method, RunObservations};
use gleaner::model::solver::{failure_by_cause, reliability, Start, CAUSES};
use gleaner::model::state::State;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

fn arb_state() -> impl Strategy<Value = State> {
    // Transient states dominate, as on real hosts, so runs are long enough to matter.
    prop_oneof![
        4 => Just(State::S1),
        4 => Just(State::S2),
        1 => Just(State::S3),
        1 => Just(State::S4),
        1 => Just(State::S5),
    ]
}

/// Windows whose last state is a failure: no S1/S2 run is censored.
fn arb_uncensored_windows() -> impl Strategy<Value = Vec<Vec<State>>> {
    prop::collection::vec(
        prop::collection::vec(arb_state(), 0..40).prop_map(|mut w| {
            w.push(State::S5);
            w
        }),
        1..8,
    )
}

fn estimate(windows: &[Vec<State>], method: Method) -> HoldingTimeKernel {
    let mut obs = RunObservations::new();
    for w in windows {
        obs.add_window(w);
    }
    obs.estimate(method)
}

proptest! {
    #[test]
    fn without_censoring_paper_and_km_agree(windows in arb_uncensored_windows()) {
        let paper = estimate(&windows, Method::Paper);
        let km = estimate(&windows, Method::Km);
        for (p, k) in paper.rows.iter().zip(&km.rows) {
            prop_assert_eq!(p.entries.len(), k.entries.len());
            for (a, b) in p.entries.iter().zip(&k.entries) {
                prop_assert_eq!(a.l, b.l);
                for j in 0..4 {
                    prop_assert!((a.q[j] - b.q[j]).abs() < 1e-12, "l={} j={} {} vs {}", a.l, j, a.q[j], b.q[j]);
                }
            }
        }
    }

    #[test]
    fn estimated_kernels_are_sub_stochastic(
        windows in prop::collection::vec(prop::collection::vec(arb_state(), 1..60), 1..10),
        km in any::<bool>(),
    ) {
        let method = if km { Method::Km } else { Method::Paper };
        let k = estimate(&windows, method);
        for row in &k.rows {
            let total: f64 = row.entries.iter().flat_map(|e| e.q.iter()).sum();
            prop_assert!(total <= 1.0 + 1e-12);
            prop_assert!(row.entries.iter().all(|e| e.q.iter().all(|&v| v >= 0.0)));
            prop_assert!(row.entries.windows(2).all(|w| w[0].l < w[1].l));
        }
    }

    #[test]
    fn reader_survives_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = parse_trace(&bytes, Path::new("random.csv"));
        let mut with_magic = b"# gleaner-trace v1\n".to_vec();
        with_magic.extend_from_slice(&bytes);
        if let Err(e) = parse_trace(&with_magic, Path::new("random.csv")) {
            let lines = with_magic.split(|&b| b == b'\n').count();
            prop_assert!(e.line().is_some_and(|l| l >= 1 && l <= lines), "{}", e);
        }
    }

    #[test]
    fn reader_reports_the_corrupted_line(
        rows in 2usize..50,
        victim in 0usize..50,
        junk in "[a-z,.\\-]{0,12}",
    ) {
        let victim = victim % rows;
        let mut text = String::from("# gleaner-trace v1\n# tz: Europe/Amsterdam\ntime,cpu,free_mib,up\n");
        for r in 0..rows {
            if r == victim {
                text.push_str(&format!("{}x{junk}\n", 1000 + r));
            } else {
                text.push_str(&format!("{},{},512,1\n", 1000 + r, r % 100));
            }
        }
        let err = parse_trace(text.as_bytes(), Path::new("t.csv")).unwrap_err();
        prop_assert_eq!(err.line(), Some(4 + victim), "{}", err);
    }
}

/// Draws one path of the semi-Markov process from transient row `i` and
/// says whether it fails within `m` steps.
fn simulate_fails(k: &HoldingTimeKernel, mut i: usize, m: usize, rng: &mut ChaCha8Rng) -> bool {
    let mut time = 0usize;
    loop {
        let u: f64 = rng.random();
        let mut cumulative = 0.0;
        let mut jump = None;
        'find: for e in &k.rows[i].entries {
            for (j, &q) in e.q.iter().enumerate() {
                cumulative += q;
                if u < cumulative {
                    jump = Some((e.l as usize, j));
                    break 'find;
                }
            }
        }
        // The remaining mass never leaves: the host stays in this state.
        let Some((l, target)) = jump else {
            return false;
        };
        time += l;
        if time > m {
            return false;
        }
        if target > 0 {
            return true;
        }
        i = 1 - i;
    }
}

#[test]
fn monte_carlo_of_the_estimated_process_agrees_with_the_solver() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // History: ten windows of 300 steps with random sojourns and rare failures.
    let mut windows = Vec::new();
    for _ in 0..10 {
        let mut w = Vec::new();
        let mut state = State::S1;
        while w.len() < 301 {
            let run = rng.random_range(1..40);
            w.extend(std::iter::repeat_n(state, run));
            state = match rng.random_range(0..20) {
                0 => State::S3,
                1 => State::S4,
                2 => State::S5,
                _ if state == State::S1 => State::S2,
                _ => State::S1,
            };
        }
        w.truncate(301);
        windows.push(w);
    }
    for method in Method::ALL {
        let k = estimate(&windows, method);
        for (i, m) in [(0, 60), (1, 150), (0, 300)] {
            let fail = failure_by_cause(&k, m, Start::in_row(i));
            let p: f64 = fail.iter().sum();
            let n = 40_000;
            let hits = (0..n)
                .filter(|_| simulate_fails(&k, i, m, &mut rng))
                .count();
            let p_hat = hits as f64 / n as f64;
            let se = (p * (1.0 - p) / n as f64).sqrt().max(1e-9);
            assert!(
                (p_hat - p).abs() <= 3.0 * se,
                "{method} from row {i} over {m} steps: simulated {p_hat}, solved {p} (se {se})"
            );
            assert!((reliability(fail) - (1.0 - p)).abs() < 1e-12);
            assert_eq!(fail.len(), CAUSES);
        }
    }
}
