//! What a config that does not load says: the file unread or unparsed, its shape refused, or a
//! key's value invalid (named).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("config: {message}")]
    Syntax { message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

pub(super) fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, message: message.into() }
}
