//! [`MethodId`]: the one name of a reliability method, checked once against
//! the registry. The command line, the control API, the node and the report
//! all carry this type instead of a string, so a method is spelled in one
//! place ([`super::method_names`]) and an unknown name is refused at the edge.

use super::logistic::Logistic;
use super::pool_prior::PoolPrior;
use super::{method_by_name, method_names, DEFAULT_METHOD};
use crate::kernel::Method;
use crate::predictor::ReliabilityPredictor;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The kernel methods that answer with their full working (runs, sojourn
/// age) and the variant only `--age` reaches.
const KERNEL_ONLY: [&str; 1] = ["paper+age"];

/// A known reliability method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MethodId(&'static str);

/// An unknown method name, with the known ones for the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown method {name:?}; known methods: {known}")]
pub struct UnknownMethod {
    pub name: String,
    pub known: String,
}

impl MethodId {
    /// Every method: the registry's names, then `paper+age`.
    pub fn all() -> Vec<MethodId> {
        method_names()
            .into_iter()
            .chain(KERNEL_ONLY)
            .map(MethodId)
            .collect()
    }

    /// The method's stable name (`km`, `stack`, `arma8-prob`…).
    pub fn as_str(self) -> &'static str {
        self.0
    }

    /// The semi-Markov estimator and age flag, for the kernel methods whose
    /// report shows the kernel's working.
    pub fn kernel(self) -> Option<(Method, bool)> {
        match self.0 {
            "paper" => Some((Method::Paper, false)),
            "km" => Some((Method::Km, false)),
            "paper+age" => Some((Method::Paper, true)),
            "km+age" => Some((Method::Km, true)),
            _ => None,
        }
    }

    /// The predictor behind the name; `seed` feeds the methods that simulate.
    pub fn predictor(self, seed: u64) -> Option<Box<dyn ReliabilityPredictor>> {
        match self.kernel() {
            Some((method, age)) => Some(Box::new(crate::predictor::SemiMarkov { method, age })),
            None => method_by_name(self.0, seed),
        }
    }

    /// The predictor as a host that answers with its pool's prior (`pool`,
    /// while it has no day of record) uses it: the `logistic` family's
    /// young host's prior shrinks towards the pool's curve, not the
    /// built-in population's ([`Logistic::towards_pool`]); every other
    /// method, and no pool, as [`predictor`](Self::predictor).
    pub fn predictor_in_pool(
        self,
        seed: u64,
        pool: Option<&PoolPrior>,
    ) -> Option<Box<dyn ReliabilityPredictor>> {
        let Some(pool) = pool else {
            return self.predictor(seed);
        };
        let logistic = match self.0 {
            "logistic" => Logistic::shared(),
            "logistic+cal" => Logistic::shared().calibrated(),
            "logistic+iso" => Logistic::shared().isotonic(),
            _ => return self.predictor(seed),
        };
        Some(Box::new(
            logistic.towards_pool(Some(Arc::new(pool.clone()))),
        ))
    }
}

impl Default for MethodId {
    /// The node's default method ([`DEFAULT_METHOD`]).
    fn default() -> Self {
        MethodId(DEFAULT_METHOD)
    }
}

impl FromStr for MethodId {
    type Err = UnknownMethod;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        MethodId::all()
            .into_iter()
            .find(|m| m.0 == name)
            .ok_or_else(|| UnknownMethod {
                name: name.to_string(),
                known: MethodId::all()
                    .iter()
                    .map(|m| m.0)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl fmt::Display for MethodId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_and_has_a_predictor() {
        for m in MethodId::all() {
            assert_eq!(m.as_str().parse::<MethodId>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
            assert!(m.predictor(1).is_some(), "{m}");
        }
        assert_eq!(MethodId::default().as_str(), DEFAULT_METHOD);
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let err = "kmm".parse::<MethodId>().unwrap_err();
        assert_eq!(err.name, "kmm");
        assert!(err.known.contains("km") && err.known.contains("paper+age"));
    }
}
