//! Command-line values (`--listen`, `--backend`, `--image-backend`, `--backend-version`) that
//! override the file's (applied by `Config::apply`); `--splice`, which is gone, is only noted.

use std::path::PathBuf;

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<PathBuf>,
    pub backend: Option<String>,
    pub image_backend: Option<String>,
    pub backend_version: Option<String>,
    /// `--splice` was given: the splice is gone, and the flag does nothing but warn.
    pub splice: bool,
}
