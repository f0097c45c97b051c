//! `AgentSkill`: one thing an agent can do.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::SecurityRequirement;

/// A distinct ability of the agent. `id`, `name`, `description` and at least one tag are
/// required by the protocol; the other lists are omitted when empty (modes then default to the
/// card's `defaultInputModes` / `defaultOutputModes`).
///
/// ```
/// use soorma_common::a2a::AgentSkill;
/// let skill = AgentSkill::new("add.requested", "Add", "Adds two numbers.")
///     .with_tag("math")
///     .with_example(r#"{"a": 1, "b": 2}"#);
/// assert_eq!(
///     serde_json::to_value(&skill).unwrap(),
///     serde_json::json!({
///         "id": "add.requested",
///         "name": "Add",
///         "description": "Adds two numbers.",
///         "tags": ["math"],
///         "examples": ["{\"a\": 1, \"b\": 2}"]
///     })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentSkill {
    /// Unique (within the card) identifier of the skill.
    pub id: String,
    /// Human-readable name.
    pub name: String,
    /// What the skill does.
    pub description: String,
    /// Keywords describing the skill (at least one).
    pub tags: Vec<String>,
    /// Example prompts or requests the skill handles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// Accepted media types, overriding the card's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    /// Produced media types, overriding the card's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
    /// Security requirements specific to this skill (any one of them suffices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
}

impl AgentSkill {
    /// A skill with no tags, examples, modes or security requirements yet.
    ///
    /// ```
    /// use soorma_common::a2a::AgentSkill;
    /// let skill = AgentSkill::new("id", "Name", "Does things.");
    /// assert!(skill.tags.is_empty());
    /// ```
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            description: description.into(),
            tags: Vec::new(),
            examples: Vec::new(),
            input_modes: Vec::new(),
            output_modes: Vec::new(),
            security_requirements: Vec::new(),
        }
    }

    /// Adds a tag.
    ///
    /// ```
    /// use soorma_common::a2a::AgentSkill;
    /// assert_eq!(AgentSkill::new("i", "n", "d").with_tag("math").tags, ["math"]);
    /// ```
    #[must_use]
    pub fn with_tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Adds an example.
    ///
    /// ```
    /// use soorma_common::a2a::AgentSkill;
    /// let skill = AgentSkill::new("i", "n", "d").with_example("What is 2 + 2?");
    /// assert_eq!(skill.examples, ["What is 2 + 2?"]);
    /// ```
    #[must_use]
    pub fn with_example(mut self, example: impl Into<String>) -> Self {
        self.examples.push(example.into());
        self
    }

    /// Replaces the accepted media types.
    ///
    /// ```
    /// use soorma_common::a2a::AgentSkill;
    /// let skill = AgentSkill::new("i", "n", "d").with_input_modes(["application/json"]);
    /// assert_eq!(skill.input_modes, ["application/json"]);
    /// ```
    #[must_use]
    pub fn with_input_modes<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.input_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the produced media types.
    ///
    /// ```
    /// use soorma_common::a2a::AgentSkill;
    /// let skill = AgentSkill::new("i", "n", "d").with_output_modes(["application/json"]);
    /// assert_eq!(skill.output_modes, ["application/json"]);
    /// ```
    #[must_use]
    pub fn with_output_modes<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.output_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a security requirement (an alternative: any one listed requirement suffices).
    ///
    /// ```
    /// use soorma_common::a2a::{AgentSkill, SecurityRequirement};
    /// let skill = AgentSkill::new("i", "n", "d")
    ///     .with_security_requirement(SecurityRequirement::new().with_scheme("oauth", ["write"]));
    /// assert_eq!(skill.security_requirements.len(), 1);
    /// ```
    #[must_use]
    pub fn with_security_requirement(mut self, requirement: SecurityRequirement) -> Self {
        self.security_requirements.push(requirement);
        self
    }
}
