//! A minimal OpenAPI 3.1 document of the paid routes.

use serde_json::{json, Map, Value};

use super::{bazaar, PricingKind, RouteDescription};

/// The `info` object of the OpenAPI document.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenApiInfo {
    /// The API's title.
    pub title: String,
    /// The API's version (not the OpenAPI version).
    pub version: String,
    /// A description.
    pub description: Option<String>,
}

impl OpenApiInfo {
    /// An `info` with a title and version.
    pub fn new(title: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            version: version.into(),
            description: None,
        }
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// The methods an any-method route is listed under.
const ANY_METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// `/weather/:city` → `/weather/{city}`.
fn openapi_path(template: &str) -> String {
    let segments: Vec<String> = template
        .split('/')
        .map(|s| match s.strip_prefix(':') {
            Some(name) => format!("{{{name}}}"),
            None => s.to_owned(),
        })
        .collect();
    let path = segments.join("/");
    if path.is_empty() {
        "/".to_owned()
    } else {
        path
    }
}

fn operation_id(method: &str, path: &str, taken: &mut Vec<String>) -> String {
    let mut id = String::from(method);
    for c in path.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c);
        } else if !id.ends_with('_') {
            id.push('_');
        }
    }
    let base = id.trim_end_matches('_').to_owned();
    let mut id = base.clone();
    let mut n = 2;
    while taken.contains(&id) {
        id = format!("{base}_{n}");
        n += 1;
    }
    taken.push(id.clone());
    id
}

/// Query parameters and headers declared in a `bazaar` declaration.
fn bazaar_parameters(decl: &Value, out: &mut Vec<Value>) {
    let input = &decl["info"]["input"];
    let schemas = &decl["schema"]["properties"]["input"]["properties"];
    for (key, location) in [("queryParams", "query"), ("headers", "header")] {
        let Some(params) = input.get(key).and_then(Value::as_object) else {
            continue;
        };
        let required: Vec<&str> = schemas[key]["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, example) in params {
            let schema = match schemas[key]["properties"].get(name) {
                Some(s) if s.is_object() => s.clone(),
                _ => json!({}),
            };
            out.push(json!({
                "name": name,
                "in": location,
                "required": required.contains(&name.as_str()),
                "schema": schema,
                "example": example,
            }));
        }
    }
}

fn operation(route: &RouteDescription, method: &str, path: &str, taken: &mut Vec<String>) -> Value {
    let mut op = Map::new();
    op.insert(
        "operationId".into(),
        operation_id(method, path, taken).into(),
    );
    if !route.description.is_empty() {
        op.insert("summary".into(), route.description.clone().into());
    }
    op.insert(
        "description".into(),
        "Paid with x402: a request without payment is answered 402 with the offers in the \
         `PAYMENT-REQUIRED` header; retry with `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1)."
            .into(),
    );
    let mut parameters: Vec<Value> = route
        .path_params
        .iter()
        .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
        .collect();
    if let Some(decl) = route.bazaar() {
        bazaar_parameters(decl, &mut parameters);
        let input = &decl["info"]["input"];
        if let Some(body_type) = input.get("bodyType").and_then(Value::as_str) {
            let media = match body_type {
                "form-data" => bazaar::BodyType::FormData.media_type(),
                "text" => bazaar::BodyType::Text.media_type(),
                _ => bazaar::BodyType::Json.media_type(),
            };
            let schema = match &decl["schema"]["properties"]["input"]["properties"]["body"] {
                s @ Value::Object(_) => s.clone(),
                _ => json!({}),
            };
            op.insert(
                "requestBody".into(),
                json!({ "content": { media: { "schema": schema, "example": input["body"] } } }),
            );
        }
    }
    parameters.push(json!({
        "name": "PAYMENT-SIGNATURE",
        "in": "header",
        "required": false,
        "description": "The x402 v2 payment: base64 of a PaymentPayload JSON.",
        "schema": { "type": "string" }
    }));
    op.insert("parameters".into(), Value::Array(parameters));

    let mut ok = json!({
        "description": "The paid resource. The settlement receipt is in `PAYMENT-RESPONSE` (v2) or `X-PAYMENT-RESPONSE` (v1).",
        "headers": {
            "PAYMENT-RESPONSE": {
                "description": "base64 of the v2 SettleResponse JSON.",
                "schema": { "type": "string" }
            }
        }
    });
    let media = if route.mime_type.is_empty() {
        "application/json"
    } else {
        route.mime_type.as_str()
    };
    let mut content = json!({ "schema": {} });
    if let Some(example) = route
        .bazaar()
        .and_then(|d| d["info"]["output"].get("example"))
    {
        content["example"] = example.clone();
    }
    ok["content"] = json!({ media: content });
    op.insert(
        "responses".into(),
        json!({
            "200": ok,
            "402": {
                "description": "Payment required (or refused). The v2 challenge is in `PAYMENT-REQUIRED`; the body is the v1 challenge.",
                "headers": {
                    "PAYMENT-REQUIRED": {
                        "description": "base64 of the v2 PaymentRequired JSON.",
                        "required": true,
                        "schema": { "type": "string" }
                    }
                },
                "content": {
                    "application/json": {
                        "schema": { "$ref": "#/components/schemas/X402V1Challenge" }
                    }
                }
            }
        }),
    );
    op.insert(
        "x-payment-info".into(),
        json!({
            "x402Version": 2,
            "pricing": route.pricing,
            "settlement": route.settlement,
            "accepts": route.accepts,
            "sessions": route.sessions,
        }),
    );
    Value::Object(op)
}

fn components() -> Value {
    json!({
        "schemas": {
            "X402PaymentRequirements": {
                "type": "object",
                "required": ["scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds"],
                "properties": {
                    "scheme": { "type": "string" },
                    "network": { "type": "string" },
                    "amount": { "type": "string", "pattern": "^[0-9]+$" },
                    "asset": { "type": "string" },
                    "payTo": { "type": "string" },
                    "maxTimeoutSeconds": { "type": "integer", "minimum": 1 },
                    "extra": { "type": "object" }
                }
            },
            "X402V1Challenge": {
                "type": "object",
                "required": ["x402Version", "accepts"],
                "properties": {
                    "x402Version": { "const": 1 },
                    "error": { "type": "string" },
                    "accepts": { "type": "array", "items": { "type": "object" } }
                }
            }
        }
    })
}

/// A minimal OpenAPI 3.1 document of `routes`: one operation per route and
/// method (`:param` → `{param}`, path parameters declared; any-method routes
/// under `get`, `post`, `put`, `patch` and `delete`), query parameters,
/// headers and body from the `bazaar` declaration, a `200` and a `402`
/// response, and `x-payment-info`: `{x402Version, pricing, settlement,
/// accepts, sessions}` with the per-call offers and the session offers as v2
/// requirements. When two routes share a path and method, the first wins, as
/// in the engine.
pub fn openapi(routes: &[RouteDescription], info: &OpenApiInfo, base_url: Option<&str>) -> Value {
    let mut paths = Map::new();
    let mut taken = Vec::new();
    for route in routes {
        let path = openapi_path(&route.route_template);
        let methods: Vec<String> = match &route.method {
            Some(m) => vec![m.to_ascii_lowercase()],
            None => ANY_METHODS.iter().map(|m| (*m).to_owned()).collect(),
        };
        for method in methods {
            let exists = paths
                .get(&path)
                .and_then(Value::as_object)
                .is_some_and(|item| item.contains_key(&method));
            if exists {
                continue;
            }
            let op = operation(route, &method, &path, &mut taken);
            if let Some(item) = paths
                .entry(path.clone())
                .or_insert_with(|| json!({}))
                .as_object_mut()
            {
                item.insert(method, op);
            }
        }
        if route.pricing == PricingKind::Unavailable {
            tracing::debug!(route = %route.path, "x402: offers unavailable for the OpenAPI document");
        }
    }
    let mut info_obj = json!({ "title": info.title, "version": info.version });
    if let Some(d) = &info.description {
        info_obj["description"] = d.clone().into();
    }
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": info_obj,
        "paths": paths,
        "components": components(),
    });
    if let Some(base) = base_url {
        doc["servers"] = json!([{ "url": super::trim_base(base) }]);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(openapi_path("/weather/:city"), "/weather/{city}");
        assert_eq!(openapi_path("/"), "/");
        assert_eq!(openapi_path("/a/:var1/b"), "/a/{var1}/b");
        let mut taken = Vec::new();
        assert_eq!(
            operation_id("get", "/weather/{city}", &mut taken),
            "get_weather_city"
        );
        assert_eq!(
            operation_id("get", "/weather/{city}", &mut taken),
            "get_weather_city_2"
        );
    }
}
