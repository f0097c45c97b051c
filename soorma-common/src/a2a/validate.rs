//! `AgentCard::validate`: the protocol rules serde cannot express.

use std::collections::{BTreeMap, BTreeSet};

use super::{AgentCard, CardError, OAuthFlows, SecurityRequirement, SecurityScheme};

impl AgentCard {
    /// Checks the rules the types alone do not enforce: every field the protocol marks
    /// REQUIRED is non-empty (strings set, lists with at least one element), skill ids are
    /// unique, extensions have a URI, and every security requirement names a declared scheme.
    /// Returns the first problem found.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentInterface, AgentSkill, CardError};
    /// let card = AgentCard::new("Echo", "Echoes text.", "1.0.0")
    ///     .with_interface(AgentInterface::jsonrpc("https://echo.example.com/a2a"))
    ///     .with_default_input_modes(["text/plain"])
    ///     .with_default_output_modes(["text/plain"])
    ///     .with_skill(AgentSkill::new("echo", "Echo", "Echoes text.")); // no tag
    /// assert_eq!(
    ///     card.validate(),
    ///     Err(CardError::MissingRequired { field: "skills[0].tags".into() })
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), CardError> {
        required_str(&self.name, "name")?;
        required_str(&self.description, "description")?;
        required_list(&self.supported_interfaces, "supportedInterfaces")?;
        for (i, iface) in self.supported_interfaces.iter().enumerate() {
            let at = format!("supportedInterfaces[{i}]");
            required_str(&iface.url, &format!("{at}.url"))?;
            required_str(&iface.protocol_binding, &format!("{at}.protocolBinding"))?;
            required_str(&iface.protocol_version, &format!("{at}.protocolVersion"))?;
        }
        if let Some(provider) = &self.provider {
            required_str(&provider.url, "provider.url")?;
            required_str(&provider.organization, "provider.organization")?;
        }
        required_str(&self.version, "version")?;
        for (i, ext) in self.capabilities.extensions.iter().enumerate() {
            required_str(&ext.uri, &format!("capabilities.extensions[{i}].uri"))?;
        }
        for (name, scheme) in &self.security_schemes {
            validate_scheme(scheme, &format!("securitySchemes.{name}"))?;
        }
        validate_requirements(
            &self.security_requirements,
            &self.security_schemes,
            "securityRequirements",
        )?;
        required_list(&self.default_input_modes, "defaultInputModes")?;
        required_list(&self.default_output_modes, "defaultOutputModes")?;
        required_list(&self.skills, "skills")?;
        let mut ids = BTreeSet::new();
        for (i, skill) in self.skills.iter().enumerate() {
            let at = format!("skills[{i}]");
            required_str(&skill.id, &format!("{at}.id"))?;
            required_str(&skill.name, &format!("{at}.name"))?;
            required_str(&skill.description, &format!("{at}.description"))?;
            required_list(&skill.tags, &format!("{at}.tags"))?;
            validate_requirements(
                &skill.security_requirements,
                &self.security_schemes,
                &format!("{at}.securityRequirements"),
            )?;
            if !ids.insert(skill.id.as_str()) {
                return Err(CardError::DuplicateSkillId {
                    id: skill.id.clone(),
                });
            }
        }
        for (i, sig) in self.signatures.iter().enumerate() {
            required_str(&sig.protected, &format!("signatures[{i}].protected"))?;
            required_str(&sig.signature, &format!("signatures[{i}].signature"))?;
        }
        Ok(())
    }
}

fn required_str(value: &str, field: &str) -> Result<(), CardError> {
    if value.trim().is_empty() {
        return Err(CardError::MissingRequired {
            field: field.to_owned(),
        });
    }
    Ok(())
}

fn required_list<T>(value: &[T], field: &str) -> Result<(), CardError> {
    if value.is_empty() {
        return Err(CardError::MissingRequired {
            field: field.to_owned(),
        });
    }
    Ok(())
}

fn validate_scheme(scheme: &SecurityScheme, at: &str) -> Result<(), CardError> {
    match scheme {
        SecurityScheme::ApiKey(key) => required_str(&key.name, &format!("{at}.name")),
        SecurityScheme::HttpAuth(http) => required_str(&http.scheme, &format!("{at}.scheme")),
        SecurityScheme::OAuth2(oauth) => match &oauth.flows {
            OAuthFlows::AuthorizationCode(flow) => {
                required_str(&flow.authorization_url, &format!("{at}.authorizationUrl"))?;
                required_str(&flow.token_url, &format!("{at}.tokenUrl"))
            }
            OAuthFlows::ClientCredentials(flow) => {
                required_str(&flow.token_url, &format!("{at}.tokenUrl"))
            }
            OAuthFlows::DeviceCode(flow) => {
                required_str(
                    &flow.device_authorization_url,
                    &format!("{at}.deviceAuthorizationUrl"),
                )?;
                required_str(&flow.token_url, &format!("{at}.tokenUrl"))
            }
            OAuthFlows::Implicit(_) | OAuthFlows::Password(_) => Ok(()),
        },
        SecurityScheme::OpenIdConnect(oidc) => {
            required_str(&oidc.open_id_connect_url, &format!("{at}.openIdConnectUrl"))
        }
        SecurityScheme::MutualTls(_) => Ok(()),
    }
}

fn validate_requirements(
    requirements: &[SecurityRequirement],
    schemes: &BTreeMap<String, SecurityScheme>,
    at: &str,
) -> Result<(), CardError> {
    for (i, req) in requirements.iter().enumerate() {
        if let Some(name) = req.schemes.keys().find(|n| !schemes.contains_key(*n)) {
            return Err(CardError::UndeclaredSecurityScheme {
                scheme: name.clone(),
                field: format!("{at}[{i}]"),
            });
        }
    }
    Ok(())
}
