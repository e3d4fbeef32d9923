//! Weighted ridge logistic regression by damped Newton steps, and the small
//! dense solve it needs: the one fitter of `logistic` (its coefficients and
//! `logistic+cal`'s recalibration, 6 features) and `hazard` (10 features),
//! const-generic over the number of features so each keeps plain arrays.
//!
//! The two callers were written apart and their answers are recorded in
//! `docs/accuracy.md`; [`Settings`] keeps each one's stopping rules and
//! Hessian accumulation so the shared code gives them bit-identical
//! coefficients.
//! Pure code: no I/O, no clock.

/// One training row: features, weight, outcome (1 survived / 0 failed).
pub type Row<const N: usize> = ([f64; N], f64, f64);

/// How a caller's Newton iteration stops and builds its Hessian.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Newton steps at most.
    pub max_steps: usize,
    /// Floor on p (1 − p), so a row the model is sure of keeps some curvature.
    pub min_curvature: f64,
    /// Stop once no coefficient moved more than this in a step.
    pub min_move: f64,
    /// Accumulate only the upper triangle and mirror it (half the work:
    /// `hazard`), or every entry (`logistic`, whose recorded answers were
    /// made that way; the two differ in the last bits).
    pub mirror: bool,
}

/// Halvings of a step tried before the iteration gives up.
const HALVINGS: usize = 30;

pub(crate) fn dot<const N: usize>(a: &[f64; N], b: &[f64; N]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub(crate) fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// The penalised weighted log loss the fit minimises:
/// ½ ridge |β − prior|² + Σ w (log(1 + e^z) − y z), z = β·x.
pub fn objective<const N: usize>(
    rows: &[Row<N>],
    beta: &[f64; N],
    prior: [f64; N],
    ridge: f64,
) -> f64 {
    let penalty: f64 = beta
        .iter()
        .zip(prior)
        .map(|(b, p)| 0.5 * ridge * (b - p).powi(2))
        .sum();
    rows.iter().fold(penalty, |acc, (x, w, y)| {
        let z = dot(beta, x);
        // log(1 + e^z), written to stay finite for large |z|.
        let softplus = if z > 0.0 {
            z + (-z).exp().ln_1p()
        } else {
            z.exp().ln_1p()
        };
        acc + w * (softplus - y * z)
    })
}

/// Weighted ridge logistic regression towards `prior`, starting there, by
/// Newton's method, each step halved until the penalised loss goes down (a
/// full step can overshoot where nearly every row survived and the loss is
/// flat). Stops when a step moves no coefficient by more than
/// `settings.min_move`, when no halving helps, or after `max_steps`.
#[allow(clippy::needless_range_loop)] // the Hessian's loops read two of its indices at once
pub fn fit<const N: usize>(
    rows: &[Row<N>],
    prior: [f64; N],
    ridge: f64,
    settings: &Settings,
) -> [f64; N] {
    let mut beta = prior;
    let mut loss = objective(rows, &beta, prior, ridge);
    for _ in 0..settings.max_steps {
        let mut grad = [0.0; N];
        let mut hess = [[0.0; N]; N];
        for i in 0..N {
            grad[i] = ridge * (beta[i] - prior[i]);
            hess[i][i] = ridge;
        }
        for (x, w, y) in rows {
            let p = sigmoid(dot(&beta, x));
            let r = w * (p - y);
            let c = w * (p * (1.0 - p)).max(settings.min_curvature);
            for i in 0..N {
                grad[i] += r * x[i];
                let from = if settings.mirror { i } else { 0 };
                for j in from..N {
                    hess[i][j] += c * x[i] * x[j];
                }
            }
        }
        if settings.mirror {
            for i in 0..N {
                for j in 0..i {
                    hess[i][j] = hess[j][i];
                }
            }
        }
        let Some(delta) = solve(hess, grad) else {
            break;
        };
        let mut scale = 1.0;
        let mut improved = false;
        for _ in 0..HALVINGS {
            let mut trial = beta;
            for i in 0..N {
                trial[i] -= scale * delta[i];
            }
            let trial_loss = objective(rows, &trial, prior, ridge);
            if trial_loss.is_finite() && trial_loss <= loss {
                let moved = delta.iter().fold(0.0f64, |m, d| m.max((scale * d).abs()));
                beta = trial;
                loss = trial_loss;
                improved = moved > settings.min_move;
                break;
            }
            scale *= 0.5;
        }
        if !improved {
            break;
        }
    }
    beta
}

/// Solves a x = b (Gaussian elimination with partial pivoting); `None` when
/// a is singular or the solution is not finite.
#[allow(clippy::needless_range_loop)] // row operations read two rows of `a` at once
pub fn solve<const N: usize>(mut a: [[f64; N]; N], mut b: [f64; N]) -> Option<[f64; N]> {
    for col in 0..N {
        let pivot = (col..N).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for r in col + 1..N {
            let f = a[r][col] / a[col][col];
            for c in col..N {
                a[r][c] -= f * a[col][c];
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = [0.0; N];
    for r in (0..N).rev() {
        let tail: f64 = (r + 1..N).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - tail) / a[r][r];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: Settings = Settings {
        max_steps: 30,
        min_curvature: 1e-12,
        min_move: 1e-9,
        mirror: true,
    };

    #[test]
    fn solve_by_hand_with_pivoting() {
        // The first pivot is 0: a row swap is needed.
        let x = solve([[0.0, 2.0], [3.0, 1.0]], [4.0, 5.0]).unwrap();
        assert!(
            (x[0] - 1.0).abs() < 1e-15 && (x[1] - 2.0).abs() < 1e-15,
            "{x:?}"
        );
        let x = solve(
            [[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]],
            [6.0, 10.0, 8.0],
        )
        .unwrap();
        // 4 + 2 = 6, 1 + 6 + 3 = 10, 2 + 6 = 8.
        for (v, want) in x.iter().zip([1.0, 2.0, 3.0]) {
            assert!((v - want).abs() < 1e-12, "{x:?}");
        }
        assert_eq!(solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 1.0]), None);
    }

    #[test]
    fn an_intercept_alone_learns_the_weighted_share_and_the_ridge_pulls_it() {
        // 30 of 40 rows survive (weight 1), so the unpenalised log-odds is ln 3.
        let rows: Vec<Row<1>> = (0..40)
            .map(|i| ([1.0], 1.0, if i < 30 { 1.0 } else { 0.0 }))
            .collect();
        let free = fit(&rows, [0.0], 1e-9, &SETTINGS);
        assert!((free[0] - 3.0f64.ln()).abs() < 1e-6, "{free:?}");
        // A strong ridge towards 0 stops short of it, on the same side.
        let pulled = fit(&rows, [0.0], 40.0, &SETTINGS);
        assert!(pulled[0] > 0.0 && pulled[0] < free[0] - 0.1, "{pulled:?}");
        // The gradient vanishes at the optimum: 40 (p − 0.75) + ridge β = 0.
        let p = sigmoid(pulled[0]);
        assert!((40.0 * (p - 0.75) + 40.0 * pulled[0]).abs() < 1e-6);
    }

    #[test]
    fn mirrored_and_full_hessians_reach_the_same_optimum() {
        // Two features: survival more likely with x.
        let rows: Vec<Row<2>> = (0..200)
            .map(|i| {
                let x = f64::from(i % 20) / 10.0 - 1.0;
                let y = if (i * 7919) % 100 < (50.0 + 40.0 * x) as i32 {
                    1.0
                } else {
                    0.0
                };
                ([1.0, x], 1.0, y)
            })
            .collect();
        let full = Settings {
            mirror: false,
            ..SETTINGS
        };
        let a = fit(&rows, [0.0, 0.0], 1.0, &SETTINGS);
        let b = fit(&rows, [0.0, 0.0], 1.0, &full);
        assert!(a[1] > 0.5, "{a:?}");
        for (u, v) in a.iter().zip(b) {
            assert!((u - v).abs() < 1e-8, "{a:?} {b:?}");
        }
        // The loss at the optimum is below the loss at the start.
        assert!(
            objective(&rows, &a, [0.0, 0.0], 1.0) < objective(&rows, &[0.0, 0.0], [0.0, 0.0], 1.0)
        );
    }
}
