//! `config`: `Config::parse` on arbitrary text.
//!
//! Invariants: it returns (no panic, no hang) and an error has a message; an accepted config
//! passes its own validation again (`apply` with no overrides re-validates) and holds what the
//! README's configuration reference promises of every value.

use cri_bridge::config::{Config, Overrides};

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let config = match Config::parse(text) {
        Ok(config) => config,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error without a message");
            return;
        }
    };
    if let Err(e) = config.clone().apply(Overrides::default()) {
        panic!("an accepted config fails its own validation: {e}\n{config:#?}");
    }
    assert!(config.listen_mode <= 0o777, "listen.mode {:o} is more than permission bits", config.listen_mode);
    assert!(!config.versions.is_empty(), "no version served");
    assert!(config.max_message_size >= 4096, "max_message_size {} below 4096", config.max_message_size);
    assert!(!config.listen_path.as_os_str().is_empty(), "an empty listen.path");
    for key in config.loss_policy.keys() {
        assert!(
            cri_bridge::convert::policy::check_key(key).is_ok(),
            "loss_policy key {key:?} accepted but not a request field"
        );
    }
    for minor in [config.backend_revision, config.image_revision].into_iter().flatten() {
        assert!(minor >= 9, "revision 1.{minor} accepted");
    }
}
