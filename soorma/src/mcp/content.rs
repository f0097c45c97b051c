//! What an MCP tool returned, as soorma hands it on: the text, the structured content and
//! every content block (images, audio, embedded resources, resource links).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The result of an MCP tool call; also the reply payload of a bridged tool.
///
/// ```
/// use soorma::mcp::{McpContent, McpToolOutput};
///
/// let out: McpToolOutput = serde_json::from_value(serde_json::json!({
///     "text": "The sum of 2 and 3 is 5.",
///     "content": [{"type": "text", "text": "The sum of 2 and 3 is 5."}]
/// }))?;
/// assert!(matches!(&out.content[0], McpContent::Text { text } if text.contains("5")));
/// assert!(out.structured.is_none());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct McpToolOutput {
    /// The text blocks, joined by newlines (`""` when there are none).
    #[serde(default)]
    pub text: String,
    /// The tool's structured content (`structuredContent`), when it returned some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Every content block, in order.
    #[serde(default)]
    pub content: Vec<McpContent>,
    /// Whether the tool reported an error (`isError`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// One content block of a tool result.
///
/// ```
/// use soorma::mcp::McpContent;
///
/// let image: McpContent = serde_json::from_value(serde_json::json!(
///     {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"}))?;
/// assert!(matches!(image, McpContent::Image { .. }));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum McpContent {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64 encoded.
    Image {
        /// The base64 data.
        data: String,
        /// Its MIME type, such as `image/png`.
        mime_type: String,
    },
    /// Audio, base64 encoded.
    Audio {
        /// The base64 data.
        data: String,
        /// Its MIME type, such as `audio/wav`.
        mime_type: String,
    },
    /// A resource embedded in the result: text or a base64 blob.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its MIME type, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Its text, for a text resource.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Its base64 data, for a binary resource.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
        /// What it is, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its MIME type, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A block of a kind this version does not know, as the server sent it.
    Other {
        /// The block's JSON.
        raw: Value,
    },
}

impl McpToolOutput {
    /// Maps an MCP `CallToolResult` (as JSON, the wire form) into the output.
    ///
    /// ```
    /// use soorma::mcp::{McpContent, McpToolOutput};
    ///
    /// let out = McpToolOutput::from_call_result(&serde_json::json!({
    ///     "content": [{"type": "text", "text": "72°F"},
    ///                 {"type": "resource", "resource": {"uri": "file:///w.txt", "mimeType": "text/plain", "text": "sunny"}}],
    ///     "structuredContent": {"temperature": 22.5},
    ///     "isError": false
    /// }));
    /// assert_eq!(out.text, "72°F");
    /// assert_eq!(out.structured.unwrap()["temperature"], 22.5);
    /// assert!(matches!(&out.content[1], McpContent::Resource { text: Some(t), .. } if t == "sunny"));
    /// ```
    pub fn from_call_result(result: &Value) -> Self {
        let content: Vec<McpContent> = result
            .get("content")
            .and_then(Value::as_array)
            .map(|blocks| blocks.iter().map(McpContent::from_block).collect())
            .unwrap_or_default();
        let text = content
            .iter()
            .filter_map(|c| match c {
                McpContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        Self {
            text,
            structured: result
                .get("structuredContent")
                .filter(|v| !v.is_null())
                .cloned(),
            content,
            is_error: result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }
}

impl McpContent {
    fn from_block(block: &Value) -> Self {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let other = || McpContent::Other { raw: block.clone() };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match s(block, "text") {
                Some(text) => McpContent::Text { text },
                None => other(),
            },
            Some(kind @ ("image" | "audio")) => match (s(block, "data"), s(block, "mimeType")) {
                (Some(data), Some(mime_type)) if kind == "image" => {
                    McpContent::Image { data, mime_type }
                }
                (Some(data), Some(mime_type)) => McpContent::Audio { data, mime_type },
                _ => other(),
            },
            Some("resource") => match block.get("resource") {
                Some(r) => match s(r, "uri") {
                    Some(uri) => McpContent::Resource {
                        uri,
                        mime_type: s(r, "mimeType"),
                        text: s(r, "text"),
                        blob: s(r, "blob"),
                    },
                    None => other(),
                },
                None => other(),
            },
            Some("resource_link") => match (s(block, "uri"), s(block, "name")) {
                (Some(uri), Some(name)) => McpContent::ResourceLink {
                    uri,
                    name,
                    description: s(block, "description"),
                    mime_type: s(block, "mimeType"),
                },
                _ => other(),
            },
            _ => other(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_every_kind_of_block() {
        let out = McpToolOutput::from_call_result(&json!({
            "content": [
                {"type": "text", "text": "a"},
                {"type": "image", "data": "AAA=", "mimeType": "image/png"},
                {"type": "audio", "data": "BBB=", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "x:/b", "blob": "CCC="}},
                {"type": "resource_link", "uri": "x:/c", "name": "c", "mimeType": "text/plain"},
                {"type": "text", "text": "b"},
                {"type": "hologram", "depth": 3}
            ],
            "isError": true
        }));
        assert_eq!(out.text, "a\nb");
        assert!(out.is_error);
        assert_eq!(
            out.content[1],
            McpContent::Image {
                data: "AAA=".into(),
                mime_type: "image/png".into()
            }
        );
        assert!(matches!(&out.content[2], McpContent::Audio { .. }));
        assert!(
            matches!(&out.content[3], McpContent::Resource { blob: Some(b), text: None, .. } if b == "CCC=")
        );
        assert!(matches!(&out.content[4], McpContent::ResourceLink { name, .. } if name == "c"));
        assert!(matches!(&out.content[6], McpContent::Other { raw } if raw["depth"] == 3));
        let back: McpToolOutput =
            serde_json::from_value(serde_json::to_value(&out).unwrap()).unwrap();
        assert_eq!(back, out);
    }
}
