//! What this host announces about its hardware, and how it is measured: the
//! logical CPUs, total memory and the score of the built-in CPU benchmark.

/// What this host announces about its hardware.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hardware {
    pub logical_cpus: u32,
    pub memory_mib: u64,
    /// Score of the built-in CPU benchmark.
    pub benchmark_score: u64,
}

/// Logical CPUs, total memory and the benchmark score (a few tens of ms).
pub fn hardware() -> Hardware {
    let memory_mib = crate::procfs::read_meminfo().map_or(0, |m| m.total_kib / 1024);
    Hardware {
        logical_cpus: std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
        memory_mib,
        benchmark_score: crate::monitor::bench::cpu_score(),
    }
}
