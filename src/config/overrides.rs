//! Command-line values (`--listen`, `--backend`, `--image-backend`, `--backend-version`) that
//! override the file's.

use super::backend::parse_backend_version;
use super::{Config, ConfigError, Endpoint};
use std::path::PathBuf;

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<PathBuf>,
    pub backend: Option<String>,
    pub image_backend: Option<String>,
    pub backend_version: Option<String>,
}

impl Config {
    /// Applies command-line overrides, then validates again.
    pub fn apply(mut self, overrides: Overrides) -> Result<Config, ConfigError> {
        if let Some(listen) = overrides.listen {
            self.listen_path = listen;
        }
        if let Some(backend) = overrides.backend {
            self.backend = Endpoint::parse("--backend", &backend)?;
        }
        if let Some(image) = overrides.image_backend {
            self.image_backend = Some(Endpoint::parse("--image-backend", &image)?);
        }
        if let Some(version) = overrides.backend_version {
            self.backend_version = parse_backend_version("--backend-version", &version)?;
        }
        self.validate()?;
        Ok(self)
    }
}
