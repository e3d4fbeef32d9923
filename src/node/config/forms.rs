//! How typed values are spelled in the file, for serde's `with`: durations
//! as whole seconds, optional values as an empty string, lists of
//! multiaddrs or peer ids as strings.

/// Durations in the file are whole seconds (keys ending in `_secs`).
pub(super) mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// Optional values that the file spells as an empty string (`host = ""`):
/// empty means `None`, so files written by earlier versions still parse.
pub(super) mod empty_is_none {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::path::PathBuf;

    /// What may be absent: a text or a path.
    pub trait Text: Sized {
        fn as_text(&self) -> String;
        fn from_text(text: String) -> Self;
    }
    impl Text for String {
        fn as_text(&self) -> String {
            self.clone()
        }
        fn from_text(text: String) -> Self {
            text
        }
    }
    impl Text for PathBuf {
        fn as_text(&self) -> String {
            self.display().to_string()
        }
        fn from_text(text: String) -> Self {
            PathBuf::from(text)
        }
    }

    pub fn serialize<T: Text, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.as_ref().map(Text::as_text).unwrap_or_default())
    }

    pub fn deserialize<'de, T: Text, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        let text = String::deserialize(d)?;
        Ok((!text.trim().is_empty()).then(|| T::from_text(text)))
    }
}

/// Lists of typed values (multiaddrs, peer ids) written as strings.
pub(super) mod display_list {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Display, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        Vec::<String>::deserialize(d)?
            .into_iter()
            .map(|text| {
                text.parse::<T>()
                    .map_err(|e| D::Error::custom(format!("{text:?}: {e}")))
            })
            .collect()
    }
}
