//! Unit tests of the configuration: each key's default, parsing, refusals
//! by name, and the defaults file.

use super::*;
use crate::model::owner::OnBattery;

#[test]
fn images_are_allowed_by_default_denied_by_choice_and_nothing_else() {
    let path = Path::new("config.toml");
    assert_eq!(Config::default().guest.images, ImagesRule::Allow);
    let deny = Config::parse("[guest]\nimages = \"deny\"\n", path).unwrap();
    assert_eq!(deny.guest.images, ImagesRule::Deny);
    assert!(Config::parse("[guest]\nimages = \"maybe\"\n", path).is_err());
}

#[test]
fn the_image_cache_cap_is_bounded_and_a_bad_one_names_its_key() {
    let path = Path::new("config.toml");
    let default = Config::default().guest.image_cache_mib;
    assert_eq!(default, crate::image::DEFAULT_CACHE_MIB);
    // At least the largest image the reader takes, so a default node
    // can run every image it would accept.
    assert!(default << 20 >= crate::image::ImageLimits::default().max_image_bytes);
    let small = Config::parse("[guest]\nimage_cache_mib = 512\n", path).unwrap();
    assert_eq!(small.guest.image_cache_mib, 512);
    for bad in ["0", "1099511627776"] {
        let e = Config::parse(&format!("[guest]\nimage_cache_mib = {bad}\n"), path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[guest] image_cache_mib"), "{e}");
    }
    let e = Config::parse("[guest]\nimage_cache_mib = \"big\"\n", path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("image_cache_mib"), "{e}");
}

#[test]
fn setuid_files_in_images_are_refused_by_default_stripped_by_choice() {
    let path = Path::new("config.toml");
    assert_eq!(Config::default().guest.image_setuid, ImageSetuid::Refuse);
    let strip = Config::parse("[guest]\nimage_setuid = \"strip\"\n", path).unwrap();
    assert_eq!(strip.guest.image_setuid, ImageSetuid::Strip);
    let e = Config::parse("[guest]\nimage_setuid = \"keep\"\n", path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("image_setuid"), "{e}");
}

#[test]
fn later_windows_are_on_by_default_and_turned_off_by_the_batch_section() {
    let path = Path::new("config.toml");
    assert_eq!(
        Config::default().batch.later_windows,
        crate::consumer::batch::queue::LATER_WINDOWS_DEFAULT
    );
    assert!(Config::default().batch.later_windows);
    let off = Config::parse("[batch]\nlater_windows = false\n", path).unwrap();
    assert!(!off.batch.later_windows);
    assert_eq!(off.batch.tail_copies, Config::default().batch.tail_copies);
}

#[test]
fn the_later_unit_is_an_hour_by_default_and_bounded_to_a_minute_to_an_hour() {
    let path = Path::new("config.toml");
    assert_eq!(Config::default().batch.later_unit_secs, 3600);
    let minute = Config::parse("[batch]\nlater_unit_secs = 60\n", path).unwrap();
    assert_eq!(minute.batch.later_unit_secs, 60);
    assert_eq!(
        minute.batch.later_windows,
        Config::default().batch.later_windows,
        "the unit turns nothing on or off"
    );
    for bad in ["0", "59", "3601", "9223372036854775807"] {
        let e = Config::parse(&format!("[batch]\nlater_unit_secs = {bad}\n"), path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[batch] later_unit_secs"), "{e}");
    }
    let e = Config::parse("[batch]\nlater_unit_secs = -1\n", path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("later_unit_secs"), "{e}");
}

#[test]
fn tail_copies_are_on_by_default_and_turned_off_by_the_batch_section() {
    let path = Path::new("config.toml");
    assert_eq!(
        Config::default().batch.tail_copies,
        crate::consumer::batch::queue::TAIL_COPIES_DEFAULT
    );
    assert!(Config::default().batch.tail_copies);
    assert!(Config::parse("", path).unwrap().batch.tail_copies);
    let off = Config::parse("[batch]\ntail_copies = false\n", path).unwrap();
    assert!(!off.batch.tail_copies);
    let on = Config::parse("[batch]\ntail_copies = true\n", path).unwrap();
    assert!(on.batch.tail_copies);
    let e = Config::parse("[batch]\ntail_copies = 2\n", path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("tail_copies"), "{e}");
    let e = Config::parse("[batch]\ncopies = true\n", path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("copies"), "{e}");
}

#[test]
fn defaults_document_parses_back_to_the_defaults() {
    let text = defaults_toml(false);
    assert_eq!(
        Config::parse(&text, Path::new("d")).unwrap(),
        Config::default()
    );
    let commented = defaults_toml(true);
    assert_eq!(
        Config::parse(&commented, Path::new("d")).unwrap(),
        Config::default()
    );
}

#[test]
fn every_key_has_exactly_one_meaning_and_every_meaning_a_key() {
    let table = toml::Table::try_from(Config::default()).unwrap();
    let mut keys = Vec::new();
    for (section, t) in &table {
        for key in t.as_table().unwrap().keys() {
            keys.push((section.clone(), key.clone()));
        }
    }
    for (s, k) in &keys {
        let n = KEY_DOCS
            .iter()
            .filter(|(ds, dk, _)| ds == s && dk == k)
            .count();
        assert_eq!(n, 1, "[{s}] {k} has {n} meanings");
    }
    assert_eq!(keys.len(), KEY_DOCS.len());
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let e = Config::parse("[policy]\nth3 = 5\n", Path::new("c.toml")).unwrap_err();
    assert!(e.to_string().contains("th3"), "{e}");
    let e = Config::parse("[polcy]\nth1 = 5\n", Path::new("c.toml")).unwrap_err();
    assert!(e.to_string().contains("polcy"), "{e}");
}

#[test]
fn a_partial_file_keeps_the_other_defaults_and_bad_values_are_refused() {
    let c = Config::parse("[policy]\nsustain_secs = 3\n", Path::new("c")).unwrap();
    assert_eq!(c.policy.sustain_secs, 3);
    assert_eq!(c.policy.th2, Config::default().policy.th2);
    assert!(Config::parse("[policy]\nth1 = 70\nth2 = 60\n", Path::new("c")).is_err());
    assert!(Config::parse("[monitor]\nmin_period_secs = 0\n", Path::new("c")).is_err());
    assert!(Config::parse("[guest]\nuser = \"root\"\n", Path::new("c")).is_err());
}

#[test]
fn owner_keys_parse_and_a_bad_schedule_names_its_position() {
    let c = Config::parse(
        "[owner]\nhours = \"Mon-Fri 18:00-08:30; Sat,Sun\"\non_battery = \"pause\"\n[guest]\ncpu_limit_percent = 30\n",
        Path::new("c"),
    )
    .unwrap();
    assert_eq!(c.owner.on_battery, OnBattery::Pause);
    assert_eq!(c.guest.cpu_limit_percent, 30);
    assert!(!c.schedule().is_always());
    let e = Config::parse("[owner]\nhours = \"Mon-Fri 18:00-8:3\"\n", Path::new("c"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("[owner] hours") && e.contains("at character 15"),
        "{e}"
    );
    assert!(Config::parse("[owner]\non_battery = \"sleep\"\n", Path::new("c")).is_err());
    assert!(Config::parse("[guest]\ncpu_limit_percent = 0\n", Path::new("c")).is_err());
    assert!(Config::parse("[guest]\ncpu_limit_percent = 101\n", Path::new("c")).is_err());
}

#[test]
fn the_dashboard_listens_on_loopback_only_and_empty_turns_it_off() {
    let c = Config::parse("[ui]\nlisten = \"\"\n", Path::new("c")).unwrap();
    assert_eq!(c.ui.listen_addr().unwrap(), None);
    let c = Config::parse("[ui]\nlisten = \"[::1]:0\"\n", Path::new("c")).unwrap();
    assert!(c.ui.listen_addr().unwrap().unwrap().ip().is_loopback());
    for bad in ["0.0.0.0:8385", "192.0.2.1:80", "localhost:80", "127.0.0.1"] {
        let e = Config::parse(&format!("[ui]\nlisten = {bad:?}\n"), Path::new("c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[ui] listen"), "{bad}: {e}");
    }
}
