//! A relative path that stays inside the directory it is joined to, checked
//! once, where it is made.
//!
//! A batch's inputs, outputs and checkpoint file are named by the consumer and
//! joined to a job's work directory on a host, so a stray `..` or a leading
//! `/` would reach outside it. [`RelPath`] is such a name after the check:
//! relative, only normal components (no `..`, `.`, root or empty component),
//! no NUL, not empty, at most [`COMPONENT_MAX`] bytes a component and
//! [`PATH_MAX`] in all. Serde goes through the same check, so a stored record
//! or an API body cannot carry a path the rest of the node would refuse.
//!
//! This module knows only text: it never touches a file system (the host
//! still resolves symlinks when it serves a file).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Longest relative path, bytes.
pub const PATH_MAX: usize = 1024;
/// Longest component of a relative path, bytes (a file name's usual limit).
pub const COMPONENT_MAX: usize = 255;

/// What is wrong with a text that is not a [`RelPath`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RelPathFault {
    #[error("it is empty")]
    Empty,
    #[error("it is longer than {PATH_MAX} bytes")]
    TooLong,
    #[error("it holds a NUL byte")]
    Nul,
    #[error("it is absolute (starts with '/')")]
    Absolute,
    #[error("it has a '..' component")]
    Parent,
    #[error("it has a '.' component")]
    Current,
    #[error("it has an empty component ('//' or a trailing '/')")]
    EmptyComponent,
    #[error("a component is longer than {COMPONENT_MAX} bytes")]
    ComponentTooLong,
}

/// Why a text is not a [`RelPath`]; names the text (bounded) and the fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a relative path inside its directory: {fault}")]
pub struct InvalidRelPath {
    text: String,
    fault: RelPathFault,
}

impl InvalidRelPath {
    /// What is wrong with the path.
    pub fn fault(&self) -> RelPathFault {
        self.fault
    }
}

/// The rule, on the text: not through `std::path::Path::components`, which
/// quietly drops `.` and doubled slashes.
fn check(text: &str) -> Result<(), RelPathFault> {
    if text.is_empty() {
        return Err(RelPathFault::Empty);
    }
    if text.len() > PATH_MAX {
        return Err(RelPathFault::TooLong);
    }
    if text.contains('\0') {
        return Err(RelPathFault::Nul);
    }
    if text.starts_with('/') {
        return Err(RelPathFault::Absolute);
    }
    for part in text.split('/') {
        match part {
            "" => return Err(RelPathFault::EmptyComponent),
            "." => return Err(RelPathFault::Current),
            ".." => return Err(RelPathFault::Parent),
            p if p.len() > COMPONENT_MAX => return Err(RelPathFault::ComponentTooLong),
            _ => {}
        }
    }
    Ok(())
}

/// A checked relative path (see the module doc for the rule).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RelPath(String);

impl RelPath {
    /// Checks `text` and wraps it.
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidRelPath> {
        let text = text.into();
        match check(&text) {
            Ok(()) => Ok(Self(text)),
            Err(fault) => Err(InvalidRelPath {
                // Bounded so an error about a hostile megabyte stays short;
                // by chars, so the cut never splits one.
                text: text.chars().take(120).collect(),
                fault,
            }),
        }
    }

    /// True when `text` would make a [`RelPath`]; for a check that keeps no
    /// value (the caller holds the text in a wire type).
    pub fn is_valid(text: &str) -> bool {
        check(text).is_ok()
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for RelPath {
    type Err = InvalidRelPath;
    fn from_str(s: &str) -> Result<Self, InvalidRelPath> {
        Self::new(s)
    }
}

impl TryFrom<String> for RelPath {
    type Error = InvalidRelPath;
    fn try_from(s: String) -> Result<Self, InvalidRelPath> {
        Self::new(s)
    }
}

impl From<RelPath> for String {
    fn from(path: RelPath) -> String {
        path.0
    }
}

impl AsRef<str> for RelPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for RelPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for RelPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for RelPath {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error as DeError, StringDeserializer};
    use serde::de::IntoDeserializer;

    #[test]
    fn paths_inside_the_directory_are_accepted() {
        for good in [
            "out.txt", "a/b/c", "..a", "a..", ".hidden", "a/.b", "sp ace", "é/ü",
        ] {
            assert_eq!(RelPath::new(good).map(String::from), Ok(good.to_string()));
        }
        assert!(RelPath::new("x".repeat(COMPONENT_MAX)).is_ok());
        let long = vec!["y".repeat(COMPONENT_MAX); 4].join("/");
        assert_eq!(long.len(), 4 * COMPONENT_MAX + 3);
        assert!(long.len() <= PATH_MAX && RelPath::new(long).is_ok());
    }

    #[test]
    fn each_fault_is_named() {
        use RelPathFault::*;
        let long_component = "x".repeat(COMPONENT_MAX + 1);
        let long_path = vec!["y"; PATH_MAX / 2 + 1].join("/");
        for (bad, fault) in [
            ("", Empty),
            ("/etc/passwd", Absolute),
            ("/", Absolute),
            ("..", Parent),
            ("../x", Parent),
            ("a/../../b", Parent),
            ("a/..", Parent),
            (".", Current),
            ("a/./b", Current),
            ("a//b", EmptyComponent),
            ("a/", EmptyComponent),
            ("a\0b", Nul),
            (long_component.as_str(), ComponentTooLong),
            (long_path.as_str(), TooLong),
        ] {
            let e = RelPath::new(bad).unwrap_err();
            assert_eq!(e.fault(), fault, "{bad:?}");
            assert!(!RelPath::is_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn errors_name_the_input_and_stay_short() {
        let e = RelPath::new("../secret").unwrap_err().to_string();
        assert!(e.contains("\"../secret\"") && e.contains("'..'"), "{e}");
        let e = RelPath::new(format!("/{}", "a".repeat(10_000)))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("\"/aaa"), "{e}");
        assert!(e.len() < 250, "{e}");
    }

    #[test]
    fn serde_goes_through_the_check() {
        let de = |s: &str| -> Result<RelPath, DeError> {
            let d: StringDeserializer<DeError> = s.to_string().into_deserializer();
            RelPath::deserialize(d)
        };
        assert_eq!(
            de("in/data.txt").map(String::from),
            Ok("in/data.txt".into())
        );
        assert!(de("../x").is_err());
        assert!(de("").is_err());
    }

    /// The rule as it stood in `guest::safe_relative_path` before the
    /// newtype, to show the newtype accepts and refuses the same texts.
    fn old_rule(path: &str) -> bool {
        !path.is_empty()
            && path.len() <= 1024
            && !path.contains('\0')
            && path
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".." && part.len() <= 255)
    }

    proptest::proptest! {
        #[test]
        fn same_verdict_as_the_old_rule(text in "[a./\\x00é]{0,12}") {
            proptest::prop_assert_eq!(RelPath::is_valid(&text), old_rule(&text));
        }

        #[test]
        fn accepted_paths_never_leave_the_directory(text in "[a./]{0,12}") {
            if let Ok(p) = RelPath::new(text.clone()) {
                let mut depth = 0i32;
                for part in p.as_str().split('/') {
                    depth += if part == ".." { -1 } else { 1 };
                    proptest::prop_assert!(depth > 0);
                }
                proptest::prop_assert!(!p.as_str().starts_with('/'));
            }
        }
    }
}
