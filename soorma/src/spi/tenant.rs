//! Tenant ids: the one rule every platform, the client, agents and the gateway apply.

use crate::error::{Error, Result};

/// The longest tenant id accepted, in bytes.
pub const MAX_TENANT_LEN: usize = 64;

/// Checks that `tenant` is a valid tenant id: 1 to [`MAX_TENANT_LEN`] ASCII letters, digits, `-`
/// and `_`. A tenant id is a NATS subject token and a key prefix, so the embedded platform
/// accepts exactly what NATS does; anything else is [`Error::InvalidArgument`].
///
/// ```
/// use soorma::validate_tenant;
/// assert_eq!(validate_tenant("acme-eu_1")?, "acme-eu_1");
/// for bad in ["", "a.b", "a b", "a*", ">", "ünï", &"x".repeat(65)] {
///     assert!(matches!(validate_tenant(bad), Err(soorma::Error::InvalidArgument(_))), "{bad}");
/// }
/// # Ok::<(), soorma::Error>(())
/// ```
pub fn validate_tenant(tenant: &str) -> Result<&str> {
    let valid = !tenant.is_empty()
        && tenant.len() <= MAX_TENANT_LEN
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(tenant)
    } else {
        // The id may be hostile: quote a bounded, escaped prefix of it.
        let shown: String = tenant.chars().take(MAX_TENANT_LEN).collect();
        let more = if shown.len() < tenant.len() {
            "…"
        } else {
            ""
        };
        Err(Error::InvalidArgument(format!(
            "tenant {shown:?}{more} is not a valid tenant id: use 1 to {MAX_TENANT_LEN} ASCII letters, digits, `-` and `_`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        for ok in ["default", "a", "A-1_z", &"x".repeat(MAX_TENANT_LEN)] {
            assert_eq!(validate_tenant(ok).unwrap(), ok);
        }
        for bad in [
            "",
            " ",
            "a.b",
            "a*",
            "a>",
            "a\nb",
            "tab\t",
            "é",
            "a/b",
            &"x".repeat(MAX_TENANT_LEN + 1),
        ] {
            assert!(
                matches!(validate_tenant(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        // A huge hostile id is not copied into the error.
        let err = validate_tenant(&"é".repeat(100_000))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 400, "{}", err.len());
    }
}
