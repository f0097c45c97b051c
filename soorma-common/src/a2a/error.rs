//! `CardError`: why a card is not a valid A2A card.

use std::fmt;

/// Why a card could not be built or is not valid.
///
/// ```
/// use soorma_common::a2a::{AgentCard, CardError};
/// let err = AgentCard::new("", "d", "1").validate().unwrap_err();
/// assert_eq!(err, CardError::MissingRequired { field: "name".into() });
/// assert_eq!(err.to_string(), "agent card: required field `name` is empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CardError {
    /// A field the protocol requires is empty (an empty string or list). `field` is a path
    /// such as `skills[1].tags`.
    MissingRequired {
        /// The JSON path of the field.
        field: String,
    },
    /// Two skills share an id.
    DuplicateSkillId {
        /// The repeated id.
        id: String,
    },
    /// A [`CardBuilder`](super::CardBuilder) override names a skill the definition does not have.
    UnknownSkill {
        /// The id given.
        id: String,
    },
    /// A security requirement names a scheme that `securitySchemes` does not declare.
    UndeclaredSecurityScheme {
        /// The scheme name.
        scheme: String,
        /// The JSON path of the requirement.
        field: String,
    },
}

impl fmt::Display for CardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingRequired { field } => {
                write!(f, "agent card: required field `{field}` is empty")
            }
            Self::DuplicateSkillId { id } => write!(f, "agent card: duplicate skill id `{id}`"),
            Self::UnknownSkill { id } => write!(f, "agent card: no skill with id `{id}`"),
            Self::UndeclaredSecurityScheme { scheme, field } => write!(
                f,
                "agent card: `{field}` names security scheme `{scheme}`, which `securitySchemes` does not declare"
            ),
        }
    }
}

impl std::error::Error for CardError {}
