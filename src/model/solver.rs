//! Temporal reliability from a holding-time kernel: the papers' Eq. 3/4.
//!
//! With the three failure states absorbing and summed first, the chance of
//! failing by cause c within n steps from transient state i is
//!
//!   F_i^c(n) = A_i^c(n) + Σ_{l=1..n} q_{i,i'}(l) · F_{i'}^c(n − l),  F(0) = 0,
//!
//! with A_i^c(n) = Σ_{l ≤ n} q_ic(l) and i' the other of S1/S2. Because
//! q is zero except at the holding times actually observed, the sum runs over
//! the kernel's few non-zero entries, not over every l ≤ n: the work is
//! O(m · entries) instead of the full recursion's O(m² · 25).
//! Pure code: a kernel in, probabilities out.

use crate::model::kernel::{HoldingTimeKernel, KernelRow, TARGETS};

/// Number of failure causes (S3, S4, S5).
pub const CAUSES: usize = 3;

/// F_i^c(n) for both transient start states i and every n = 0..=m.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureCurves {
    /// Index 0: starting in S1, 1: starting in S2; each m + 1 entries of [S3, S4, S5].
    curves: [Vec<[f64; CAUSES]>; 2],
}

impl FailureCurves {
    /// Failure probability by cause within `n` steps, starting in transient row `i`.
    pub fn by_cause(&self, i: usize, n: usize) -> [f64; CAUSES] {
        self.curves[i].get(n).copied().unwrap_or([0.0; CAUSES])
    }

    /// Probability of any failure within `n` steps from transient row `i`.
    pub fn failure(&self, i: usize, n: usize) -> f64 {
        self.by_cause(i, n).iter().sum()
    }

    /// Temporal reliability over `n` steps from transient row `i`: 1 − Σ_c F_i^c(n).
    pub fn reliability(&self, i: usize, n: usize) -> f64 {
        (1.0 - self.failure(i, n)).clamp(0.0, 1.0)
    }

    /// The horizon m these curves were solved for.
    pub fn horizon(&self) -> usize {
        self.curves[0].len().saturating_sub(1)
    }
}

/// A kernel row split into what the recursion needs: the holding times with
/// mass towards the other transient state, and the absorbing mass per step.
struct PreparedRow {
    other_l: Vec<usize>,
    other_q: Vec<f64>,
    absorb: Vec<(usize, [f64; CAUSES])>,
}

fn prepare(row: &KernelRow) -> PreparedRow {
    let mut p = PreparedRow {
        other_l: Vec::new(),
        other_q: Vec::new(),
        absorb: Vec::new(),
    };
    for e in &row.entries {
        let l = e.l as usize;
        if e.q[0] != 0.0 {
            p.other_l.push(l);
            p.other_q.push(e.q[0]);
        }
        let fail = [e.q[1], e.q[2], e.q[3]];
        if fail.iter().any(|&v| v != 0.0) {
            p.absorb.push((l, fail));
        }
    }
    p
}

/// Solves the recursion for every n up to `m` (the bounded-support solver).
pub fn failure_curves(kernel: &HoldingTimeKernel, m: usize) -> FailureCurves {
    let rows = [prepare(&kernel.rows[0]), prepare(&kernel.rows[1])];
    let mut curves = [vec![[0.0; CAUSES]; m + 1], vec![[0.0; CAUSES]; m + 1]];
    let mut absorbed = [[0.0; CAUSES]; 2];
    let mut next_absorb = [0usize; 2];
    let mut reachable = [0usize; 2];
    for n in 1..=m {
        for i in 0..2 {
            let row = &rows[i];
            while let Some(&(l, fail)) = row.absorb.get(next_absorb[i]) {
                if l > n {
                    break;
                }
                for c in 0..CAUSES {
                    absorbed[i][c] += fail[c];
                }
                next_absorb[i] += 1;
            }
            while reachable[i] < row.other_l.len() && row.other_l[reachable[i]] <= n {
                reachable[i] += 1;
            }
            let (own, other) = if i == 0 {
                let (a, b) = curves.split_at_mut(1);
                (&mut a[0], &b[0])
            } else {
                let (a, b) = curves.split_at_mut(1);
                (&mut b[0], &a[0])
            };
            let mut acc = absorbed[i];
            for k in 0..reachable[i] {
                let q = row.other_q[k];
                let f = other[n - row.other_l[k]];
                acc[0] += q * f[0];
                acc[1] += q * f[1];
                acc[2] += q * f[2];
            }
            own[n] = acc;
        }
    }
    FailureCurves { curves }
}

/// Failure by cause within `m` steps for a first sojourn described by
/// `first` (for example a row conditioned on the sojourn's age), after which
/// the process follows `curves`. `other` is the row index of the state the
/// first sojourn would move to (the other transient state).
pub fn first_sojourn_failure(
    first: &KernelRow,
    other: usize,
    curves: &FailureCurves,
    m: usize,
) -> [f64; CAUSES] {
    let mut acc = [0.0; CAUSES];
    for e in first.entries.iter().take_while(|e| e.l as usize <= m) {
        let l = e.l as usize;
        let f = curves.by_cause(other, m - l);
        for c in 0..CAUSES {
            acc[c] += e.q[c + 1] + e.q[0] * f[c];
        }
    }
    acc
}

/// The full interval-transition recursion of the papers' Eq. 3 over all five
/// states and every holding time, with no use of sparsity:
/// P_ij(n) = δ_ij·(1 − Σ_k Σ_{l≤n} q_ik(l)) + Σ_k Σ_{l=1..n} q_ik(l)·P_kj(n − l).
/// O(m² · 125): a reference to check [`failure_curves`] against, not for use.
pub fn reference_failure(kernel: &HoldingTimeKernel, m: usize) -> [[f64; CAUSES]; 2] {
    const S: usize = 5;
    // Dense q[i][k][l]; rows of S3..S5 stay zero (absorbing).
    let mut q = vec![[[0.0f64; S]; S]; m + 1];
    for (i, row) in kernel.rows.iter().enumerate() {
        for e in &row.entries {
            let l = e.l as usize;
            if l > m {
                continue;
            }
            let other = 1 - i;
            q[l][i][other] += e.q[0];
            for c in 0..CAUSES {
                q[l][i][2 + c] += e.q[1 + c];
            }
        }
    }
    let mut p = vec![[[0.0f64; S]; S]; m + 1];
    for (i, row) in p[0].iter_mut().enumerate() {
        row[i] = 1.0;
    }
    let mut left = [0.0f64; S];
    for n in 1..=m {
        for (i, l_i) in left.iter_mut().enumerate() {
            *l_i += q[n][i].iter().sum::<f64>();
        }
        for i in 0..S {
            for j in 0..S {
                let mut v = if i == j { 1.0 - left[i] } else { 0.0 };
                for l in 1..=n {
                    for k in 0..S {
                        v += q[l][i][k] * p[n - l][k][j];
                    }
                }
                p[n][i][j] = v;
            }
        }
    }
    let mut out = [[0.0; CAUSES]; 2];
    for (i, o) in out.iter_mut().enumerate() {
        for c in 0..CAUSES {
            o[c] = p[m][i][2 + c];
        }
    }
    out
}

// Keeps the column layout of kernel rows and the solver in step.
const _: () = assert!(TARGETS == CAUSES + 1);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::{KernelEntry, KernelRow};
    use proptest::prelude::*;

    fn row(entries: &[(u32, [f64; 4])], runs: usize) -> KernelRow {
        KernelRow {
            entries: entries.iter().map(|&(l, q)| KernelEntry { l, q }).collect(),
            runs,
        }
    }

    #[test]
    fn single_failure_at_a_known_step() {
        // From S1: certain failure to S3 after 3 steps.
        let k = HoldingTimeKernel {
            rows: [row(&[(3, [0.0, 1.0, 0.0, 0.0])], 1), KernelRow::default()],
        };
        let c = failure_curves(&k, 5);
        assert_eq!(c.failure(0, 2), 0.0);
        assert_eq!(c.by_cause(0, 3), [1.0, 0.0, 0.0]);
        assert_eq!(c.reliability(1, 5), 1.0);
    }

    #[test]
    fn alternation_then_failure_by_cause() {
        // S1 → S2 after 1 step (p = 1); S2 → S5 after 2 steps (p = 0.5), stays otherwise.
        let k = HoldingTimeKernel {
            rows: [
                row(&[(1, [1.0, 0.0, 0.0, 0.0])], 1),
                row(&[(2, [0.0, 0.0, 0.0, 0.5])], 2),
            ],
        };
        let c = failure_curves(&k, 4);
        assert_eq!(c.by_cause(0, 2), [0.0, 0.0, 0.0]);
        assert_eq!(c.by_cause(0, 3), [0.0, 0.0, 0.5]);
        assert_eq!(c.by_cause(1, 2), [0.0, 0.0, 0.5]);
    }

    /// A random sub-stochastic kernel row with holding times up to `max_l`.
    fn arb_row(max_l: u32) -> impl Strategy<Value = KernelRow> {
        prop::collection::btree_map(1..=max_l, prop::array::uniform4(0.0f64..1.0), 0..8)
            .prop_flat_map(|m| {
                let total: f64 = m.values().flat_map(|q| q.iter()).sum();
                (Just(m), 0.0f64..=1.0).prop_map(move |(m, keep)| {
                    // Scale so the row sums to at most 1 (the rest never leaves).
                    let scale = if total > 0.0 { keep / total } else { 0.0 };
                    KernelRow {
                        entries: m
                            .iter()
                            .map(|(&l, q)| KernelEntry {
                                l,
                                q: q.map(|v| v * scale),
                            })
                            .collect(),
                        runs: 1,
                    }
                })
            })
    }

    fn arb_kernel(max_l: u32) -> impl Strategy<Value = HoldingTimeKernel> {
        (arb_row(max_l), arb_row(max_l)).prop_map(|(a, b)| HoldingTimeKernel { rows: [a, b] })
    }

    proptest! {
        #[test]
        fn sparse_solver_equals_full_recursion(k in arb_kernel(30), m in 0usize..60) {
            let c = failure_curves(&k, m);
            let full = reference_failure(&k, m);
            for i in 0..2 {
                for cause in 0..CAUSES {
                    let d = (c.by_cause(i, m)[cause] - full[i][cause]).abs();
                    prop_assert!(d <= 1e-12, "i={} cause={} diff={}", i, cause, d);
                }
            }
        }

        #[test]
        fn reliability_is_a_probability_and_non_increasing(k in arb_kernel(50), m in 1usize..200) {
            let c = failure_curves(&k, m);
            for i in 0..2 {
                let mut previous = 1.0;
                for n in 0..=m {
                    let tr = c.reliability(i, n);
                    prop_assert!((0.0..=1.0).contains(&tr));
                    prop_assert!(tr <= previous + 1e-12, "TR rose at n={}", n);
                    previous = tr;
                }
            }
        }

        #[test]
        fn first_sojourn_with_the_plain_row_equals_the_curve(k in arb_kernel(20), m in 0usize..50) {
            let c = failure_curves(&k, m);
            for i in 0..2 {
                let f = first_sojourn_failure(&k.rows[i], 1 - i, &c, m);
                for cause in 0..CAUSES {
                    prop_assert!((f[cause] - c.by_cause(i, m)[cause]).abs() <= 1e-12);
                }
            }
        }
    }
}
