//! Methods by name: the one place that turns `--methods km,paper,…` into
//! predictors, so the evaluation runs every method through the same trait.
//!
//! It knows the names of the methods and nothing about how they are scored.

use crate::model::kernel::Method;
use crate::model::predictor::{ReliabilityPredictor, SemiMarkov};

/// The method the reports single out: the censoring-aware semi-Markov predictor.
pub const DEFAULT_METHOD: &str = "km";

/// The semi-Markov methods, in report order.
pub const SEMI_MARKOV_NAMES: [&str; 3] = ["paper", "km", "km+age"];

/// Every method name `all` stands for, in report order.
pub fn all_names() -> Vec<String> {
    let mut names: Vec<String> = SEMI_MARKOV_NAMES.iter().map(|s| s.to_string()).collect();
    // MERGE: the lead appends the baselines here, e.g.
    // names.extend(crate::model::baselines::NAMES.iter().map(|s| s.to_string()));
    names.dedup();
    names
}

/// The predictor called `name`, seeded with `seed` where it draws randomly.
pub fn method_by_name(name: &str, seed: u64) -> Option<Box<dyn ReliabilityPredictor>> {
    let semi_markov = |method, age| -> Option<Box<dyn ReliabilityPredictor>> {
        Some(Box::new(SemiMarkov { method, age }))
    };
    match name {
        "paper" => semi_markov(Method::Paper, false),
        "km" => semi_markov(Method::Km, false),
        "km+age" => semi_markov(Method::Km, true),
        "paper+age" => semi_markov(Method::Paper, true),
        // MERGE: the lead adds the baselines' registry on this line:
        _ => baseline_by_name(name, seed),
    }
}

/// Stand-in for `crate::model::baselines::method_by_name` until the merge.
fn baseline_by_name(_name: &str, _seed: u64) -> Option<Box<dyn ReliabilityPredictor>> {
    None
}

/// Why a method list cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MethodListError {
    #[error("unknown method `{0}`; known: {known}", known = all_names().join(", "))]
    Unknown(String),
    #[error("no methods given")]
    Empty,
}

/// Resolves a comma-separated list (`all` expands to every method) into
/// predictors, keeping the first of any repeated name.
pub fn methods_from_list(
    list: &str,
    seed: u64,
) -> Result<Vec<Box<dyn ReliabilityPredictor>>, MethodListError> {
    let mut names: Vec<String> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let expanded = if part == "all" {
            all_names()
        } else {
            vec![part.to_string()]
        };
        for name in expanded {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if names.is_empty() {
        return Err(MethodListError::Empty);
    }
    names
        .iter()
        .map(|n| method_by_name(n, seed).ok_or_else(|| MethodListError::Unknown(n.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in all_names() {
            let m = method_by_name(&name, 1).unwrap();
            assert_eq!(m.name(), name);
        }
        assert!(method_by_name("nonsense", 1).is_none());
    }

    #[test]
    fn lists_expand_all_and_refuse_unknowns() {
        let m = methods_from_list("km, all,paper", 1).unwrap();
        let names: Vec<String> = m.iter().map(|m| m.name()).collect();
        assert_eq!(names[0], "km");
        assert_eq!(names.len(), all_names().len());
        assert_eq!(
            methods_from_list("km,bogus", 1).err(),
            Some(MethodListError::Unknown("bogus".into()))
        );
        assert_eq!(
            methods_from_list(" , ", 1).err(),
            Some(MethodListError::Empty)
        );
    }
}
