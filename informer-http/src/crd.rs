//! CustomResourceDefinition manifests generated from Rust types (feature `crd`): the schema of a
//! custom resource's `spec` and `status` comes from their [`schemars::JsonSchema`] derive, made
//! structural as the API server requires (no references, no `$schema` or titles, `nullable` for
//! an `Option`, no `additionalProperties: false`), so the type and its CRD cannot drift apart.
//!
//! ```
//! # use informer_http::{Resource, crd::Crd};
//! #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! struct GreetingSpec {
//!     /// Who to greet.
//!     name: String,
//!     replicas: u32,
//! }
//! #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! struct GreetingStatus {
//!     phase: Option<String>,
//! }
//! let greetings = Resource::new("example.com", "v1", "Greeting", "greetings", true);
//! let crd = Crd::new(&greetings)
//!     .spec::<GreetingSpec>()
//!     .status::<GreetingStatus>()
//!     .short_names(["gr"])
//!     .to_json()
//!     .unwrap();
//! assert_eq!(crd["metadata"]["name"], "greetings.example.com");
//! // For `kubectl apply -f`:
//! let _yaml = informer_http::crd::to_yaml(&crd);
//! ```

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::resource::Resource;

/// A schema a CRD cannot carry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrdError {
    /// The schema is not structural at `path` (a JSON pointer into the schema): a union of
    /// differently shaped types (`oneOf`/`anyOf` other than an `Option`), a type left open, or
    /// a recursive type (a `$ref` that cannot be inlined).
    NotStructural {
        /// Where.
        path: String,
        /// What.
        why: String,
    },
    /// The resource has no group: built-in resources are not defined by CRDs.
    NoGroup,
}

impl std::fmt::Display for CrdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrdError::NotStructural { path, why } => {
                write!(f, "the schema is not structural at {path}: {why}")
            }
            CrdError::NoGroup => f.write_str("a custom resource needs an API group"),
        }
    }
}

impl std::error::Error for CrdError {}

/// A CRD manifest for one resource, built from its spec and status types.
#[derive(Clone, Debug)]
pub struct Crd {
    resource: Resource,
    spec: Option<Value>,
    status: Option<Value>,
    short_names: Vec<String>,
    categories: Vec<String>,
}

impl Crd {
    /// A CRD for `resource` (its group, version, kind, plural and scope).
    pub fn new(resource: &Resource) -> Crd {
        Crd {
            resource: resource.clone(),
            spec: None,
            status: None,
            short_names: Vec::new(),
            categories: Vec::new(),
        }
    }

    /// The CRD of a [`CustomResource`](crate::CustomResource) type (as
    /// [`custom_resource!`](crate::custom_resource) declares one): its resource, spec and status.
    pub fn of<K>() -> Crd
    where
        K: crate::CustomResource,
        K::Spec: JsonSchema,
        K::Status: JsonSchema,
    {
        let crd = Crd::new(&K::resource()).spec::<K::Spec>();
        if K::HAS_STATUS {
            crd.status::<K::Status>()
        } else {
            crd
        }
    }

    /// The `spec`'s type.
    pub fn spec<S: JsonSchema>(mut self) -> Self {
        self.spec = Some(schema_of::<S>());
        self
    }

    /// The `status`'s type; also turns the status subresource on (status is written only
    /// through `/status`, and `metadata.generation` moves only with the spec).
    pub fn status<S: JsonSchema>(mut self) -> Self {
        self.status = Some(schema_of::<S>());
        self
    }

    /// Short names for `kubectl get`.
    pub fn short_names<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.short_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Categories (`kubectl get all` lists the `all` category).
    pub fn categories<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.categories = names.into_iter().map(Into::into).collect();
        self
    }

    /// The manifest (`apiextensions.k8s.io/v1`), or why the types cannot make one.
    pub fn to_json(&self) -> Result<Value, CrdError> {
        let r = &self.resource;
        if r.group.is_empty() {
            return Err(CrdError::NoGroup);
        }
        let mut properties = Map::new();
        let mut required = Vec::new();
        if let Some(spec) = &self.spec {
            properties.insert("spec".into(), structural(spec.clone(), "/spec")?);
            required.push("spec");
        }
        if let Some(status) = &self.status {
            properties.insert("status".into(), structural(status.clone(), "/status")?);
        }
        let mut version = json!({
            "name": r.version,
            "served": true,
            "storage": true,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": properties,
                "required": required,
            }},
        });
        if self.status.is_some() {
            version["subresources"] = json!({"status": {}});
        }
        let mut names = json!({
            "kind": r.kind,
            "listKind": format!("{}List", r.kind),
            "plural": r.plural,
            "singular": r.kind.to_lowercase(),
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            names["categories"] = json!(self.categories);
        }
        Ok(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", r.plural, r.group)},
            "spec": {
                "group": r.group,
                "names": names,
                "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [version],
            },
        }))
    }
}

/// A manifest as YAML, for `kubectl apply -f`.
pub fn to_yaml(manifest: &Value) -> String {
    serde_norway::to_string(manifest).unwrap_or_default()
}

/// `T`'s schema, every subschema inlined, `Option`s as `nullable` (OpenAPI 3.0).
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// `schema` made structural (see the module), or where it cannot be.
fn structural(schema: Value, path: &str) -> Result<Value, CrdError> {
    let not = |why: &str| CrdError::NotStructural {
        path: path.to_string(),
        why: why.into(),
    };
    let Value::Object(mut m) = schema else {
        return match schema {
            // `true`: anything goes.
            Value::Bool(true) => Ok(json!({"x-kubernetes-preserve-unknown-fields": true})),
            _ => Err(not("a schema that accepts nothing")),
        };
    };
    for drop in [
        "$schema",
        "title",
        "$defs",
        "definitions",
        "$id",
        "examples",
    ] {
        m.remove(drop);
    }
    if m.contains_key("$ref") {
        return Err(not("a recursive type"));
    }
    // `type: [T, "null"]` (JSON Schema's Option): T, nullable.
    if let Some(Value::Array(types)) = m.get("type") {
        let non_null: Vec<Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .cloned()
            .collect();
        if non_null.len() != 1 {
            return Err(not("a value of several types"));
        }
        if non_null.len() < types.len() {
            m.insert("nullable".into(), Value::Bool(true));
        }
        m.insert("type".into(), non_null[0].clone());
    }
    // `anyOf: [S, {null}]` or `oneOf` with one branch besides null: S, nullable.
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = m.remove(union) {
            let (nulls, rest): (Vec<Value>, Vec<Value>) = branches.into_iter().partition(|b| {
                b.get("type").and_then(Value::as_str) == Some("null")
                    || b.get("nullable") == Some(&Value::Bool(true)) && b.get("type").is_none()
            });
            if rest.len() != 1 {
                return Err(not(
                    "a union of differently shaped types (an enum with data: use a struct)",
                ));
            }
            let Value::Object(inner) =
                structural(rest.into_iter().next().unwrap_or_default(), path)?
            else {
                return Err(not("a union branch that is not a schema"));
            };
            for (k, v) in inner {
                m.entry(k).or_insert(v);
            }
            if !nulls.is_empty() {
                m.insert("nullable".into(), Value::Bool(true));
            }
        }
    }
    if m.contains_key("allOf") || m.contains_key("not") {
        return Err(not("allOf or not"));
    }
    // `additionalProperties: false` (`deny_unknown_fields`): the API server prunes unknown
    // fields anyway, and a structural schema may not say it.
    if m.get("additionalProperties") == Some(&Value::Bool(false)) {
        m.remove("additionalProperties");
    }
    if let Some(Value::Object(props)) = m.remove("properties") {
        let mut out = Map::new();
        for (name, sub) in props {
            out.insert(name.clone(), structural(sub, &format!("{path}/{name}"))?);
        }
        m.insert("properties".into(), Value::Object(out));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = m.remove(key) {
            let sub = match sub {
                Value::Bool(b) => Value::Bool(b),
                s => structural(s, &format!("{path}/{key}"))?,
            };
            m.insert(key.into(), sub);
        }
    }
    match m.get("type").and_then(Value::as_str) {
        Some(_) => {}
        None if m.contains_key("x-kubernetes-preserve-unknown-fields")
            || m.contains_key("x-kubernetes-int-or-string") => {}
        // A `serde_json::Value` field: any JSON, kept as sent.
        None if m
            .keys()
            .all(|k| k == "description" || k == "nullable" || k == "default") =>
        {
            m.insert(
                "x-kubernetes-preserve-unknown-fields".into(),
                Value::Bool(true),
            );
        }
        None => return Err(not("no type")),
    }
    Ok(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Spec {
        /// Who.
        name: String,
        replicas: u32,
        note: Option<String>,
        labels: BTreeMap<String, String>,
        inner: Option<Inner>,
        items: Vec<Inner>,
        mode: Mode,
        anything: serde_json::Value,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        a: i64,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    enum Mode {
        Fast,
        Slow,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    enum WithData {
        A(String),
        B { x: u8 },
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        children: Vec<Tree>,
    }

    fn res() -> Resource {
        Resource::new("example.com", "v1", "Greeting", "greetings", true)
    }

    /// Every subschema inlined, options nullable, nothing the API server refuses, and the
    /// names and scope from the resource.
    #[test]
    fn a_spec_becomes_a_structural_schema() {
        let crd = Crd::new(&res()).spec::<Spec>().to_json().unwrap();
        assert_eq!(crd["spec"]["names"]["singular"], "greeting");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let text = spec.to_string();
        for banned in ["$schema", "$ref", "title", "\"null\"", "anyOf", "oneOf"] {
            assert!(!text.contains(banned), "{banned} in {text}");
        }
        let p = &spec["properties"];
        assert_eq!(p["name"]["description"], "Who.");
        assert_eq!(p["note"], json!({"type": "string", "nullable": true}));
        assert_eq!(p["inner"]["nullable"], true);
        assert_eq!(p["inner"]["properties"]["a"]["type"], "integer");
        assert_eq!(p["labels"]["additionalProperties"]["type"], "string");
        assert_eq!(p["mode"]["enum"], json!(["Fast", "Slow"]));
        assert_eq!(p["anything"]["x-kubernetes-preserve-unknown-fields"], true);
        assert!(crd["spec"]["versions"][0].get("subresources").is_none());
    }

    #[test]
    fn what_cannot_be_structural_is_a_typed_error() {
        let e = Crd::new(&res()).spec::<WithData>().to_json().unwrap_err();
        assert!(matches!(e, CrdError::NotStructural { .. }), "{e}");
        let e = Crd::new(&res()).spec::<Tree>().to_json().unwrap_err();
        assert!(
            matches!(&e, CrdError::NotStructural { why, .. } if why.contains("recursive")),
            "{e}"
        );
        let e = Crd::new(&Resource::CONFIGMAPS).to_json().unwrap_err();
        assert_eq!(e, CrdError::NoGroup);
    }
}

#[cfg(test)]
mod of_tests {
    use super::Crd;
    use serde::{Deserialize, Serialize};

    #[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct WidgetSpec {
        size: u32,
    }
    #[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
    pub struct WidgetStatus {
        ready: bool,
    }

    crate::custom_resource! {
        /// With a status.
        pub struct Widget("example.com", "v1", "widgets", namespaced) {
            spec: WidgetSpec,
            status: WidgetStatus,
        }
    }
    crate::custom_resource! {
        /// Without one, cluster-scoped.
        pub struct Plain("example.com", "v1alpha1", "plains", cluster) { spec: WidgetSpec }
    }

    #[test]
    fn a_custom_resource_declares_its_crd() {
        let of = Crd::of::<Widget>().to_json().unwrap();
        let by_hand = Crd::new(&crate::Resource::new(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            true,
        ))
        .spec::<WidgetSpec>()
        .status::<WidgetStatus>()
        .to_json()
        .unwrap();
        assert_eq!(of, by_hand);
        assert_eq!(
            of["spec"]["versions"][0]["subresources"]["status"],
            serde_json::json!({})
        );

        let plain = Crd::of::<Plain>().to_json().unwrap();
        assert_eq!(plain["spec"]["scope"], "Cluster");
        assert_eq!(plain["spec"]["names"]["kind"], "Plain");
        assert!(plain["spec"]["versions"][0]["subresources"]["status"].is_null());
        let schema = &plain["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        assert!(schema.get("status").is_none(), "{schema}");
    }
}
