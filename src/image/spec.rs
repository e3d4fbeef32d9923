//! The JSON documents of an image archive, as serde structs holding only the
//! fields a guest needs (unknown fields are ignored, as the OCI spec asks of
//! readers), and [`ImageConfig`], what a guest honours of an image's config.
//!
//! Plain serde structs rather than the `oci-spec` crate: we read five config
//! fields and two descriptor shapes, and `oci-spec` would bring
//! `derive_builder`, `getset`, `strum` and `regex` into the build of a
//! 2-core machine for them (ARCHITECTURE.md). Pure: no I/O; the documents
//! arrive already bounded in size.

use serde::{Deserialize, Serialize};

/// One image in docker's `manifest.json` (a list of them).
#[derive(Debug, Deserialize)]
pub struct DockerManifest {
    /// The config's path in the archive: `<hex>.json` or `blobs/sha256/<hex>`.
    #[serde(rename = "Config")]
    pub config: String,
    /// Layer tars in order, bottom first.
    #[serde(rename = "Layers", default)]
    pub layers: Vec<String>,
}

/// A content descriptor (OCI image spec, descriptor.md).
#[derive(Debug, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default)]
    pub platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
}

/// `index.json`, or an image index blob it points to.
#[derive(Debug, Deserialize)]
pub struct OciIndex {
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

/// An image manifest blob.
#[derive(Debug, Deserialize)]
pub struct OciManifest {
    pub config: Descriptor,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

/// The image config blob (docker's and OCI's share these fields).
#[derive(Debug, Deserialize)]
pub struct ConfigBlob {
    #[serde(default)]
    pub config: Option<RunConfig>,
    #[serde(default)]
    pub rootfs: Option<RootFs>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunConfig {
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    pub working_dir: Option<String>,
    #[serde(rename = "User", default)]
    pub user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    pub cmd: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

/// What a guest honours of an image's config. Kept next to the unpacked
/// root (as `image.json`) so a cached image needs no archive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `Env`: variables the guest starts with, in order (later entries win).
    pub env: Vec<(String, String)>,
    /// `WorkingDir`: where the guest starts, an absolute path in the image.
    pub working_dir: Option<String>,
    /// `User`: recorded, and mapped to the guest's unprivileged id (a guest
    /// never runs as the image's user on the host).
    pub user: Option<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`: replaced by the `--` arguments when there are any.
    pub cmd: Vec<String>,
}

impl ImageConfig {
    /// The command line a guest runs: the entrypoint followed by `args`
    /// when given (as `docker run IMAGE args...`), else by `Cmd`.
    pub fn argv(&self, args: &[String]) -> Vec<String> {
        let tail = if args.is_empty() { &self.cmd } else { args };
        self.entrypoint.iter().chain(tail).cloned().collect()
    }
}

/// Most `Env` entries, and bytes in one config string, we accept.
const MAX_ENV: usize = 4096;
const MAX_TEXT: usize = 64 * 1024;

impl RunConfig {
    /// Checks and converts; the error says which field is wrong.
    pub fn to_config(&self) -> Result<ImageConfig, String> {
        let env = self.env.as_deref().unwrap_or_default();
        if env.len() > MAX_ENV {
            return Err(format!(
                "config Env has {} entries (at most {MAX_ENV})",
                env.len()
            ));
        }
        let mut pairs = Vec::with_capacity(env.len());
        for entry in env {
            text(entry, "Env")?;
            let Some((k, v)) = entry.split_once('=') else {
                return Err(format!("config Env entry {entry:?} has no '='"));
            };
            if k.is_empty() {
                return Err(format!("config Env entry {entry:?} has an empty name"));
            }
            pairs.push((k.to_string(), v.to_string()));
        }
        let working_dir = match self.working_dir.as_deref() {
            None | Some("") => None,
            Some(w) if w.starts_with('/') => Some(text(w, "WorkingDir")?.to_string()),
            Some(w) => return Err(format!("config WorkingDir {w:?} is not absolute")),
        };
        let user = match self.user.as_deref() {
            None | Some("") => None,
            Some(u) => Some(text(u, "User")?.to_string()),
        };
        let list = |v: &Option<Vec<String>>, field: &str| -> Result<Vec<String>, String> {
            let v = v.as_deref().unwrap_or_default();
            if v.len() > MAX_ENV {
                return Err(format!("config {field} has {} entries", v.len()));
            }
            v.iter()
                .map(|s| text(s, field).map(str::to_string))
                .collect()
        };
        Ok(ImageConfig {
            env: pairs,
            working_dir,
            user,
            entrypoint: list(&self.entrypoint, "Entrypoint")?,
            cmd: list(&self.cmd, "Cmd")?,
        })
    }
}

/// A config string the guest's command line or environment can carry.
fn text<'a>(s: &'a str, field: &str) -> Result<&'a str, String> {
    if s.len() > MAX_TEXT {
        return Err(format!("config {field} has a string of {} bytes", s.len()));
    }
    if s.contains('\0') {
        return Err(format!("config {field} has a string with a NUL byte"));
    }
    Ok(s)
}

/// The hex of a `sha256:<64 hex>` digest; any other algorithm or shape is
/// refused with the digest named.
pub fn sha256_hex(digest: &str) -> Result<&str, String> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Err(format!(
            "digest {digest:?} is not sha256 (the only algorithm read)"
        ));
    };
    if super::ImageId::from_hex(hex).is_none() {
        return Err(format!("digest {digest:?} is not 64 lowercase hex digits"));
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_replace_cmd_and_follow_the_entrypoint() {
        let c = ImageConfig {
            entrypoint: vec!["/bin/tool".into()],
            cmd: vec!["--help".into()],
            ..ImageConfig::default()
        };
        assert_eq!(c.argv(&[]), vec!["/bin/tool", "--help"]);
        assert_eq!(c.argv(&["run".into()]), vec!["/bin/tool", "run"]);
    }

    #[test]
    fn a_config_with_a_bad_env_or_workdir_is_refused_by_field() {
        let bad_env = RunConfig {
            env: Some(vec!["NOEQUALS".into()]),
            ..RunConfig::default()
        };
        assert!(bad_env.to_config().unwrap_err().contains("Env"));
        let bad_dir = RunConfig {
            working_dir: Some("rel/dir".into()),
            ..RunConfig::default()
        };
        assert!(bad_dir.to_config().unwrap_err().contains("WorkingDir"));
        let good = RunConfig {
            env: Some(vec!["A=1=2".into()]),
            working_dir: Some("/srv".into()),
            ..RunConfig::default()
        };
        let c = good.to_config().unwrap();
        assert_eq!(c.env, vec![("A".to_string(), "1=2".to_string())]);
        assert_eq!(c.working_dir.as_deref(), Some("/srv"));
    }

    #[test]
    fn only_sha256_digests_of_the_right_shape_are_read() {
        let hex = "a".repeat(64);
        assert_eq!(sha256_hex(&format!("sha256:{hex}")).unwrap(), hex);
        assert!(sha256_hex(&format!("sha512:{hex}")).is_err());
        assert!(sha256_hex("sha256:../../etc").is_err());
        assert!(sha256_hex(&format!("sha256:{}", "A".repeat(64))).is_err());
    }
}
