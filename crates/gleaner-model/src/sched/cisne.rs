//! CISNE's estimators (seed 002, section 3): the remaining execution time of
//! a running job (Eq. 1, 2, 4, 5 with Eq. 6, 7) and the CPU time it has used
//! by a later simulation step (Eq. 8, 9).
//!
//! Notation follows the paper: `exe_tot` and `cpu_tot` are the job's
//! execution and CPU time measured in isolation, `exe_cur` and `cpu_cur`
//! what it has used so far, CPU(J) = cpu_tot / exe_tot its CPU share.
//! Percentages are fractions here (1.0 = one full CPU). A quantity the
//! formula cannot give (a division by zero) is `None`, never a panic or NaN.

/// Eq. 1: the future is like the past — RemainTime = exe_cur·(cpu_tot − cpu_cur)/cpu_cur.
pub fn remain_time_proportional(exe_cur: f64, cpu_tot: f64, cpu_cur: f64) -> Option<f64> {
    if cpu_cur > 0.0 {
        Some((exe_cur * (cpu_tot - cpu_cur) / cpu_cur).max(0.0))
    } else {
        None
    }
}

/// Eq. 2: the remaining time in isolation — exe_tot·(cpu_tot − cpu_cur)/cpu_tot.
pub fn remain_time_isolated(exe_tot: f64, cpu_tot: f64, cpu_cur: f64) -> Option<f64> {
    if cpu_tot > 0.0 {
        Some((exe_tot * (cpu_tot - cpu_cur) / cpu_tot).max(0.0))
    } else {
        None
    }
}

/// Eq. 4: the isolated remaining time stretched by MPL_max, the most tasks
/// (local and parallel) sharing any of the job's nodes (Eq. 3).
pub fn remain_time_mpl(exe_tot: f64, cpu_tot: f64, cpu_cur: f64, mpl_max: u32) -> Option<f64> {
    Some(remain_time_isolated(exe_tot, cpu_tot, cpu_cur)? * f64::from(mpl_max.max(1)))
}

/// Eq. 6: CPU_feas = min(CPU(J), CPU(J)/CPU_max), the share the job can
/// expect when the busiest of its nodes asks for `cpu_max` CPUs in all
/// (Eq. 7: local plus parallel demand).
pub fn cpu_feasible(cpu_share: f64, cpu_max: f64) -> Option<f64> {
    if cpu_max > 0.0 {
        Some(cpu_share.min(cpu_share / cpu_max))
    } else {
        None
    }
}

/// Eq. 5: the isolated remaining time stretched by CPU(J)/CPU_feas.
pub fn remain_time_cpu(exe_tot: f64, cpu_tot: f64, cpu_cur: f64, cpu_max: f64) -> Option<f64> {
    if exe_tot <= 0.0 {
        return None;
    }
    let share = cpu_tot / exe_tot;
    let feasible = cpu_feasible(share, cpu_max)?;
    if feasible <= 0.0 {
        return None;
    }
    Some(remain_time_isolated(exe_tot, cpu_tot, cpu_cur)? * share / feasible)
}

/// Eq. 8: CPU time used by t_i when usage is proportional to 1/MPL_max:
/// cpu_cur(t_{i−1}) + (t_i − t_{i−1})·cpu_tot/(MPL_max·exe_tot).
pub fn cpu_time_mpl(
    cpu_cur_before: f64,
    dt: f64,
    cpu_tot: f64,
    exe_tot: f64,
    mpl_max: u32,
) -> Option<f64> {
    if exe_tot > 0.0 {
        Some(cpu_cur_before + dt * cpu_tot / (f64::from(mpl_max.max(1)) * exe_tot))
    } else {
        None
    }
}

/// Eq. 9: CPU time used by t_i at the feasible share: cpu_cur(t_{i−1}) + (t_i − t_{i−1})·CPU_feas.
pub fn cpu_time_cpu(cpu_cur_before: f64, dt: f64, cpu_feas: f64) -> f64 {
    cpu_cur_before + dt * cpu_feas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    // A job that took 100 s and 80 s of CPU alone (CPU(J) = 0.8) has run
    // 50 s and used 20 s of CPU so far.
    const EXE_TOT: f64 = 100.0;
    const CPU_TOT: f64 = 80.0;

    #[test]
    fn remain_time_by_eq_1_2_4() {
        // Eq. 1: 50 · (80 − 20) / 20 = 150.
        assert!(close(remain_time_proportional(50.0, CPU_TOT, 20.0), 150.0));
        assert_eq!(remain_time_proportional(50.0, CPU_TOT, 0.0), None);
        // Eq. 2: 100 · (80 − 20) / 80 = 75.
        assert!(close(remain_time_isolated(EXE_TOT, CPU_TOT, 20.0), 75.0));
        // Eq. 4 with three tasks on the busiest node: 75 · 3 = 225.
        assert!(close(remain_time_mpl(EXE_TOT, CPU_TOT, 20.0, 3), 225.0));
    }

    #[test]
    fn remain_time_by_eq_5_with_eq_6() {
        // The busiest node asks for 1.6 CPUs: CPU_feas = min(0.8, 0.8/1.6) = 0.5,
        // RemainTime = 75 · 0.8 / 0.5 = 120.
        assert!(close(cpu_feasible(0.8, 1.6), 0.5));
        assert!(close(remain_time_cpu(EXE_TOT, CPU_TOT, 20.0, 1.6), 120.0));
        // An idle node (demand 0.5 < 1): the job keeps its own share, 75 s.
        assert!(close(cpu_feasible(0.8, 0.5), 0.8));
        assert!(close(remain_time_cpu(EXE_TOT, CPU_TOT, 20.0, 0.5), 75.0));
        assert_eq!(remain_time_cpu(0.0, CPU_TOT, 20.0, 1.0), None);
    }

    #[test]
    fn used_cpu_time_by_eq_8_and_9() {
        // Eq. 8: 20 + 30 · 80 / (2 · 100) = 32.
        assert!(close(cpu_time_mpl(20.0, 30.0, CPU_TOT, EXE_TOT, 2), 32.0));
        // Eq. 9: 20 + 30 · 0.5 = 35.
        assert!((cpu_time_cpu(20.0, 30.0, 0.5) - 35.0).abs() < 1e-9);
    }
}
