//! The TLS settings of soorma's HTTP clients (LLM, MCP).

use std::sync::{Arc, OnceLock};

/// The TLS settings: rustls with the process's default crypto provider if one is installed,
/// else ring; the platform's certificate verifier. Built once per process. Without system CA
/// certificates, plain-`http` clients still work (their TLS config trusts nothing).
pub(crate) fn client_config(https: bool) -> Result<rustls::ClientConfig, String> {
    static PLATFORM: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    let provider = || {
        rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
    };
    let platform = PLATFORM.get_or_init(|| {
        let provider = provider();
        let verifier =
            rustls_platform_verifier::Verifier::new(provider.clone()).map_err(|e| e.to_string())?;
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth())
    });
    match platform {
        Ok(config) => Ok(config.clone()),
        Err(e) if https => Err(format!(
            "cannot set up TLS with the system's certificates: {e}"
        )),
        Err(e) => {
            tracing::debug!(error = %e, "no system TLS roots; https URLs will fail");
            rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map(|b| {
                    b.with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth()
                })
                .map_err(|e| format!("cannot set up TLS: {e}"))
        }
    }
}
