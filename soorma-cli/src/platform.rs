//! The shared platform the inspecting commands (`agents`, `card`, `events tail`) work on.

use soorma::{NATS_URL_ENV, Platform};

use crate::CliError;

/// A connected shared platform and the URL it was reached at.
#[derive(Debug)]
pub struct Connected {
    /// The platform.
    pub platform: Platform,
    /// `SOORMA_NATS_URL`, with any credentials shown as `***`
    /// ([`redacted_url`](soorma::nats::redacted_url)): it is printed.
    pub url: String,
}

/// Connects to the platform `SOORMA_NATS_URL` names ([`Platform::from_env`]).
///
/// Without `SOORMA_NATS_URL` this is an error ([`CliError::NoSharedPlatform`]) rather than the
/// embedded platform: an embedded registry and bus exist only inside one process, so a CLI
/// process would see nothing of the agents running elsewhere. A server that cannot be reached
/// is [`CliError::Unreachable`], naming the URL and suggesting `soorma dev`.
pub async fn connect(command: &'static str) -> Result<Connected, CliError> {
    let url = std::env::var(NATS_URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .map(|u| soorma::nats::redacted_url(&u))
        .ok_or(CliError::NoSharedPlatform { command })?;
    let platform = Platform::from_env()
        .await
        .map_err(|source| CliError::Unreachable {
            url: url.clone(),
            source,
        })?;
    if platform.kind() == "embedded" {
        // Only if the variable vanished between the two reads.
        return Err(CliError::NoSharedPlatform { command });
    }
    Ok(Connected { platform, url })
}
