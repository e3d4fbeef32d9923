//! How a test re-runs its own test binary as one helper test: the name
//! libtest gives it. Shared by the `it` and `sandbox` binaries (each includes
//! this file by `#[path]`), so the rule lives once.

/// The name libtest gives the test `function` in the module whose
/// `module_path!()` is `module` (`it::guest` and `role_node` give
/// `guest::role_node`): what a test passes to `--exact` to re-run its binary
/// as one helper test.
pub fn test_name(module: &str, function: &str) -> String {
    let within_crate = module.split_once("::").map_or("", |(_, rest)| rest);
    if within_crate.is_empty() {
        function.to_string()
    } else {
        format!("{within_crate}::{function}")
    }
}
