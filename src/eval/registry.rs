//! Methods by name for the evaluation: `--methods km,paper,…` becomes
//! predictors, so every method runs through the same trait.
//!
//! The names and constructors live in `model::baselines` (the one registry);
//! this module only builds the predictors for a run.

use crate::model::predictor::ReliabilityPredictor;

use crate::model::baselines::parse_method_list;
/// The method the reports single out: the registry's default, the one
/// `gleaner predict` and the node use.
pub use crate::model::baselines::DEFAULT_METHOD;
pub use crate::model::baselines::{method_by_name, method_names, MethodListError};

/// Every method name `all` stands for, in report order.
pub fn all_names() -> Vec<String> {
    method_names().iter().map(|s| s.to_string()).collect()
}

/// Resolves a comma-separated list (`all` expands to every method) into
/// predictors, keeping the first of any repeated name.
pub fn methods_from_list(
    list: &str,
    seed: u64,
) -> Result<Vec<Box<dyn ReliabilityPredictor>>, MethodListError> {
    parse_method_list(list)?
        .into_iter()
        .map(|name| {
            method_by_name(name, seed).ok_or_else(|| MethodListError::Unknown {
                name: name.to_string(),
                known: method_names().join(", "),
            })
        })
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
        assert!(matches!(
            methods_from_list("km,bogus", 1).err(),
            Some(MethodListError::Unknown { name, .. }) if name == "bogus"
        ));
        assert_eq!(
            methods_from_list(" , ", 1).err(),
            Some(MethodListError::Empty)
        );
    }
}
