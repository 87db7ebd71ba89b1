//! What a config file may be before the YAML parser reads it: its size and its nesting, both
//! bounded so that a hostile or broken file cannot make parsing slow.

use super::error::ConfigError;

/// The largest config file read (a real one is a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// The most `[` and `{` a config may hold. The YAML parser's time grows with the square of the
/// flow collections' nesting (20,000 nested `[` take 1.5 s, 100,000 over 30 s); counting every
/// opener, quoted or not, bounds the nesting without parsing. A real config has a handful.
pub const MAX_FLOW_OPENERS: usize = 1024;

/// Refuses, before the YAML parser sees it, text whose size or nesting would make it slow.
pub(super) fn check_yaml_bounds(text: &str) -> Result<(), ConfigError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::Syntax {
            message: format!("larger than {MAX_CONFIG_BYTES} bytes: not a cri-bridge config"),
        });
    }
    let openers = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    if openers > MAX_FLOW_OPENERS {
        return Err(ConfigError::Syntax {
            message: format!("{openers} '[' and '{{' (at most {MAX_FLOW_OPENERS}): not a cri-bridge config"),
        });
    }
    Ok(())
}
