//! Temporal reliability from a holding-time kernel: the papers' Eq. 3/4.
//!
//! With the three failure states absorbing and summed first, the chance of
//! failing by cause c within n steps from transient state i is
//!
//!   F_i^c(n) = A_i^c(n) + Σ_{l=1..n} q_{i,i'}(l) · F_{i'}^c(n − l),  F(0) = 0,
//!
//! with A_i^c(n) = Σ_{l ≤ n} q_ic(l) and i' the other of S1/S2. We solve the
//! same recursion in its renewal form: e_j(n), the probability that a sojourn
//! in transient state j begins at step n, obeys
//!
//!   e_j(n) = src_j(n) + Σ_{l=1..n} q_{j',j}(l) · e_{j'}(n − l),
//!
//! and F^c(m) = Σ_j Σ_{l ≤ m} q_jc(l) · E_j(m − l) with E_j the running sum of
//! e_j. This carries one number per step instead of one per cause, and the
//! start — a known state, a distribution over S1/S2, or a first sojourn
//! conditioned on its age — is only a different source term. Because q is
//! zero except at the holding times actually observed, each step sums over
//! the kernel's few non-zero entries, not every l ≤ n: O(m · entries)
//! instead of the full recursion's O(m² · 25).
//! Pure code: a kernel in, probabilities out.

// Index loops here mirror the subscripts of the equations above.
#![allow(clippy::needless_range_loop)]

use crate::kernel::{HoldingTimeKernel, KernelRow, TARGETS};

/// Number of failure causes (S3, S4, S5).
pub const CAUSES: usize = 3;

/// How the window starts.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// A fresh sojourn in S1 or S2 at step 0, with these probabilities
    /// (they may sum to less than one when the rest starts failed).
    Fresh([f64; 2]),
    /// The first sojourn is in transient row `from` and follows `first`
    /// (e.g. a row conditioned on the sojourn's age); later ones follow the kernel.
    FirstSojourn { from: usize, first: &'a KernelRow },
}

impl Start<'_> {
    /// A certain start in transient row `i` (0 = S1, 1 = S2).
    pub fn in_row(i: usize) -> Self {
        let mut w = [0.0; 2];
        w[i] = 1.0;
        Start::Fresh(w)
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

/// Block sizes of the two vectorised levels of the renewal sum. An entry
/// with holding time l ≥ B only reads values from before the current block
/// of B steps, so its whole contribution to the block is one contiguous
/// `dst += q · src` that the compiler vectorises. Entries with l < INNER_BLOCK
/// are summed step by step. The sizes were tuned on `benches/predict.rs`.
const OUTER_BLOCK: usize = 512;
const INNER_BLOCK: usize = 32;

/// dst[k] += q · src[k]: one entry's contribution to one block.
fn axpy(dst: &mut [f64], src: &[f64], q: f64) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += q * s;
    }
}

/// Adds, for steps n in `lo..hi`, Σ q_k · from[n − l_k] over `entries`
/// (all with l_k ≥ hi − lo, so every value read is already final).
fn add_block<const B: usize>(
    to: &mut [f64],
    from: &[f64],
    ls: &[usize],
    qs: &[f64],
    lo: usize,
    hi: usize,
) {
    for (&l, &q) in ls.iter().zip(qs) {
        if l >= hi {
            break; // sorted: later entries reach before step 0
        }
        let first = lo.max(l);
        // Full blocks have a fixed length, which the compiler unrolls.
        if hi - first == B {
            let dst = <&mut [f64; B]>::try_from(&mut to[first..hi]);
            let src = <&[f64; B]>::try_from(&from[first - l..hi - l]);
            if let (Ok(dst), Ok(src)) = (dst, src) {
                for k in 0..B {
                    dst[k] += q * src[k];
                }
                continue;
            }
        }
        axpy(&mut to[first..hi], &from[first - l..hi - l], q);
    }
}

/// The renewal sum over one row's entries towards the other state, level by level.
struct Levels<'r> {
    row: &'r PreparedRow,
    /// Entries [0, near) have l < INNER_BLOCK; [near, mid) have l < OUTER_BLOCK.
    near: usize,
    mid: usize,
    /// The near entries as a dense, reversed kernel: `near_reversed[k]` is
    /// q(INNER_BLOCK − k), zero where no run was seen. Small holding times are
    /// nearly all present on real hosts, so a dense dot product beats a gather.
    near_reversed: [f64; INNER_BLOCK],
}

impl<'r> Levels<'r> {
    fn new(row: &'r PreparedRow) -> Self {
        let near = row.other_l.partition_point(|&l| l < INNER_BLOCK);
        let mid = row.other_l.partition_point(|&l| l < OUTER_BLOCK);
        let mut near_reversed = [0.0; INNER_BLOCK];
        for (&l, &q) in row.other_l[..near].iter().zip(&row.other_q[..near]) {
            near_reversed[INNER_BLOCK - l] = q;
        }
        Levels {
            row,
            near,
            mid,
            near_reversed,
        }
    }

    fn outer(&self, to: &mut [f64], from: &[f64], lo: usize, hi: usize) {
        let r = self.row;
        add_block::<OUTER_BLOCK>(
            to,
            from,
            &r.other_l[self.mid..],
            &r.other_q[self.mid..],
            lo,
            hi,
        );
    }

    fn inner(&self, to: &mut [f64], from: &[f64], lo: usize, hi: usize) {
        let r = self.row;
        let (ls, qs) = (
            &r.other_l[self.near..self.mid],
            &r.other_q[self.near..self.mid],
        );
        add_block::<INNER_BLOCK>(to, from, ls, qs, lo, hi);
    }

    fn step(&self, to: &mut [f64], from: &[f64], n: usize) {
        if let Some(window) = n
            .checked_sub(INNER_BLOCK)
            .and_then(|lo| <&[f64; INNER_BLOCK]>::try_from(&from[lo..n]).ok())
        {
            // from[n − l] = window[INNER_BLOCK − l]: a dense dot product.
            let mut acc = [0.0f64; 4];
            for k in (0..INNER_BLOCK).step_by(4) {
                for j in 0..4 {
                    acc[j] += self.near_reversed[k + j] * window[k + j];
                }
            }
            to[n] += (acc[0] + acc[1]) + (acc[2] + acc[3]);
            return;
        }
        let r = self.row;
        // Near entries have l < INNER_BLOCK, so from there on all apply.
        let count = if n >= INNER_BLOCK {
            self.near
        } else {
            r.other_l[..self.near].partition_point(|&l| l <= n)
        };
        // Independent partial sums keep the adds from waiting on each other.
        let mut acc = [0.0f64; 4];
        let (ls, qs) = (&r.other_l[..count], &r.other_q[..count]);
        for (l4, q4) in ls.chunks_exact(4).zip(qs.chunks_exact(4)) {
            for k in 0..4 {
                acc[k] += q4[k] * from[n - l4[k]];
            }
        }
        let tail = count - count % 4;
        let mut sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (&l, &q) in ls[tail..].iter().zip(&qs[tail..]) {
            sum += q * from[n - l];
        }
        to[n] += sum;
    }
}

/// Runs the renewal e_j(n) += Σ_l q_{j',j}(l) · e_{j'}(n − l) for n = 1..=m,
/// on top of the source terms already in `entry`.
fn renew(rows: &[PreparedRow; 2], entry: &mut [Vec<f64>; 2], m: usize) {
    // levels[j] carries sojourns that end in the other state and begin one in j.
    let levels = [Levels::new(&rows[1]), Levels::new(&rows[0])];
    let [e1, e2] = entry;
    let mut outer_lo = 1;
    while outer_lo <= m {
        let outer_hi = (outer_lo + OUTER_BLOCK).min(m + 1);
        levels[0].outer(e1, e2, outer_lo, outer_hi);
        levels[1].outer(e2, e1, outer_lo, outer_hi);
        let mut inner_lo = outer_lo;
        while inner_lo < outer_hi {
            let inner_hi = (inner_lo + INNER_BLOCK).min(outer_hi);
            levels[0].inner(e1, e2, inner_lo, inner_hi);
            levels[1].inner(e2, e1, inner_lo, inner_hi);
            for n in inner_lo..inner_hi {
                levels[0].step(e1, e2, n);
                levels[1].step(e2, e1, n);
            }
            inner_lo = inner_hi;
        }
        outer_lo = outer_hi;
    }
}

/// Failure probability by cause (S3, S4, S5) within `m` steps (the
/// bounded-support solver).
pub fn failure_by_cause(kernel: &HoldingTimeKernel, m: usize, start: Start<'_>) -> [f64; CAUSES] {
    let rows = [prepare(&kernel.rows[0]), prepare(&kernel.rows[1])];
    let mut entry = [vec![0.0f64; m + 1], vec![0.0f64; m + 1]];
    let mut failed = [0.0f64; CAUSES];
    match start {
        Start::Fresh(w) => {
            entry[0][0] = w[0];
            entry[1][0] = w[1];
        }
        Start::FirstSojourn { from, first } => {
            let to = 1 - from.min(1);
            for e in first.entries.iter().take_while(|e| e.l as usize <= m) {
                entry[to][e.l as usize] += e.q[0];
                for c in 0..CAUSES {
                    failed[c] += e.q[c + 1];
                }
            }
        }
    }
    renew(&rows, &mut entry, m);
    for (j, row) in rows.iter().enumerate() {
        // Running sums: E_j(n) = Σ_{k ≤ n} e_j(k).
        let cumulative = &mut entry[j];
        for n in 1..=m {
            cumulative[n] += cumulative[n - 1];
        }
        for &(l, fail) in row.absorb.iter().take_while(|(l, _)| *l <= m) {
            let began = cumulative[m - l];
            for c in 0..CAUSES {
                failed[c] += fail[c] * began;
            }
        }
    }
    failed.map(|v| v.clamp(0.0, 1.0))
}

/// Temporal reliability from a failure-by-cause answer.
pub fn reliability(fail: [f64; CAUSES]) -> f64 {
    (1.0 - fail.iter().sum::<f64>()).clamp(0.0, 1.0)
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
        o.copy_from_slice(&p[m][i][2..2 + CAUSES]);
    }
    out
}

// Keeps the column layout of kernel rows and the solver in step.
const _: () = assert!(TARGETS == CAUSES + 1);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{KernelEntry, KernelRow};
    use proptest::prelude::*;

    fn row(entries: &[(u32, [f64; 4])], runs: usize) -> KernelRow {
        KernelRow {
            entries: entries.iter().map(|&(l, q)| KernelEntry { l, q }).collect(),
            runs,
        }
    }

    fn from_row(k: &HoldingTimeKernel, i: usize, m: usize) -> [f64; CAUSES] {
        failure_by_cause(k, m, Start::in_row(i))
    }

    #[test]
    fn single_failure_at_a_known_step() {
        // From S1: certain failure to S3 after 3 steps.
        let k = HoldingTimeKernel {
            rows: [row(&[(3, [0.0, 1.0, 0.0, 0.0])], 1), KernelRow::default()],
        };
        assert_eq!(from_row(&k, 0, 2), [0.0; 3]);
        assert_eq!(from_row(&k, 0, 3), [1.0, 0.0, 0.0]);
        assert_eq!(reliability(from_row(&k, 1, 5)), 1.0);
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
        assert_eq!(from_row(&k, 0, 2), [0.0, 0.0, 0.0]);
        assert_eq!(from_row(&k, 0, 3), [0.0, 0.0, 0.5]);
        assert_eq!(from_row(&k, 1, 2), [0.0, 0.0, 0.5]);
        let mixed = failure_by_cause(&k, 2, Start::Fresh([0.5, 0.25]));
        assert_eq!(mixed, [0.0, 0.0, 0.125]);
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
        // The blocked renewal has levels at 32 and 512 steps; long windows with
        // long holding times exercise every level and the block edges.
        #![proptest_config(ProptestConfig::with_cases(4))]
        #[test]
        fn sparse_solver_equals_full_recursion_on_long_windows(k in arb_kernel(700), m in 520usize..1100) {
            let full = reference_failure(&k, m);
            for i in 0..2 {
                let f = from_row(&k, i, m);
                for cause in 0..CAUSES {
                    prop_assert!((f[cause] - full[i][cause]).abs() <= 1e-12);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn sparse_solver_equals_full_recursion(k in arb_kernel(30), m in 0usize..60) {
            let full = reference_failure(&k, m);
            for i in 0..2 {
                let f = from_row(&k, i, m);
                for cause in 0..CAUSES {
                    let d = (f[cause] - full[i][cause]).abs();
                    prop_assert!(d <= 1e-12, "i={} cause={} diff={}", i, cause, d);
                }
            }
        }

        #[test]
        fn reliability_is_a_probability_and_non_increasing(k in arb_kernel(50), m in 1usize..120) {
            for i in 0..2 {
                let mut previous = 1.0;
                for n in 0..=m {
                    let tr = reliability(from_row(&k, i, n));
                    prop_assert!((0.0..=1.0).contains(&tr));
                    prop_assert!(tr <= previous + 1e-12, "TR rose at n={}", n);
                    previous = tr;
                }
            }
        }

        #[test]
        fn a_first_sojourn_with_the_plain_row_equals_a_fresh_start(k in arb_kernel(20), m in 0usize..50) {
            for i in 0..2 {
                let fresh = from_row(&k, i, m);
                let first = failure_by_cause(&k, m, Start::FirstSojourn { from: i, first: &k.rows[i] });
                for cause in 0..CAUSES {
                    prop_assert!((fresh[cause] - first[cause]).abs() <= 1e-12);
                }
            }
        }

        #[test]
        fn a_start_distribution_mixes_linearly(k in arb_kernel(20), m in 0usize..50, w in 0.0f64..=1.0) {
            let mixed = failure_by_cause(&k, m, Start::Fresh([w, 1.0 - w]));
            let (a, b) = (from_row(&k, 0, m), from_row(&k, 1, m));
            for cause in 0..CAUSES {
                prop_assert!((mixed[cause] - (w * a[cause] + (1.0 - w) * b[cause])).abs() <= 1e-12);
            }
        }
    }
}
