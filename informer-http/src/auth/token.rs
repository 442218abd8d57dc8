//! Sources without state: a static token, a token file, basic authentication.

use base64::Engine as _;

use crate::config::{Auth, Config, Secret};
use crate::error::CredentialError;

/// `Bearer <token>`.
pub(super) fn bearer(token: &Secret<String>) -> Secret<String> {
    Secret::new(format!("Bearer {}", token.expose()))
}

/// The `Authorization` header value of a source without state: a token, a token file (read
/// again for every request: service-account tokens are rotated on disk), basic auth, or none.
pub(super) fn authorization(config: &Config) -> Result<Option<Secret<String>>, CredentialError> {
    Ok(match &config.auth {
        Auth::Token(t) => Some(bearer(t)),
        Auth::TokenFile(path) => {
            let token =
                std::fs::read_to_string(path).map_err(|source| CredentialError::TokenFile {
                    path: path.clone(),
                    source,
                })?;
            Some(Secret::new(format!("Bearer {}", token.trim())))
        }
        Auth::Basic { username, password } => {
            let raw = format!("{username}:{}", password.expose());
            Some(Secret::new(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            )))
        }
        _ => None,
    })
}
