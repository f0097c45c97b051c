//! A2A agent cards against the protocol's own definitions, kept in the repository under
//! `spec/a2a/`: the v1.0 `a2a.proto` (REQUIRED fields, JSON names), the sample card of the v1.0
//! specification, and the v0.3.0 JSON Schema.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma_common::a2a::*;
use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};

fn spec_file(name: &str) -> String {
    let path = format!("{}/../spec/a2a/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// A small proto3 parser: messages, their fields, `oneof`s, `optional` / `repeated` / `map<>`,
// `json_name` and `(google.api.field_behavior) = REQUIRED`.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ProtoField {
    name: String,
    json_name: String,
    /// The value type (for a map, the map's value type).
    type_name: String,
    repeated: bool,
    map: bool,
    optional: bool,
    required: bool,
    oneof: Option<String>,
}

type Protos = BTreeMap<String, Vec<ProtoField>>;

/// Splits proto source into tokens, dropping `//` and `/* */` comments.
fn tokenize(src: &str) -> Vec<String> {
    let chars: Vec<char> = src.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '"' || c == '\'' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            tokens.push(chars[start..i.min(chars.len())].iter().collect());
        } else if c.is_alphanumeric() || c == '_' || c == '.' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.')
            {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// protoc's default JSON name: drop underscores, upper-casing the letter after each.
fn json_name(field: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

struct Parser {
    tokens: Vec<String>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.pos).map(String::as_str)
    }

    fn next(&mut self) -> String {
        let t = self
            .tokens
            .get(self.pos)
            .cloned()
            .expect("unexpected end of proto");
        self.pos += 1;
        t
    }

    fn expect(&mut self, want: &str) {
        let got = self.next();
        assert_eq!(got, want, "proto parse error near token {}", self.pos);
    }

    /// Skips to the end of the current statement or balanced `{ ... }` block.
    fn skip_statement(&mut self) {
        let mut depth = 0usize;
        loop {
            match self.next().as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                ";" if depth == 0 => return,
                _ => {}
            }
        }
    }

    fn file(&mut self, protos: &mut Protos) {
        while let Some(tok) = self.peek() {
            if tok == "message" {
                self.next();
                let name = self.next();
                self.message(&name, protos);
            } else {
                self.skip_statement();
            }
        }
    }

    /// Parses `{ ... }` after `message NAME`.
    fn message(&mut self, name: &str, protos: &mut Protos) {
        self.expect("{");
        let mut fields = Vec::new();
        loop {
            match self.peek().expect("unterminated message") {
                "}" => {
                    self.next();
                    break;
                }
                "oneof" => {
                    self.next();
                    let group = self.next();
                    self.expect("{");
                    while self.peek() != Some("}") {
                        if self.peek() == Some("option") {
                            self.skip_statement();
                        } else {
                            fields.push(self.field(Some(group.clone())));
                        }
                    }
                    self.expect("}");
                }
                "message" => {
                    self.next();
                    let inner = self.next();
                    self.message(&format!("{name}.{inner}"), protos);
                }
                "enum" | "option" | "reserved" | "extensions" | ";" => self.skip_statement(),
                _ => fields.push(self.field(None)),
            }
        }
        protos.insert(name.to_owned(), fields);
    }

    /// `[optional|repeated] TYPE NAME = NUMBER [OPTIONS];`
    fn field(&mut self, oneof: Option<String>) -> ProtoField {
        let mut optional = false;
        let mut repeated = false;
        match self.peek() {
            Some("optional") => {
                optional = true;
                self.next();
            }
            Some("repeated") => {
                repeated = true;
                self.next();
            }
            _ => {}
        }
        let mut map = false;
        let mut type_name = self.next();
        if type_name == "map" {
            map = true;
            self.expect("<");
            self.next(); // key type
            self.expect(",");
            type_name = self.next();
            self.expect(">");
        }
        let name = self.next();
        self.expect("=");
        self.next(); // field number
        let mut required = false;
        let mut json = json_name(&name);
        if self.peek() == Some("[") {
            self.next();
            loop {
                let mut key = self.next();
                if key == "(" {
                    key = self.next();
                    self.expect(")");
                }
                self.expect("=");
                let value = self.next();
                if key == "google.api.field_behavior" && value == "REQUIRED" {
                    required = true;
                }
                if key == "json_name" {
                    json = value.trim_matches('"').to_owned();
                }
                match self.next().as_str() {
                    "," => continue,
                    "]" => break,
                    other => panic!("unexpected `{other}` in field options of `{name}`"),
                }
            }
        }
        self.expect(";");
        ProtoField {
            name,
            json_name: json,
            type_name,
            repeated,
            map,
            optional,
            required,
            oneof,
        }
    }
}

fn parse_proto(src: &str) -> Protos {
    let mut parser = Parser {
        tokens: tokenize(src),
        pos: 0,
    };
    let mut protos = Protos::new();
    parser.file(&mut protos);
    protos
}

fn a2a_proto() -> Protos {
    parse_proto(&spec_file("a2a.proto"))
}

fn required_json_names(protos: &Protos, message: &str) -> BTreeSet<String> {
    protos[message]
        .iter()
        .filter(|f| f.required)
        .map(|f| f.json_name.clone())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// Checks `value` as the JSON form of proto message `message`: every key is a field's JSON
/// name, every REQUIRED field is present and set (non-empty string, non-empty list), at most
/// one field per `oneof` (exactly one for a `oneof` that is the whole message), scalars have the
/// right JSON type; recurses into nested messages. Records each message checked in `seen`.
fn check_message(
    protos: &Protos,
    message: &str,
    value: &Value,
    path: &str,
    seen: &mut BTreeSet<String>,
    problems: &mut Vec<String>,
) {
    seen.insert(message.to_owned());
    let fields = &protos[message];
    let Some(obj) = value.as_object() else {
        problems.push(format!(
            "{path}: expected an object for {message}, got {value}"
        ));
        return;
    };
    for key in obj.keys() {
        if !fields.iter().any(|f| &f.json_name == key) {
            problems.push(format!("{path}.{key}: not a field of {message}"));
        }
    }
    let mut oneofs: BTreeMap<&str, usize> = BTreeMap::new();
    for f in fields {
        let at = format!("{path}.{}", f.json_name);
        let Some(v) = obj.get(&f.json_name) else {
            if f.required {
                problems.push(format!("{at}: REQUIRED field of {message} missing"));
            }
            continue;
        };
        if let Some(group) = &f.oneof {
            *oneofs.entry(group).or_default() += 1;
        }
        if f.required {
            let empty = match v {
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Null => true,
                _ => false,
            };
            if empty {
                problems.push(format!("{at}: REQUIRED field of {message} is empty"));
            }
        }
        let elements: Vec<(String, &Value)> = if f.map {
            match v.as_object() {
                Some(m) => m.iter().map(|(k, v)| (format!("{at}.{k}"), v)).collect(),
                None => {
                    problems.push(format!("{at}: expected a map object"));
                    continue;
                }
            }
        } else if f.repeated {
            match v.as_array() {
                Some(a) => a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("{at}[{i}]"), v))
                    .collect(),
                None => {
                    problems.push(format!("{at}: expected an array"));
                    continue;
                }
            }
        } else {
            vec![(at, v)]
        };
        for (at, v) in elements {
            let ok = match f.type_name.as_str() {
                "string" | "bytes" => v.is_string(),
                "bool" => v.is_boolean(),
                "int32" | "uint32" | "sint32" | "fixed32" | "double" | "float" => v.is_number(),
                "int64" | "uint64" | "sint64" | "fixed64" => v.is_number() || v.is_string(),
                "google.protobuf.Struct" => v.is_object(),
                "google.protobuf.Value" => true,
                "google.protobuf.Timestamp" => v.is_string(),
                t if protos.contains_key(t) => {
                    check_message(protos, t, v, &at, seen, problems);
                    true
                }
                _ => v.is_string(), // an enum: its value name
            };
            if !ok {
                problems.push(format!("{at}: {v} is not a proto {}", f.type_name));
            }
        }
    }
    let groups: BTreeSet<&str> = fields.iter().filter_map(|f| f.oneof.as_deref()).collect();
    for group in groups {
        let n = oneofs.get(group).copied().unwrap_or(0);
        let whole = fields.iter().all(|f| f.oneof.as_deref() == Some(group));
        if n > 1 || (whole && n != 1) {
            problems.push(format!("{path}: {n} fields of oneof {message}.{group} set"));
        }
    }
}

/// Checks a serialized card against the proto; returns the messages it exercised.
fn assert_conforms_to_proto(card_json: &Value) -> BTreeSet<String> {
    let protos = a2a_proto();
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    check_message(
        &protos,
        "AgentCard",
        card_json,
        "$",
        &mut seen,
        &mut problems,
    );
    assert!(
        problems.is_empty(),
        "card does not match a2a.proto:\n{}\n{card_json:#}",
        problems.join("\n")
    );
    seen
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

/// `calculate` request payload.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Calculate {
    /// An arithmetic expression such as `2 * (3 + 4)`.
    expression: String,
}

/// `calculate` result.
#[derive(Serialize, JsonSchema)]
struct Calculated {
    result: f64,
}

/// `convert` request payload.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Convert {
    value: f64,
    from: String,
    to: String,
}

/// A calculator tool with two capabilities, as the runtime registers it: the first has
/// description, payload and response schemas; the second only an event description and a
/// payload schema.
fn calculator() -> AgentDefinition {
    AgentDefinition::new("calculator-7f3a", "calculator", AgentKind::Tool)
        .with_version("1.4.2")
        .with_description("Evaluates arithmetic and converts units.")
        .with_tenant_id("acme")
        .with_capability(
            AgentCapability::new(
                "calculate",
                EventDefinition::new("calculate.requested", Topic::ActionRequests)
                    .with_description("Evaluates an arithmetic expression.")
                    .with_payload_schema(
                        serde_json::to_value(schemars::schema_for!(Calculate)).unwrap(),
                    )
                    .with_response_schema(
                        serde_json::to_value(schemars::schema_for!(Calculated)).unwrap(),
                    ),
            )
            .with_description("Evaluates an arithmetic expression.")
            .with_produced_event(EventDefinition::new(
                "calculate.completed",
                Topic::ActionResults,
            )),
        )
        .with_capability(AgentCapability::new(
            "convert_units",
            EventDefinition::new("convert.requested", Topic::ActionRequests)
                .with_description("Converts a value between units.")
                .with_payload_schema(serde_json::to_value(schemars::schema_for!(Convert)).unwrap()),
        ))
}

/// The smallest definition that yields a card: no description, default version, one capability
/// with no description and no schemas.
fn minimal() -> AgentDefinition {
    AgentDefinition::new("m-1", "echo", AgentKind::Agent).with_capability(AgentCapability::new(
        "echo",
        EventDefinition::new("echo", Topic::BusinessFacts),
    ))
}

const URL: &str = "https://agents.example.com/calculator/a2a";

/// The calculator card with every builder option in use.
fn full_card() -> AgentCard {
    let def = calculator();
    CardBuilder::new(&def, URL)
        .with_tenant("acme")
        .with_interface(
            AgentInterface::jsonrpc("https://agents.example.com/calculator/a2a/v0.3")
                .with_protocol_version("0.3"),
        )
        .with_interface(AgentInterface::new(
            "https://agents.example.com/calculator/rest",
            HTTP_JSON,
        ))
        .with_extended_agent_card(true)
        .with_extension(
            AgentExtension::new("https://example.com/extensions/billing/v1")
                .with_description("Usage billing")
                .with_required(true),
        )
        .with_provider("Example Inc.", "https://example.com")
        .with_documentation_url("https://docs.example.com/calculator")
        .with_icon_url("https://agents.example.com/calculator/icon.png")
        .with_api_key("X-API-Key")
        .with_bearer()
        .with_security_scheme(
            "google",
            OpenIdConnectSecurityScheme::new(
                "https://accounts.google.com/.well-known/openid-configuration",
            )
            .with_description("Google accounts"),
        )
        .with_security_scheme(
            "mtls",
            MutualTlsSecurityScheme::new().with_description("Client certificates"),
        )
        .with_security_scheme(
            "oauth",
            OAuth2SecurityScheme::new(OAuthFlows::AuthorizationCode(
                AuthorizationCodeOAuthFlow::new(
                    "https://auth.example.com/authorize",
                    "https://auth.example.com/token",
                )
                .with_refresh_url("https://auth.example.com/refresh")
                .with_scope("calc:run", "Run calculations")
                .with_pkce_required(true),
            ))
            .with_oauth2_metadata_url(
                "https://auth.example.com/.well-known/oauth-authorization-server",
            ),
        )
        .with_security_scheme(
            "machines",
            OAuth2SecurityScheme::new(OAuthFlows::ClientCredentials(
                ClientCredentialsOAuthFlow::new("https://auth.example.com/token")
                    .with_scope("calc:run", "Run calculations"),
            )),
        )
        .with_security_scheme(
            "devices",
            OAuth2SecurityScheme::new(OAuthFlows::DeviceCode(
                DeviceCodeOAuthFlow::new(
                    "https://auth.example.com/device",
                    "https://auth.example.com/token",
                )
                .with_scope("calc:run", "Run calculations"),
            )),
        )
        .with_security_requirement(
            SecurityRequirement::new()
                .with_scheme("google", ["openid", "email"])
                .with_scheme("mtls", [] as [&str; 0]),
        )
        .with_skill_examples(
            "calculate.requested",
            ["What is 2 * (3 + 4)?", r#"{"expression": "2 * (3 + 4)"}"#],
        )
        .with_skill_input_modes("calculate.requested", [MEDIA_TYPE_JSON, MEDIA_TYPE_TEXT])
        .with_skill_output_modes("convert.requested", [MEDIA_TYPE_JSON])
        .with_skill_security_requirement(
            "convert.requested",
            SecurityRequirement::new().with_scheme("oauth", ["calc:run"]),
        )
        .build()
        .unwrap()
        .with_signature(
            AgentCardSignature::new("eyJhbGciOiJFUzI1NiJ9", "c2lnbmF0dXJl")
                .with_header(json!({"kid": "key-1"}).as_object().unwrap().clone()),
        )
}

fn spec_sample_card() -> Value {
    let spec = spec_file("specification.md");
    let start = spec
        .find("### 8.5. Sample Agent Card")
        .expect("sample card section");
    let block = spec[start..]
        .split_once("```json")
        .expect("json block")
        .1
        .split_once("```")
        .expect("block end")
        .0;
    serde_json::from_str(block).expect("the sample card is JSON")
}

fn find_nulls(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Null => out.push(path.to_owned()),
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                find_nulls(v, &format!("{path}[{i}]"), out);
            }
        }
        Value::Object(o) => {
            for (k, v) in o {
                find_nulls(v, &format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The proto parser itself.
// ---------------------------------------------------------------------------------------------

#[test]
fn proto_parser_reads_the_card_messages() {
    let protos = a2a_proto();
    assert_eq!(
        required_json_names(&protos, "AgentCard"),
        set(&[
            "name",
            "description",
            "supportedInterfaces",
            "version",
            "capabilities",
            "defaultInputModes",
            "defaultOutputModes",
            "skills",
        ])
    );
    assert_eq!(
        required_json_names(&protos, "AgentInterface"),
        set(&["url", "protocolBinding", "protocolVersion"])
    );
    assert_eq!(
        required_json_names(&protos, "AgentSkill"),
        set(&["id", "name", "description", "tags"])
    );
    assert_eq!(
        required_json_names(&protos, "AgentProvider"),
        set(&["url", "organization"])
    );
    assert!(required_json_names(&protos, "AgentCapabilities").is_empty());

    let card = &protos["AgentCard"];
    let icon = card.iter().find(|f| f.name == "icon_url").unwrap();
    assert!(icon.optional && !icon.required && icon.json_name == "iconUrl");
    let schemes = card.iter().find(|f| f.name == "security_schemes").unwrap();
    assert!(schemes.map && schemes.type_name == "SecurityScheme");
    let skills = card.iter().find(|f| f.name == "skills").unwrap();
    assert!(skills.repeated && skills.required && skills.type_name == "AgentSkill");

    let oneof: Vec<&str> = protos["SecurityScheme"]
        .iter()
        .filter(|f| f.oneof.as_deref() == Some("scheme"))
        .map(|f| f.json_name.as_str())
        .collect();
    assert_eq!(
        oneof,
        [
            "apiKeySecurityScheme",
            "httpAuthSecurityScheme",
            "oauth2SecurityScheme",
            "openIdConnectSecurityScheme",
            "mtlsSecurityScheme"
        ]
    );
    // Messages after the card ones parse too (requests, responses).
    assert!(protos.contains_key("SendMessageRequest"));
    assert!(protos.contains_key("StreamResponse"));
}

#[test]
fn proto_parser_honours_json_name_and_nested_blocks() {
    let protos = parse_proto(
        r#"
        syntax = "proto3";
        // message Commented { string x = 1; }
        message Outer {
          /* block comment with { braces } */
          string snake_case_name = 1 [(google.api.field_behavior) = REQUIRED];
          string renamed = 2 [json_name = "customName", deprecated = true];
          message Inner { optional bool on = 1; }
          enum Kind { KIND_UNSPECIFIED = 0; }
          reserved 7;
          oneof choice { Inner inner = 3; string other = 4; }
          map<string, Inner> by_name = 5;
        }
        "#,
    );
    assert!(!protos.contains_key("Commented"));
    let outer = &protos["Outer"];
    assert_eq!(outer[0].json_name, "snakeCaseName");
    assert!(outer[0].required);
    assert_eq!(outer[1].json_name, "customName");
    assert!(!outer[1].required);
    assert_eq!(outer[2].oneof.as_deref(), Some("choice"));
    assert!(outer[4].map && outer[4].type_name == "Inner");
    assert!(protos["Outer.Inner"][0].optional);
}

// ---------------------------------------------------------------------------------------------
// v1.0 conformance.
// ---------------------------------------------------------------------------------------------

/// Property names and required property names of a JSON Schema object.
type Shape = (BTreeSet<String>, BTreeSet<String>);

/// The JSON Schema schemars derives for `T` (its property names and required set).
fn rust_shape<T: JsonSchema>() -> Shape {
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
    let props = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let required = schema["required"]
        .as_array()
        .map(|r| r.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    (props, required)
}

/// The variant keys of an externally tagged enum's schema.
fn rust_oneof_keys<T: JsonSchema>() -> BTreeSet<String> {
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
    schema["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["properties"].as_object().unwrap().keys().cloned())
        .collect()
}

#[test]
fn rust_types_have_every_proto_field_with_the_same_required_set() {
    let protos = a2a_proto();
    let structs: Vec<(&str, Shape)> = vec![
        ("AgentCard", rust_shape::<AgentCard>()),
        ("AgentInterface", rust_shape::<AgentInterface>()),
        ("AgentProvider", rust_shape::<AgentProvider>()),
        ("AgentCapabilities", rust_shape::<AgentCapabilities>()),
        ("AgentExtension", rust_shape::<AgentExtension>()),
        ("AgentSkill", rust_shape::<AgentSkill>()),
        ("AgentCardSignature", rust_shape::<AgentCardSignature>()),
        ("SecurityRequirement", rust_shape::<SecurityRequirement>()),
        ("StringList", rust_shape::<StringList>()),
        ("APIKeySecurityScheme", rust_shape::<ApiKeySecurityScheme>()),
        (
            "HTTPAuthSecurityScheme",
            rust_shape::<HttpAuthSecurityScheme>(),
        ),
        ("OAuth2SecurityScheme", rust_shape::<OAuth2SecurityScheme>()),
        (
            "OpenIdConnectSecurityScheme",
            rust_shape::<OpenIdConnectSecurityScheme>(),
        ),
        (
            "MutualTlsSecurityScheme",
            rust_shape::<MutualTlsSecurityScheme>(),
        ),
        (
            "AuthorizationCodeOAuthFlow",
            rust_shape::<AuthorizationCodeOAuthFlow>(),
        ),
        (
            "ClientCredentialsOAuthFlow",
            rust_shape::<ClientCredentialsOAuthFlow>(),
        ),
        ("ImplicitOAuthFlow", rust_shape::<ImplicitOAuthFlow>()),
        ("PasswordOAuthFlow", rust_shape::<PasswordOAuthFlow>()),
        ("DeviceCodeOAuthFlow", rust_shape::<DeviceCodeOAuthFlow>()),
    ];
    for (message, (props, required)) in structs {
        let proto_fields: BTreeSet<String> = protos[message]
            .iter()
            .map(|f| f.json_name.clone())
            .collect();
        assert_eq!(props, proto_fields, "fields of {message}");
        assert_eq!(
            required,
            required_json_names(&protos, message),
            "required fields of {message}"
        );
    }
    let oneofs = [
        ("SecurityScheme", rust_oneof_keys::<SecurityScheme>()),
        ("OAuthFlows", rust_oneof_keys::<OAuthFlows>()),
    ];
    for (message, keys) in oneofs {
        let proto_fields: BTreeSet<String> = protos[message]
            .iter()
            .map(|f| f.json_name.clone())
            .collect();
        assert_eq!(keys, proto_fields, "oneof variants of {message}");
    }
}

#[test]
fn realistic_card_has_every_required_proto_field() {
    let card = CardBuilder::new(&calculator(), URL)
        .with_provider("Example Inc.", "https://example.com")
        .with_api_key("X-API-Key")
        .build()
        .unwrap();
    let seen = assert_conforms_to_proto(&serde_json::to_value(&card).unwrap());
    for message in [
        "AgentCard",
        "AgentInterface",
        "AgentProvider",
        "AgentCapabilities",
        "AgentExtension",
        "AgentSkill",
        "SecurityScheme",
        "APIKeySecurityScheme",
        "SecurityRequirement",
        "StringList",
    ] {
        assert!(seen.contains(message), "{message} not exercised: {seen:?}");
    }
}

#[test]
fn full_card_has_every_required_proto_field() {
    let seen = assert_conforms_to_proto(&serde_json::to_value(full_card()).unwrap());
    for message in [
        "AgentCardSignature",
        "HTTPAuthSecurityScheme",
        "OAuth2SecurityScheme",
        "OAuthFlows",
        "AuthorizationCodeOAuthFlow",
        "ClientCredentialsOAuthFlow",
        "DeviceCodeOAuthFlow",
        "OpenIdConnectSecurityScheme",
        "MutualTlsSecurityScheme",
    ] {
        assert!(seen.contains(message), "{message} not exercised: {seen:?}");
    }
}

#[test]
fn minimal_card_has_every_required_proto_field() {
    let def = minimal();
    let card = AgentCard::from_definition(&def, URL).unwrap();
    let json = serde_json::to_value(&card).unwrap();
    assert_conforms_to_proto(&json);
    assert_eq!(
        json,
        json!({
            "name": "echo",
            "description": "echo: a soorma agent. Skills: Echo.",
            "supportedInterfaces": [
                {"url": URL, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "version": "0.0.0",
            "capabilities": {"streaming": true, "pushNotifications": false},
            "defaultInputModes": ["application/json", "text/plain"],
            "defaultOutputModes": ["application/json"],
            "skills": [{
                "id": "echo",
                "name": "Echo",
                "description": "Handles `echo` requests.",
                "tags": ["agent", "business-facts", "echo"]
            }]
        })
    );
}

#[test]
fn spec_sample_card_parses_round_trips_and_passes_the_proto_check() {
    let sample = spec_sample_card();
    assert_conforms_to_proto(&sample);
    let card: AgentCard = serde_json::from_value(sample.clone()).unwrap();
    card.validate().unwrap();
    assert_eq!(card.name, "GeoSpatial Route Planner Agent");
    assert_eq!(card.supported_interfaces[1].protocol_binding, GRPC);
    assert!(matches!(
        card.security_schemes["google"],
        SecurityScheme::OpenIdConnect(_)
    ));
    assert_eq!(
        card.security_requirements[0].schemes["google"].list,
        ["openid", "profile", "email"]
    );
    assert_eq!(serde_json::to_value(&card).unwrap(), sample);
}

// ---------------------------------------------------------------------------------------------
// Serde.
// ---------------------------------------------------------------------------------------------

#[test]
fn cards_round_trip() {
    for card in [
        full_card(),
        AgentCard::from_definition(&calculator(), URL).unwrap(),
        AgentCard::from_definition(&minimal(), URL).unwrap(),
    ] {
        let text = serde_json::to_string(&card).unwrap();
        let back: AgentCard = serde_json::from_str(&text).unwrap();
        assert_eq!(back, card);
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }
}

#[test]
fn every_oauth_flow_round_trips() {
    let flows = [
        OAuthFlows::AuthorizationCode(AuthorizationCodeOAuthFlow::new(
            "https://a/az",
            "https://a/t",
        )),
        OAuthFlows::ClientCredentials(ClientCredentialsOAuthFlow::new("https://a/t")),
        OAuthFlows::Implicit(ImplicitOAuthFlow::new("https://a/az")),
        OAuthFlows::Password(PasswordOAuthFlow::new("https://a/t")),
        OAuthFlows::DeviceCode(DeviceCodeOAuthFlow::new("https://a/d", "https://a/t")),
    ];
    let keys = [
        "authorizationCode",
        "clientCredentials",
        "implicit",
        "password",
        "deviceCode",
    ];
    for (flows, key) in flows.into_iter().zip(keys) {
        let scheme = SecurityScheme::from(OAuth2SecurityScheme::new(flows));
        let json = serde_json::to_value(&scheme).unwrap();
        assert!(
            json["oauth2SecurityScheme"]["flows"][key].is_object(),
            "{json}"
        );
        assert_eq!(
            serde_json::from_value::<SecurityScheme>(json).unwrap(),
            scheme
        );
    }
}

#[test]
fn unknown_fields_are_ignored() {
    let card = full_card();
    let mut json = serde_json::to_value(&card).unwrap();
    json["futureField"] = json!({"x": 1});
    json["supportedInterfaces"][0]["priority"] = json!(1);
    json["provider"]["country"] = json!("NZ");
    json["capabilities"]["stateTransitionHistory"] = json!(true);
    json["capabilities"]["extensions"][0]["since"] = json!("2026");
    json["skills"][0]["rating"] = json!(5);
    json["skills"][1]["securityRequirements"][0]["note"] = json!("n");
    json["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["deprecated"] = json!(false);
    json["securitySchemes"]["oauth"]["oauth2SecurityScheme"]["flows"]["authorizationCode"]["x"] =
        json!(1);
    json["securityRequirements"][2]["schemes"]["google"]["extra"] = json!([]);
    json["signatures"][0]["alg"] = json!("ES256");
    assert_eq!(serde_json::from_value::<AgentCard>(json).unwrap(), card);
}

#[test]
fn a_missing_required_field_is_a_deserialization_error() {
    let mut json =
        serde_json::to_value(AgentCard::from_definition(&minimal(), URL).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("skills");
    let err = serde_json::from_value::<AgentCard>(json).unwrap_err();
    assert!(err.to_string().contains("skills"), "{err}");
}

#[test]
fn serialized_cards_contain_no_null() {
    let cards = [
        full_card(),
        AgentCard::from_definition(&calculator(), URL).unwrap(),
        AgentCard::from_definition(&minimal(), URL).unwrap(),
    ];
    for card in &cards {
        for json in [
            serde_json::to_value(card).unwrap(),
            serde_json::to_value(card.to_v0_3()).unwrap(),
        ] {
            let mut nulls = Vec::new();
            find_nulls(&json, "$", &mut nulls);
            assert!(nulls.is_empty(), "nulls at {nulls:?} in {json:#}");
        }
    }
    // Unset optional fields are absent, not empty.
    let json = serde_json::to_value(&cards[2]).unwrap();
    for key in [
        "provider",
        "documentationUrl",
        "iconUrl",
        "securitySchemes",
        "securityRequirements",
        "signatures",
    ] {
        assert!(json.get(key).is_none(), "{key} present in {json}");
    }
    for key in [
        "examples",
        "inputModes",
        "outputModes",
        "securityRequirements",
    ] {
        assert!(json["skills"][0].get(key).is_none(), "{key} present");
    }
    assert!(json["supportedInterfaces"][0].get("tenant").is_none());
    assert!(json["capabilities"].get("extensions").is_none());
}

// ---------------------------------------------------------------------------------------------
// The card built from a definition.
// ---------------------------------------------------------------------------------------------

#[test]
fn one_skill_per_capability() {
    let def = calculator();
    let card = AgentCard::from_definition(&def, URL).unwrap();
    assert_eq!(card.name, "calculator");
    assert_eq!(card.description, "Evaluates arithmetic and converts units.");
    assert_eq!(card.version, "1.4.2");
    assert_eq!(card.supported_interfaces, [AgentInterface::jsonrpc(URL)]);
    assert_eq!(card.capabilities.streaming, Some(true));
    assert_eq!(card.capabilities.push_notifications, Some(false));
    assert_eq!(card.capabilities.extended_agent_card, None);
    assert_eq!(card.default_input_modes, ["application/json", "text/plain"]);
    assert_eq!(card.default_output_modes, ["application/json"]);
    assert!(card.provider.is_none() && card.security_schemes.is_empty());

    assert_eq!(card.skills.len(), 2);
    let calc = card.skill("calculate.requested").unwrap();
    assert_eq!(calc.name, "Calculate");
    assert_eq!(calc.description, "Evaluates an arithmetic expression.");
    assert_eq!(
        calc.tags,
        ["tool", "action-requests", "calculate.requested"]
    );
    assert!(calc.examples.is_empty() && calc.input_modes.is_empty());
    let convert = card.skill("convert.requested").unwrap();
    assert_eq!(convert.name, "Convert Units");
    // No capability description: the consumed event's.
    assert_eq!(convert.description, "Converts a value between units.");

    // The skill id routes back to the capability.
    for skill in &card.skills {
        let cap = def.capability_for_event(&skill.id).unwrap();
        assert_eq!(cap.consumed_event.event_name, skill.id);
    }
}

#[test]
fn skill_schemas_are_published_in_the_soorma_extension() {
    let def = calculator();
    let card = AgentCard::from_definition(&def, URL).unwrap();
    let [ext] = card.capabilities.extensions.as_slice() else {
        panic!("one extension expected: {:?}", card.capabilities.extensions)
    };
    assert_eq!(ext.uri, SKILL_SCHEMAS_EXTENSION_URI);
    assert!(!ext.required);
    let skills = &ext.params.as_ref().unwrap()["skills"];
    let calc = &def.capabilities[0].consumed_event;
    assert_eq!(
        skills["calculate.requested"]["inputSchema"],
        *calc.payload_schema.as_ref().unwrap()
    );
    assert_eq!(
        skills["calculate.requested"]["outputSchema"],
        *calc.response_schema.as_ref().unwrap()
    );
    assert_eq!(
        skills["convert.requested"]["inputSchema"]["properties"]["from"]["type"],
        "string"
    );
    assert!(skills["convert.requested"].get("outputSchema").is_none());

    // Without schemas there is no extension; it can be switched off.
    let card = AgentCard::from_definition(&minimal(), URL).unwrap();
    assert!(card.capabilities.extensions.is_empty());
    let card = CardBuilder::new(&def, URL)
        .with_schema_extension(false)
        .build()
        .unwrap();
    assert!(card.capabilities.extensions.is_empty());
}

#[test]
fn builder_options_reach_the_card() {
    let card = full_card();
    let json = serde_json::to_value(&card).unwrap();
    assert_eq!(json["supportedInterfaces"][0]["tenant"], "acme");
    assert_eq!(json["supportedInterfaces"][1]["protocolVersion"], "0.3");
    assert_eq!(
        json["supportedInterfaces"][2]["protocolBinding"],
        "HTTP+JSON"
    );
    assert_eq!(json["capabilities"]["extendedAgentCard"], true);
    // The caller's extension first, then soorma's.
    assert_eq!(json["capabilities"]["extensions"][0]["required"], true);
    assert_eq!(
        json["capabilities"]["extensions"][1]["uri"],
        SKILL_SCHEMAS_EXTENSION_URI
    );
    assert_eq!(
        json["provider"],
        json!({"url": "https://example.com", "organization": "Example Inc."})
    );
    assert_eq!(
        json["securitySchemes"]["apiKey"],
        json!({"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}})
    );
    assert_eq!(
        json["securitySchemes"]["bearer"],
        json!({"httpAuthSecurityScheme": {"scheme": "Bearer"}})
    );
    assert_eq!(
        json["securitySchemes"]["google"],
        json!({"openIdConnectSecurityScheme": {
            "description": "Google accounts",
            "openIdConnectUrl": "https://accounts.google.com/.well-known/openid-configuration"
        }})
    );
    assert_eq!(
        json["securitySchemes"]["mtls"],
        json!({"mtlsSecurityScheme": {"description": "Client certificates"}})
    );
    assert_eq!(
        json["securitySchemes"]["oauth"]["oauth2SecurityScheme"]["flows"]["authorizationCode"],
        json!({
            "authorizationUrl": "https://auth.example.com/authorize",
            "tokenUrl": "https://auth.example.com/token",
            "refreshUrl": "https://auth.example.com/refresh",
            "scopes": {"calc:run": "Run calculations"},
            "pkceRequired": true
        })
    );
    assert_eq!(
        json["securityRequirements"],
        json!([
            {"schemes": {"apiKey": {}}},
            {"schemes": {"bearer": {}}},
            {"schemes": {"google": {"list": ["openid", "email"]}, "mtls": {}}}
        ])
    );
    let calc = card.skill("calculate.requested").unwrap();
    assert_eq!(calc.examples.len(), 2);
    assert_eq!(calc.input_modes, ["application/json", "text/plain"]);
    let convert = card.skill("convert.requested").unwrap();
    assert_eq!(convert.output_modes, ["application/json"]);
    assert_eq!(
        serde_json::to_value(&convert.security_requirements).unwrap(),
        json!([{"schemes": {"oauth": {"list": ["calc:run"]}}}])
    );

    // The helpers do not repeat themselves.
    let def = calculator();
    let card = CardBuilder::new(&def, URL)
        .with_api_key("X-API-Key")
        .with_api_key("X-API-Key")
        .build()
        .unwrap();
    assert_eq!(card.security_requirements.len(), 1);

    let card = CardBuilder::new(&def, URL)
        .with_streaming(false)
        .with_push_notifications(true)
        .with_default_input_modes(["text/plain"])
        .with_default_output_modes(["text/plain"])
        .build()
        .unwrap();
    assert_eq!(card.capabilities.streaming, Some(false));
    assert_eq!(card.capabilities.push_notifications, Some(true));
    assert_eq!(card.default_input_modes, ["text/plain"]);
    assert_eq!(card.default_output_modes, ["text/plain"]);
}

#[test]
fn builder_and_validate_report_invalid_cards() {
    let def = calculator();
    assert_eq!(
        CardBuilder::new(&def, URL)
            .with_skill_examples("calculate", ["x"])
            .build(),
        Err(CardError::UnknownSkill {
            id: "calculate".into()
        })
    );
    assert_eq!(
        CardBuilder::new(&def, "").build(),
        Err(CardError::MissingRequired {
            field: "supportedInterfaces[0].url".into()
        })
    );
    assert_eq!(
        CardBuilder::new(&def, URL)
            .with_default_output_modes([] as [&str; 0])
            .build(),
        Err(CardError::MissingRequired {
            field: "defaultOutputModes".into()
        })
    );
    assert_eq!(
        CardBuilder::new(&def, URL)
            .with_security_requirement(SecurityRequirement::new().with_scheme("nope", ["a"]))
            .build(),
        Err(CardError::UndeclaredSecurityScheme {
            scheme: "nope".into(),
            field: "securityRequirements[0]".into()
        })
    );
    assert_eq!(
        CardBuilder::new(&def, URL)
            .with_skill_security_requirement(
                "convert.requested",
                SecurityRequirement::new().with_scheme("nope", ["a"])
            )
            .build(),
        Err(CardError::UndeclaredSecurityScheme {
            scheme: "nope".into(),
            field: "skills[1].securityRequirements[0]".into()
        })
    );
    assert_eq!(
        CardBuilder::new(&def, URL)
            .with_security_scheme("k", SecurityScheme::api_key_header(""))
            .build(),
        Err(CardError::MissingRequired {
            field: "securitySchemes.k.name".into()
        })
    );

    let twice = calculator().with_capability(AgentCapability::new(
        "calculate_again",
        EventDefinition::new("calculate.requested", Topic::ActionRequests),
    ));
    assert_eq!(
        AgentCard::from_definition(&twice, URL),
        Err(CardError::DuplicateSkillId {
            id: "calculate.requested".into()
        })
    );

    let idle = AgentDefinition::new("i", "listener", AgentKind::Agent)
        .with_consumed_event(EventDefinition::new("order.placed", Topic::BusinessFacts));
    assert_eq!(
        AgentCard::from_definition(&idle, URL),
        Err(CardError::MissingRequired {
            field: "skills".into()
        })
    );

    let mut card = full_card();
    card.signatures[0].signature.clear();
    assert_eq!(
        card.validate(),
        Err(CardError::MissingRequired {
            field: "signatures[0].signature".into()
        })
    );
}

// ---------------------------------------------------------------------------------------------
// v0.3.0 rendering against the v0.3.0 JSON Schema.
// ---------------------------------------------------------------------------------------------

/// The v0.3.0 schema document with a root `$ref` to its `AgentCard` definition. With `strict`,
/// every object definition that lists properties also gets `additionalProperties: false`, so a
/// v1-only key (`supportedInterfaces`, `securityRequirements`, ...) fails validation.
fn v0_3_card_schema(strict: bool) -> Value {
    let mut schema: Value = serde_json::from_str(&spec_file("a2a-v0.3.0.schema.json")).unwrap();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    if strict {
        fn close(value: &mut Value) {
            match value {
                Value::Object(obj) => {
                    if obj.contains_key("properties") && !obj.contains_key("additionalProperties") {
                        obj.insert("additionalProperties".into(), Value::Bool(false));
                    }
                    obj.values_mut().for_each(close);
                }
                Value::Array(items) => items.iter_mut().for_each(close),
                _ => {}
            }
        }
        close(&mut schema["definitions"]);
    }
    schema["$ref"] = json!("#/definitions/AgentCard");
    schema
}

fn v0_3_errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn v0_3_rendering_validates_against_the_v0_3_schema() {
    let lenient = jsonschema::draft7::new(&v0_3_card_schema(false)).unwrap();
    let strict = jsonschema::draft7::new(&v0_3_card_schema(true)).unwrap();
    let sample: AgentCard = serde_json::from_value(spec_sample_card()).unwrap();
    let cards = [
        ("full", full_card()),
        (
            "calculator",
            AgentCard::from_definition(&calculator(), URL).unwrap(),
        ),
        (
            "minimal",
            AgentCard::from_definition(&minimal(), URL).unwrap(),
        ),
        ("spec sample", sample),
    ];
    for (label, card) in &cards {
        let json = serde_json::to_value(card.to_v0_3()).unwrap();
        for validator in [&lenient, &strict] {
            let errors = v0_3_errors(validator, &json);
            assert!(errors.is_empty(), "{label}: {errors:#?}\n{json:#}");
        }
        assert_eq!(json["protocolVersion"], "0.3.0");
    }
}

#[test]
fn v0_3_schema_rejects_v1_cards_and_broken_renderings() {
    // Guards against a validator that accepts everything.
    let strict = jsonschema::draft7::new(&v0_3_card_schema(true)).unwrap();
    let lenient = jsonschema::draft7::new(&v0_3_card_schema(false)).unwrap();
    let v1 = serde_json::to_value(full_card()).unwrap();
    assert!(
        !lenient.is_valid(&v1),
        "v1 JSON has no url / protocolVersion"
    );
    let mut v03 = serde_json::to_value(full_card().to_v0_3()).unwrap();
    v03["securitySchemes"]["apiKey"]["in"] = json!("body");
    assert!(!lenient.is_valid(&v03));
    let mut v03 = serde_json::to_value(full_card().to_v0_3()).unwrap();
    v03["supportedInterfaces"] = json!([]);
    assert!(lenient.is_valid(&v03) && !strict.is_valid(&v03));
}

#[test]
fn v0_3_rendering_maps_v1_fields() {
    let json = serde_json::to_value(full_card().to_v0_3()).unwrap();
    // The interface declared for 0.3 is the one 0.3 clients are sent to.
    assert_eq!(
        json["url"],
        "https://agents.example.com/calculator/a2a/v0.3"
    );
    assert_eq!(json["preferredTransport"], "JSONRPC");
    assert_eq!(
        json["additionalInterfaces"],
        json!([{"url": "https://agents.example.com/calculator/a2a/v0.3", "transport": "JSONRPC"}])
    );
    assert_eq!(json["supportsAuthenticatedExtendedCard"], true);
    assert!(json["capabilities"].get("extendedAgentCard").is_none());
    assert_eq!(
        json["securitySchemes"]["apiKey"],
        json!({"type": "apiKey", "in": "header", "name": "X-API-Key"})
    );
    assert_eq!(
        json["securitySchemes"]["bearer"],
        json!({"type": "http", "scheme": "Bearer"})
    );
    assert_eq!(
        json["securitySchemes"]["google"],
        json!({
            "type": "openIdConnect",
            "description": "Google accounts",
            "openIdConnectUrl": "https://accounts.google.com/.well-known/openid-configuration"
        })
    );
    assert_eq!(
        json["securitySchemes"]["mtls"],
        json!({"type": "mutualTLS", "description": "Client certificates"})
    );
    assert_eq!(
        json["securitySchemes"]["oauth"],
        json!({
            "type": "oauth2",
            "flows": {"authorizationCode": {
                "authorizationUrl": "https://auth.example.com/authorize",
                "tokenUrl": "https://auth.example.com/token",
                "refreshUrl": "https://auth.example.com/refresh",
                "scopes": {"calc:run": "Run calculations"}
            }},
            "oauth2MetadataUrl": "https://auth.example.com/.well-known/oauth-authorization-server"
        })
    );
    assert_eq!(
        json["securitySchemes"]["machines"]["flows"],
        json!({"clientCredentials": {
            "tokenUrl": "https://auth.example.com/token",
            "scopes": {"calc:run": "Run calculations"}
        }})
    );
    assert_eq!(
        json["securitySchemes"]["devices"],
        json!({"type": "oauth2", "flows": {}})
    );
    assert_eq!(
        json["security"],
        json!([{"apiKey": []}, {"bearer": []}, {"google": ["openid", "email"], "mtls": []}])
    );
    assert_eq!(
        json["skills"][1]["security"],
        json!([{"oauth": ["calc:run"]}])
    );
    assert_eq!(json["skills"][0]["examples"][0], "What is 2 * (3 + 4)?");
    assert_eq!(
        json["capabilities"]["extensions"][1]["uri"],
        SKILL_SCHEMAS_EXTENSION_URI
    );
    assert_eq!(json["signatures"][0]["header"]["kid"], "key-1");

    // Without a 0.3 interface, the interfaces are used as declared.
    let card = AgentCard::from_definition(&calculator(), URL).unwrap();
    let json = serde_json::to_value(card.to_v0_3()).unwrap();
    assert_eq!(json["url"], URL);
    assert_eq!(
        json["additionalInterfaces"],
        json!([{"url": URL, "transport": "JSONRPC"}])
    );
    assert!(json.get("supportsAuthenticatedExtendedCard").is_none());
    assert!(json.get("security").is_none() && json.get("securitySchemes").is_none());
}
