//! The guest and containment tests, in a test binary of their own. They
//! fork guests from the test process itself (an in-process `Supervisor`);
//! inside the shared `it` binary, forked among the threads of every other
//! module's tests, their guests ended by SIGABRT in 2 of 2 full runs (never
//! alone, never in their old binaries), which is not understood yet. Here
//! they run as they did before the test crates were merged (issue 26).

mod containment;
mod guest;

/// The name libtest gives the test `function` in the module whose
/// `module_path!()` is `module` (`sandbox::guest` and `role_node` give
/// `guest::role_node`): what a test passes to `--exact` to re-run this binary
/// as one helper test.
pub fn test_name(module: &str, function: &str) -> String {
    let within_crate = module.split_once("::").map_or("", |(_, rest)| rest);
    if within_crate.is_empty() {
        function.to_string()
    } else {
        format!("{within_crate}::{function}")
    }
}
