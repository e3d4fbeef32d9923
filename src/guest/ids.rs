//! Which user a guest runs as: the uid and gid the child switches to, and
//! how they are resolved from the config and the spec (only a root node
//! switches, and never to root).
//!
//! It owns the name-to-ids lookup and nothing else: it must not know how a
//! process is forked ([`super::launch`]) or what the guest may see
//! ([`super::view`]); both take the resolved [`Ids`] from here.

use super::{GuestConfig, GuestSpec, StartError};
use std::time::Duration;

/// The user and group the child switches to (only when the node is root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// The ids a guest of the config's own user gets (for the probes).
pub fn default_ids(config: &GuestConfig) -> Option<Ids> {
    let spec = GuestSpec {
        argv: vec!["true".into()],
        env: Vec::new(),
        mem_mib: 0,
        cpu_time_limit: Duration::ZERO,
        wall_limit: Duration::ZERO,
        max_output_bytes: 0,
        allow_network: false,
        user: None,
        inputs: Vec::new(),
        checkpoint: None,
        image: None,
    };
    guest_ids(config, &spec).ok().flatten()
}

/// The ids to switch to: only a root node switches, and never to root.
pub fn guest_ids(config: &GuestConfig, spec: &GuestSpec) -> Result<Option<Ids>, StartError> {
    let name = spec.user.as_deref().unwrap_or(&config.user);
    if !nix::unistd::geteuid().is_root() {
        let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.name);
        return match &spec.user {
            Some(wanted) if me.as_deref() != Some(wanted.as_str()) => {
                Err(StartError::CannotSwitchUser(wanted.clone()))
            }
            _ => Ok(None),
        };
    }
    let user = nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| StartError::UnknownUser(name.to_string()))?;
    if user.uid.is_root() {
        return Err(StartError::RootGuest(name.to_string()));
    }
    Ok(Some(Ids {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    }))
}
