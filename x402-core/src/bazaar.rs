//! The `bazaar` extension (spec §8.1): how a paid route is called and what
//! it answers, so facilitators can catalogue it and agents can call it.
//!
//! Declare it with [`Route::bazaar`](crate::Route::bazaar) and a typed
//! [`Bazaar`]; the engine puts `extensions["bazaar"] = {info, schema}` in the
//! v2 challenge and enriches it for each request: `info.input.method` becomes
//! the request's verb (and the schema's `method.enum` is narrowed to it); on a
//! parameterised route the top-level `routeTemplate` (`:param` syntax) and
//! `info.input.pathParams` (the concrete values) are added, with `pathParams`
//! added to the schema too, since `input` allows no other properties.
//!
//! ```
//! use serde_json::json;
//! use x402_core::discovery::Bazaar;
//! use x402_core::route::{Offer, Route};
//!
//! let route = Route::get("/weather/:city")
//!     .offer(Offer::exact("eip155:84532", "$0.001", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"))
//!     .bazaar(
//!         Bazaar::http()
//!             .query_param("units", "metric")
//!             .output_example(json!({ "city": "paris", "celsius": 21 })),
//!     );
//! # let _ = route;
//! ```

use http::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::proto::JsonObject;

/// The extension key.
pub const BAZAAR: &str = "bazaar";

/// The JSON Schema dialect of the declaration's `schema`.
pub const JSON_SCHEMA_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Verbs whose input travels in the query string.
pub const QUERY_METHODS: [&str; 3] = ["GET", "HEAD", "DELETE"];
/// Verbs whose input travels in the body.
pub const BODY_METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];

/// How a body-method request's body is encoded (`info.input.bodyType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BodyType {
    /// `json`.
    Json,
    /// `form-data`.
    FormData,
    /// `text`.
    Text,
}

impl BodyType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::FormData => "form-data",
            Self::Text => "text",
        }
    }

    /// The media type an OpenAPI request body uses for it.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::FormData => "multipart/form-data",
            Self::Text => "text/plain",
        }
    }
}

/// A declared input parameter (query parameter or header): an example value
/// and the JSON Schema it follows.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// An example value, written into `info`.
    pub example: Value,
    /// Its schema (default: the JSON type of the example).
    pub schema: Value,
    /// Whether a caller must send it.
    pub required: bool,
}

/// `info.input` of an HTTP resource.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BazaarInput {
    /// The verb; filled per request by the engine (and from the route when it
    /// has one method).
    pub method: Option<Method>,
    /// Query parameters, by name.
    pub query_params: Vec<(String, Param)>,
    /// Request headers, by name.
    pub headers: Vec<(String, Param)>,
    /// The body of a body-method (`POST`/`PUT`/`PATCH`) resource: its
    /// encoding, an example, and its schema.
    pub body: Option<(BodyType, Value, Value)>,
}

/// `info.output`: what a paid call answers.
#[derive(Debug, Clone, PartialEq)]
pub struct BazaarOutput {
    /// `json`, `text`, ...
    pub kind: String,
    /// A finer format (`csv`, a media type, ...).
    pub format: Option<String>,
    /// An example response.
    pub example: Option<Value>,
    /// The schema of the example (default: any value).
    pub schema: Option<Value>,
}

impl BazaarOutput {
    /// A JSON response.
    pub fn json() -> Self {
        Self::new("json")
    }

    /// A text response.
    pub fn text() -> Self {
        Self::new("text")
    }

    /// A response of any `type`.
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            format: None,
            example: None,
            schema: None,
        }
    }

    /// Sets the example response.
    #[must_use]
    pub fn example(mut self, example: Value) -> Self {
        self.example = Some(example);
        self
    }

    /// Sets the format.
    #[must_use]
    pub fn format(mut self, format: impl Into<String>) -> Self {
        self.format = Some(format.into());
        self
    }

    /// Sets the JSON Schema of the response.
    #[must_use]
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = Some(schema);
        self
    }
}

/// A typed `bazaar` declaration; see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Default)]
#[must_use]
pub struct Bazaar {
    /// The input.
    pub input: BazaarInput,
    /// The output, if declared.
    pub output: Option<BazaarOutput>,
}

/// The schema of an example value: its JSON type.
fn type_of(example: &Value) -> Value {
    let t = match example {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    json!({ "type": t })
}

impl Bazaar {
    /// An HTTP resource whose input is in the query string (`GET`, `HEAD`,
    /// `DELETE`).
    pub fn http() -> Self {
        Self::default()
    }

    /// An HTTP resource taking a JSON body (`POST`, `PUT`, `PATCH`), with an
    /// example body; its schema is the example's JSON type unless
    /// [`body_schema`](Self::body_schema) sets one.
    pub fn json_body(example: Value) -> Self {
        Self::body(BodyType::Json, example)
    }

    /// An HTTP resource taking a body of `body_type`, with an example.
    pub fn body(body_type: BodyType, example: Value) -> Self {
        let schema = type_of(&example);
        Self {
            input: BazaarInput {
                body: Some((body_type, example, schema)),
                ..BazaarInput::default()
            },
            output: None,
        }
    }

    /// Sets the JSON Schema of the body.
    pub fn body_schema(mut self, schema: Value) -> Self {
        if let Some((_, _, s)) = &mut self.input.body {
            *s = schema;
        }
        self
    }

    /// Declares an optional query parameter with an example value.
    pub fn query_param(self, name: impl Into<String>, example: impl Into<Value>) -> Self {
        let example = example.into();
        let schema = type_of(&example);
        self.query_param_with(
            name,
            Param {
                example,
                schema,
                required: false,
            },
        )
    }

    /// Declares a query parameter with its schema and whether it is required.
    pub fn query_param_with(mut self, name: impl Into<String>, param: Param) -> Self {
        let name = name.into();
        self.input.query_params.retain(|(n, _)| *n != name);
        self.input.query_params.push((name, param));
        self
    }

    /// Declares an optional request header with an example value.
    pub fn header(mut self, name: impl Into<String>, example: impl Into<String>) -> Self {
        let name = name.into();
        let example = Value::String(example.into());
        self.input.headers.retain(|(n, _)| *n != name);
        self.input.headers.push((
            name,
            Param {
                example,
                schema: json!({ "type": "string" }),
                required: false,
            },
        ));
        self
    }

    /// Sets the verb (normally taken from the route and the request).
    pub fn method(mut self, method: Method) -> Self {
        self.input.method = Some(method);
        self
    }

    /// Declares a JSON output with an example.
    pub fn output_example(self, example: Value) -> Self {
        self.output(BazaarOutput::json().example(example))
    }

    /// Declares the output.
    pub fn output(mut self, output: BazaarOutput) -> Self {
        self.output = Some(output);
        self
    }

    fn verbs(&self) -> [&'static str; 3] {
        if self.input.body.is_some() {
            BODY_METHODS
        } else {
            QUERY_METHODS
        }
    }

    /// `info`: `{input, output?}`.
    pub fn info(&self) -> Value {
        let mut input = Map::new();
        input.insert("type".into(), "http".into());
        if let Some(m) = &self.input.method {
            input.insert("method".into(), m.as_str().into());
        }
        let examples = |params: &[(String, Param)]| {
            params
                .iter()
                .map(|(n, p)| (n.clone(), p.example.clone()))
                .collect::<Map<_, _>>()
        };
        if !self.input.query_params.is_empty() {
            input.insert(
                "queryParams".into(),
                Value::Object(examples(&self.input.query_params)),
            );
        }
        if !self.input.headers.is_empty() {
            input.insert(
                "headers".into(),
                Value::Object(examples(&self.input.headers)),
            );
        }
        if let Some((body_type, example, _)) = &self.input.body {
            input.insert("bodyType".into(), body_type.as_str().into());
            input.insert("body".into(), example.clone());
        }
        let mut info = Map::new();
        info.insert("input".into(), Value::Object(input));
        if let Some(out) = &self.output {
            let mut o = Map::new();
            o.insert("type".into(), out.kind.clone().into());
            if let Some(f) = &out.format {
                o.insert("format".into(), f.clone().into());
            }
            if let Some(e) = &out.example {
                o.insert("example".into(), e.clone());
            }
            info.insert("output".into(), Value::Object(o));
        }
        Value::Object(info)
    }

    /// `schema`: a JSON Schema (draft 2020-12) of `info`. `input` is required
    /// and allows no undeclared property.
    pub fn schema(&self) -> Value {
        let object = |params: &[(String, Param)]| {
            let props: Map<_, _> = params
                .iter()
                .map(|(n, p)| (n.clone(), p.schema.clone()))
                .collect();
            let required: Vec<&str> = params
                .iter()
                .filter(|(_, p)| p.required)
                .map(|(n, _)| n.as_str())
                .collect();
            let mut o = json!({ "type": "object", "properties": props });
            if !required.is_empty() {
                o["required"] = json!(required);
            }
            o
        };
        let mut props = Map::new();
        props.insert("type".into(), json!({ "type": "string", "const": "http" }));
        let verbs: Vec<&str> = match &self.input.method {
            Some(m) => vec![m.as_str()],
            None => self.verbs().to_vec(),
        };
        props.insert("method".into(), json!({ "type": "string", "enum": verbs }));
        if !self.input.query_params.is_empty() {
            props.insert("queryParams".into(), object(&self.input.query_params));
        }
        if !self.input.headers.is_empty() {
            props.insert("headers".into(), object(&self.input.headers));
        }
        let mut required = vec!["type"];
        if let Some((_, _, schema)) = &self.input.body {
            props.insert(
                "bodyType".into(),
                json!({ "type": "string", "enum": ["json", "form-data", "text"] }),
            );
            props.insert("body".into(), schema.clone());
            required.extend(["bodyType", "body"]);
        }
        let mut schema = json!({
            "$schema": JSON_SCHEMA_2020_12,
            "type": "object",
            "properties": {
                "input": {
                    "type": "object",
                    "properties": props,
                    "required": required,
                    "additionalProperties": false
                }
            },
            "required": ["input"]
        });
        if let Some(out) = &self.output {
            schema["properties"]["output"] = json!({
                "type": "object",
                "properties": {
                    "type": { "type": "string" },
                    "format": { "type": "string" },
                    "example": out.schema.clone().unwrap_or_else(|| json!({}))
                },
                "required": ["type"]
            });
        }
        schema
    }

    /// The declaration: `{"info": ..., "schema": ...}`.
    pub fn declaration(&self) -> Value {
        json!({ "info": self.info(), "schema": self.schema() })
    }
}

/// Whether a `routeTemplate` passes the facilitators' check (spec §8.1):
/// non-empty, starts with `/`, only `[a-zA-Z0-9_/:.\-~%]`, and no `..` nor
/// `://` once percent-decoded.
pub fn is_valid_route_template(template: &str) -> bool {
    if !template.starts_with('/') || template.len() < 2 {
        return false;
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_/:.-~%".contains(c);
    if !template.chars().all(allowed) {
        return false;
    }
    let decoded = crate::route::percent_decode(template);
    !decoded.contains("..") && !decoded.contains("://")
}

fn object_at<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut JsonObject> {
    let mut v = value;
    for key in path {
        v = v.as_object_mut()?.get_mut(*key)?;
    }
    v.as_object_mut()
}

/// Enriches a `bazaar` declaration for one request (spec §8.1): sets
/// `info.input.method` to `method` and narrows the schema's `method.enum`;
/// with path parameters, adds `info.input.pathParams` (and its schema) and,
/// when `route_template` [is valid](is_valid_route_template), the top-level
/// `routeTemplate`. Declarations whose input is not `type: "http"` are
/// returned unchanged. Works on hand-written declarations too: missing schema
/// parts are left alone.
pub fn enrich(
    declaration: &Value,
    method: &Method,
    route_template: Option<&str>,
    path_params: &[(String, String)],
) -> Value {
    let mut out = declaration.clone();
    let Some(input) = object_at(&mut out, &["info", "input"]) else {
        return out;
    };
    if input
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "http")
    {
        return out;
    }
    input.insert("method".into(), method.as_str().into());
    if !path_params.is_empty() {
        let values: Map<_, _> = path_params
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        input.insert("pathParams".into(), Value::Object(values));
    }
    if let Some(props) = object_at(&mut out, &["schema", "properties", "input", "properties"]) {
        props.insert(
            "method".into(),
            json!({ "type": "string", "enum": [method.as_str()] }),
        );
        if !path_params.is_empty() {
            let names: Vec<&str> = path_params.iter().map(|(k, _)| k.as_str()).collect();
            let properties: Map<_, _> = names
                .iter()
                .map(|k| ((*k).to_owned(), json!({ "type": "string" })))
                .collect();
            props.insert(
                "pathParams".into(),
                json!({
                    "type": "object",
                    "properties": properties,
                    "required": names,
                    "additionalProperties": false
                }),
            );
        }
    }
    if !path_params.is_empty() {
        if let (Some(t), Some(obj)) = (
            route_template.filter(|t| is_valid_route_template(t)),
            out.as_object_mut(),
        ) {
            obj.insert("routeTemplate".into(), t.into());
        }
    }
    out
}

impl crate::route::Route {
    /// Declares the `bazaar` discovery extension (spec §8.1) from a typed
    /// [`Bazaar`]: `extensions["bazaar"] = {info,
    /// schema}`, with the route's method. The engine enriches it for each
    /// request (method, `routeTemplate`, `pathParams`); see
    /// [`bazaar`](crate::bazaar).
    #[must_use]
    pub fn bazaar(self, bazaar: Bazaar) -> Self {
        let bazaar = match &self.method {
            Some(m) if bazaar.input.method.is_none() => bazaar.method(m.clone()),
            _ => bazaar,
        };
        let declaration = bazaar.declaration();
        self.extension(BAZAAR, declaration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_templates() {
        assert!(is_valid_route_template("/weather/:city"));
        assert!(is_valid_route_template("/a/:var1/b~x.y-z_%20"));
        for bad in [
            "",
            "/",
            "weather",
            "/a b",
            "/a/../b",
            "/a/%2e%2e/b",
            "/x/http%3A%2F%2Fevil",
            "/a/{id}",
            "/a?b",
        ] {
            assert!(!is_valid_route_template(bad), "{bad}");
        }
    }

    #[test]
    fn enrichment_sets_method_params_and_template() {
        let d = Bazaar::http().query_param("units", "metric").declaration();
        let e = enrich(
            &d,
            &Method::HEAD,
            Some("/weather/:city"),
            &[("city".into(), "paris".into())],
        );
        assert_eq!(e["info"]["input"]["method"], "HEAD");
        assert_eq!(e["info"]["input"]["pathParams"]["city"], "paris");
        assert_eq!(
            e["schema"]["properties"]["input"]["properties"]["method"]["enum"],
            json!(["HEAD"])
        );
        assert_eq!(
            e["schema"]["properties"]["input"]["properties"]["pathParams"]["required"],
            json!(["city"])
        );
        assert_eq!(e["routeTemplate"], "/weather/:city");
        let e = enrich(
            &d,
            &Method::GET,
            Some("/weather/../x"),
            &[("city".into(), "p".into())],
        );
        assert!(e.get("routeTemplate").is_none());
        let e = enrich(&d, &Method::GET, Some("/weather"), &[]);
        assert!(e.get("routeTemplate").is_none());
        assert!(e["info"]["input"].get("pathParams").is_none());
        assert_eq!(
            enrich(&json!({"info": 1}), &Method::GET, None, &[]),
            json!({"info": 1})
        );
    }
}
