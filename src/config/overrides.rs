//! Command-line values (`--listen`, `--backend`, `--image-backend`, `--backend-version`, `--splice`) that
//! override the file's (applied by `Config::apply`).

use std::path::PathBuf;

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<PathBuf>,
    pub backend: Option<String>,
    pub image_backend: Option<String>,
    pub backend_version: Option<String>,
    pub splice: Option<bool>,
}
