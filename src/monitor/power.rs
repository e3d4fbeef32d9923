//! Whether the machine runs on battery, read from the Linux power supply
//! class (`/sys/class/power_supply/<name>/{type,online,status}`).
//!
//! The directory is a parameter so tests can lay out a fake one. This module
//! owns reading those files only; what to do on battery is `[owner]
//! on_battery`, decided by the host loop.

use std::path::Path;

/// Largest power-supply entries looked at (a laptop has two or three).
const MAX_SUPPLIES: usize = 64;
/// Largest attribute file read, bytes.
const MAX_ATTR_BYTES: u64 = 64;

/// True when the machine runs on battery: a mains (or USB-C) supply exists
/// and none is online, or there is no mains supply and a battery is
/// discharging. No supply directory, or none readable, means mains: a
/// desktop or a server.
pub fn on_battery(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut mains_seen = false;
    let mut mains_online = false;
    let mut discharging = false;
    for entry in entries.flatten().take(MAX_SUPPLIES) {
        let path = entry.path();
        let kind = read_attr(&path.join("type"));
        match kind.as_deref() {
            Some("Mains" | "USB" | "USB_C" | "USB_PD") => {
                // A USB port with nothing plugged in is offline too; count it
                // only when it says it is online.
                if kind.as_deref() == Some("Mains") {
                    mains_seen = true;
                }
                if read_attr(&path.join("online")).as_deref() == Some("1") {
                    mains_seen = true;
                    mains_online = true;
                }
            }
            Some("Battery") => {
                discharging |= read_attr(&path.join("status")).as_deref() == Some("Discharging");
            }
            _ => {}
        }
    }
    if mains_seen {
        !mains_online
    } else {
        discharging
    }
}

fn read_attr(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_ATTR_BYTES).read_to_string(&mut text).ok()?;
    Some(text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn supply(dir: &Path, name: &str, attrs: &[(&str, &str)]) {
        let d = dir.join(name);
        fs::create_dir_all(&d).unwrap();
        for (k, v) in attrs {
            fs::write(d.join(k), format!("{v}\n")).unwrap();
        }
    }

    #[test]
    fn mains_offline_is_battery_and_online_is_not() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!on_battery(dir.path()), "no supply at all is a desktop");
        assert!(!on_battery(&dir.path().join("absent")));
        supply(dir.path(), "AC", &[("type", "Mains"), ("online", "0")]);
        supply(
            dir.path(),
            "BAT0",
            &[("type", "Battery"), ("status", "Discharging")],
        );
        assert!(on_battery(dir.path()));
        fs::write(dir.path().join("AC/online"), "1\n").unwrap();
        assert!(!on_battery(dir.path()));
    }

    #[test]
    fn without_a_mains_entry_the_battery_status_decides() {
        let dir = tempfile::tempdir().unwrap();
        supply(
            dir.path(),
            "BAT0",
            &[("type", "Battery"), ("status", "Charging")],
        );
        supply(
            dir.path(),
            "ucsi-source-psy-1",
            &[("type", "USB"), ("online", "0")],
        );
        assert!(!on_battery(dir.path()));
        fs::write(dir.path().join("BAT0/status"), "Discharging\n").unwrap();
        assert!(on_battery(dir.path()));
    }
}
