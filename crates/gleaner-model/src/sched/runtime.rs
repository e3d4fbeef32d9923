//! A batch's task runtime estimate, learnt from the tasks that complete
//! (issue 11, scope 2): the declared `--runtime` is the prior, and each
//! completed task reports its CPU and wall seconds and the effective power
//! Γ = P·A its host gave it over the run.
//!
//! A completion gives a reference runtime (seconds on a dedicated host with
//! P = 1), CISNE's CPUtime/ExeTime idea (seed 002, Eq. 8, 9): a guest that
//! used (nearly) all the CPU it was given was CPU-bound, and its CPU seconds
//! are its work, measured rather than predicted; a guest that used less
//! waited on something else, and its wall time scaled by the host's speed,
//! wall · Γ, is what it would take on the reference host.
//!
//! Runtimes are taken as log-normal. The prior counts as `prior_weight`
//! tasks at ln(declared) with spread `prior_sigma_log`; completions update
//! the mean and spread of ln(runtime) by the normal-inverse-gamma
//! conjugate rule, so a few completions move the estimate a little and many
//! move it to what the batch shows. Pure arithmetic.

use serde::{Deserialize, Serialize};

/// Share of the CPU it was given above which a guest counts as CPU-bound.
pub const CPU_BOUND_SHARE: f64 = 0.8;
/// Tasks the declared runtime counts as by default.
pub const DEFAULT_PRIOR_WEIGHT: f64 = 3.0;
/// Spread of ln(runtime) assumed before any task completes.
pub const DEFAULT_PRIOR_SIGMA_LOG: f64 = 0.5;
/// Longest runtime taken (a year), against absurd reports.
pub const MAX_RUNTIME_SECS: f64 = 366.0 * 86_400.0;

/// What a host reports of one completed task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// CPU seconds the guest used, in reference seconds (the host's own
    /// CPU seconds times its relative power P).
    pub cpu_secs: f64,
    /// Wall seconds from start to end.
    pub wall_secs: f64,
    /// The host's effective power Γ = P·A over the run, in (0, 1].
    pub gamma: f64,
}

impl Completion {
    /// The reference runtime this completion shows: `cpu_secs` when the
    /// guest was CPU-bound (it used at least [`CPU_BOUND_SHARE`] of
    /// wall · Γ), else wall · Γ.
    pub fn reference_secs(&self) -> f64 {
        let given = self.wall_secs * self.gamma;
        if self.cpu_secs >= CPU_BOUND_SHARE * given {
            self.cpu_secs
        } else {
            given
        }
    }
}

/// Why a number was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error("the declared runtime {0} s must be finite, positive and at most a year")]
    BadPrior(f64),
    #[error("the prior weight {weight} and spread {sigma_log} must be finite and positive")]
    BadPriorShape { weight: f64, sigma_log: f64 },
    #[error(
        "a completion with cpu {cpu_secs} s, wall {wall_secs} s, gamma {gamma} is not usable: \
         seconds must be finite, wall and the reference runtime positive and at most a year, gamma in (0, 1]"
    )]
    BadCompletion {
        cpu_secs: f64,
        wall_secs: f64,
        gamma: f64,
    },
}

/// The runtime estimate of a batch's tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeEstimate {
    prior_log: f64,
    prior_weight: f64,
    prior_var: f64,
    observed: usize,
    /// Running mean and sum of squared deviations of ln(reference) (Welford).
    obs_mean: f64,
    obs_m2: f64,
}

impl RuntimeEstimate {
    /// The prior from a declared runtime, with the default weight and spread.
    pub fn new(declared_secs: f64) -> Result<RuntimeEstimate, RuntimeError> {
        RuntimeEstimate::with_prior(declared_secs, DEFAULT_PRIOR_WEIGHT, DEFAULT_PRIOR_SIGMA_LOG)
    }

    /// The prior counting as `weight` tasks of median `declared_secs` whose
    /// ln(runtime) spreads by `sigma_log`.
    pub fn with_prior(
        declared_secs: f64,
        weight: f64,
        sigma_log: f64,
    ) -> Result<RuntimeEstimate, RuntimeError> {
        if !(declared_secs.is_finite() && declared_secs > 0.0 && declared_secs <= MAX_RUNTIME_SECS)
        {
            return Err(RuntimeError::BadPrior(declared_secs));
        }
        if !(weight.is_finite() && weight > 0.0 && sigma_log.is_finite() && sigma_log > 0.0) {
            return Err(RuntimeError::BadPriorShape { weight, sigma_log });
        }
        Ok(RuntimeEstimate {
            prior_log: declared_secs.ln(),
            prior_weight: weight,
            prior_var: sigma_log * sigma_log,
            observed: 0,
            obs_mean: 0.0,
            obs_m2: 0.0,
        })
    }

    /// Takes one completed task; returns the reference runtime it showed.
    pub fn observe(&mut self, c: Completion) -> Result<f64, RuntimeError> {
        let bad = RuntimeError::BadCompletion {
            cpu_secs: c.cpu_secs,
            wall_secs: c.wall_secs,
            gamma: c.gamma,
        };
        let usable = c.cpu_secs.is_finite()
            && c.cpu_secs >= 0.0
            && c.wall_secs.is_finite()
            && c.wall_secs > 0.0
            && c.gamma > 0.0
            && c.gamma <= 1.0;
        if !usable {
            return Err(bad);
        }
        let reference = c.reference_secs();
        if !(reference > 0.0 && reference <= MAX_RUNTIME_SECS) {
            return Err(bad);
        }
        let x = reference.ln();
        self.observed += 1;
        let delta = x - self.obs_mean;
        self.obs_mean += delta / self.observed as f64;
        self.obs_m2 += delta * (x - self.obs_mean);
        Ok(reference)
    }

    /// Completed tasks taken so far.
    pub fn observed(&self) -> usize {
        self.observed
    }

    /// Posterior (μ, σ²) of ln(runtime): κ_n = κ0 + n, μ_n = (κ0 μ0 + n x̄)/κ_n,
    /// σ²_n = (κ0 σ0² + Σ(x − x̄)² + κ0 n/κ_n (x̄ − μ0)²) / κ_n.
    fn posterior(&self) -> (f64, f64, f64) {
        let n = self.observed as f64;
        let k0 = self.prior_weight;
        let kn = k0 + n;
        if self.observed == 0 {
            return (self.prior_log, self.prior_var, kn);
        }
        let mu = (k0 * self.prior_log + n * self.obs_mean) / kn;
        let shift = self.obs_mean - self.prior_log;
        let var = (k0 * self.prior_var + self.obs_m2 + k0 * n / kn * shift * shift) / kn;
        (mu, var, kn)
    }

    /// The median runtime, e^μ.
    pub fn median_secs(&self) -> f64 {
        self.posterior().0.exp()
    }

    /// The mean runtime, e^{μ + σ²/2}: what to plan a task's length by.
    pub fn mean_secs(&self) -> f64 {
        let (mu, var, _) = self.posterior();
        (mu + var / 2.0).exp().min(MAX_RUNTIME_SECS)
    }

    /// The spread of the next task's ln(runtime) around μ, counting the
    /// uncertainty of μ itself: σ_n · sqrt(1 + 1/κ_n). This is what
    /// [`super::EstimateInput::runtime_sigma_log`] takes.
    pub fn sigma_log(&self) -> f64 {
        let (_, var, kn) = self.posterior();
        (var * (1.0 + 1.0 / kn)).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn the_reference_runtime_follows_the_cpu_share() {
        // Γ = 0.5 over 2 h: 3600 s were given. 3500 CPU s used: CPU-bound,
        // the CPU time is the work.
        let c = Completion {
            cpu_secs: 3500.0,
            wall_secs: 7200.0,
            gamma: 0.5,
        };
        assert_eq!(c.reference_secs(), 3500.0);
        // 1000 CPU s of 3600 given: it waited; wall · Γ = 3600 s.
        let c = Completion {
            cpu_secs: 1000.0,
            ..c
        };
        assert_eq!(c.reference_secs(), 3600.0);
    }

    #[test]
    fn the_prior_alone_gives_the_declared_median() {
        // Declared 1 h, κ0 = 3, σ0 = 0.5: median 3600, mean 3600·e^{0.125}
        // ≈ 4079.1, spread 0.5·sqrt(1 + 1/3) ≈ 0.57735.
        let r = RuntimeEstimate::new(3600.0).unwrap();
        assert!(close(r.median_secs(), 3600.0, 1e-12));
        assert!(close(r.mean_secs(), 4079.1, 1e-4));
        assert!(close(r.sigma_log(), 0.577_35, 1e-4));
    }

    #[test]
    fn one_completion_moves_the_estimate_a_quarter_of_the_way() {
        // One task of 7200 s (CPU-bound): μ1 = ln 3600 + ln 2 / 4, so the
        // median is 3600·2^{1/4} ≈ 4281.1; σ1² = (3·0.25 + 3/4·(ln 2)²)/4
        // ≈ 0.277 585, spread sqrt(0.277 585·(1 + 1/4)) ≈ 0.589 05.
        let mut r = RuntimeEstimate::new(3600.0).unwrap();
        let reference = r
            .observe(Completion {
                cpu_secs: 7200.0,
                wall_secs: 7200.0,
                gamma: 1.0,
            })
            .unwrap();
        assert_eq!(reference, 7200.0);
        assert!(close(r.median_secs(), 4281.1, 1e-4));
        assert!(close(r.sigma_log(), 0.589_05, 1e-4));
        assert!(close(
            r.mean_secs(),
            4281.1 * (0.277_585f64 / 2.0).exp(),
            1e-4
        ));
    }

    #[test]
    fn many_completions_outweigh_the_prior() {
        // 300 tasks alternating 1800 s and 7200 s (ln spread ln 2 around
        // the median 3600): the median comes to 3600 and σ near ln 2 ≈ 0.693.
        let mut r = RuntimeEstimate::new(600.0).unwrap();
        for i in 0..300 {
            let secs = if i % 2 == 0 { 1800.0 } else { 7200.0 };
            r.observe(Completion {
                cpu_secs: secs,
                wall_secs: secs,
                gamma: 1.0,
            })
            .unwrap();
        }
        assert_eq!(r.observed(), 300);
        // The prior's pull: μ = (3 ln 600 + 300 ln 3600)/303.
        let mu = (3.0 * 600f64.ln() + 300.0 * 3600f64.ln()) / 303.0;
        assert!(close(r.median_secs(), mu.exp(), 1e-9));
        assert!((r.sigma_log() - std::f64::consts::LN_2).abs() < 0.05);
    }

    #[test]
    fn bad_numbers_are_refused_by_name() {
        assert_eq!(RuntimeEstimate::new(0.0), Err(RuntimeError::BadPrior(0.0)));
        assert!(RuntimeEstimate::with_prior(60.0, 0.0, 0.5).is_err());
        let mut r = RuntimeEstimate::new(60.0).unwrap();
        for c in [
            Completion {
                cpu_secs: f64::NAN,
                wall_secs: 1.0,
                gamma: 1.0,
            },
            Completion {
                cpu_secs: 1.0,
                wall_secs: 0.0,
                gamma: 1.0,
            },
            Completion {
                cpu_secs: 1.0,
                wall_secs: 10.0,
                gamma: 1.5,
            },
            Completion {
                cpu_secs: 0.0,
                wall_secs: 1e12,
                gamma: 1.0,
            },
        ] {
            let err = r.observe(c).unwrap_err();
            assert!(err.to_string().contains("not usable"), "{err}");
        }
        assert_eq!(r.observed(), 0);
    }
}
