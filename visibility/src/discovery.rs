//! Discovery and OpenAPI of the group, what the aggregation layer reads to
//! let `kubectl get pendingunits` and client libraries find the resources.

use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::history::History;
use crate::types::{
    API_VERSION, GROUP, PendingUnit, PendingUnitList, QuotaUsage, QuotaUsageList, VERSION,
};

/// A resource of the group, as discovery lists it.
struct Resource {
    name: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
    short_names: &'static [&'static str],
}

/// The resources: a namespace's waiting units (`pendingunits`, every
/// namespace's with `-A`), a Queue's backlog (`queues/pendingunits`, in the
/// system namespace), the quotas serving a namespace (`quotausages`), their
/// history (`histories`).
const RESOURCES: [Resource; 4] = [
    Resource {
        name: "pendingunits",
        kind: "PendingUnit",
        verbs: &["list"],
        short_names: &["pu"],
    },
    Resource {
        name: "queues/pendingunits",
        kind: "PendingUnit",
        verbs: &["get"],
        short_names: &[],
    },
    Resource {
        name: "quotausages",
        kind: "QuotaUsage",
        verbs: &["list"],
        short_names: &["qusage"],
    },
    Resource {
        name: "histories",
        kind: "History",
        verbs: &["list"],
        short_names: &[],
    },
];

/// `GET /apis`: the one group this server serves.
pub fn group_list() -> Value {
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [group_body()] })
}

/// `GET /apis/<group>`.
pub fn group() -> Value {
    let mut body = group_body();
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    body
}

fn group_body() -> Value {
    let version = json!({ "groupVersion": API_VERSION, "version": VERSION });
    json!({ "name": GROUP, "versions": [version.clone()], "preferredVersion": version })
}

/// `GET /apis/<group>/<version>`.
pub fn resource_list() -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(|r| {
            json!({
                "name": r.name, "singularName": "", "namespaced": true, "kind": r.kind,
                "verbs": r.verbs, "shortNames": r.short_names, "categories": ["koord-queue"],
            })
        })
        .collect();
    json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": resources })
}

/// The JSON schema of `T` as definition `name`, its own definitions moved
/// beside it (OpenAPI has one flat list of them).
fn schema_of<T: JsonSchema>(name: &str, kind: &str, defs: &mut serde_json::Map<String, Value>) {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let Some(Value::Object(inner)) = schema.as_object_mut().and_then(|o| o.remove("$defs")) {
        for (k, v) in inner {
            // A list's item is a definition of its own too: keep the one
            // that carries its kind.
            defs.entry(format!("{GROUP}.{VERSION}.{k}")).or_insert(v);
        }
    }
    if let Some(o) = schema.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
        o.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{ "group": GROUP, "version": VERSION, "kind": kind }]),
        );
    }
    defs.insert(format!("{GROUP}.{VERSION}.{name}"), schema);
}

/// The schemas of the group's objects, referring to each other by `prefix`.
fn definitions(prefix: &str) -> Value {
    let mut defs = serde_json::Map::new();
    schema_of::<PendingUnit>("PendingUnit", "PendingUnit", &mut defs);
    schema_of::<PendingUnitList>("PendingUnitList", "PendingUnitList", &mut defs);
    schema_of::<QuotaUsage>("QuotaUsage", "QuotaUsage", &mut defs);
    schema_of::<QuotaUsageList>("QuotaUsageList", "QuotaUsageList", &mut defs);
    schema_of::<History>("History", "History", &mut defs);
    let text = Value::Object(defs)
        .to_string()
        .replace("\"#/$defs/", &format!("\"{prefix}{GROUP}.{VERSION}."));
    serde_json::from_str(&text).unwrap_or_default()
}

/// The read paths and what each answers.
fn paths(reference: impl Fn(&str) -> Value) -> Value {
    let base = format!("/apis/{API_VERSION}");
    let ok = |kind: &str, what: &str| {
        json!({ "get": {
            "description": what,
            "operationId": format!("list{kind}"),
            "parameters": [
                { "name": "limit", "in": "query", "type": "integer", "schema": { "type": "integer" },
                  "description": "Items at most." },
                { "name": "offset", "in": "query", "type": "integer", "schema": { "type": "integer" },
                  "description": "Items skipped." },
            ],
            "responses": { "200": { "description": "OK", "schema": reference(kind),
                "content": { "application/json": { "schema": reference(kind) } } } },
        }})
    };
    json!({
        format!("{base}/pendingunits"): ok("PendingUnitList", "Waiting units of every namespace."),
        format!("{base}/namespaces/{{namespace}}/pendingunits"): ok("PendingUnitList", "Waiting units of a namespace, by queue and position."),
        format!("{base}/namespaces/{{namespace}}/queues/{{name}}/pendingunits"): ok("PendingUnitList", "A Queue's backlog in serving order."),
        format!("{base}/quotausages"): ok("QuotaUsageList", "Every ElasticQuota's figures, parents first."),
        format!("{base}/namespaces/{{namespace}}/quotausages"): ok("QuotaUsageList", "The quotas serving a namespace and their ancestors."),
        format!("{base}/histories"): ok("History", "The scheduler's samples of the last hours: every quota and queue."),
        format!("{base}/namespaces/{{namespace}}/histories"): ok("History", "The samples of the quotas serving a namespace, their ancestors and their queues."),
    })
}

/// `GET /openapi/v2`.
pub fn openapi_v2() -> Value {
    let prefix = "#/definitions/";
    json!({
        "swagger": "2.0",
        "info": { "title": "Koord-Queue visibility", "version": VERSION },
        "paths": paths(|kind| json!({ "$ref": format!("{prefix}{GROUP}.{VERSION}.{kind}") })),
        "definitions": definitions(prefix),
    })
}

/// `GET /openapi/v3`: where the group's document is.
pub fn openapi_v3_index() -> Value {
    json!({ "paths": { format!("apis/{API_VERSION}"): {
        "serverRelativeURL": format!("/openapi/v3/apis/{API_VERSION}") } } })
}

/// `GET /openapi/v3/apis/<group>/<version>`.
pub fn openapi_v3() -> Value {
    let prefix = "#/components/schemas/";
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Koord-Queue visibility", "version": VERSION },
        "paths": paths(|kind| json!({ "$ref": format!("{prefix}{GROUP}.{VERSION}.{kind}") })),
        "components": { "schemas": definitions(prefix) },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_reference_of_the_openapi_documents_resolves() {
        for (doc, defs_at) in [
            (openapi_v2(), vec!["definitions"]),
            (openapi_v3(), vec!["components", "schemas"]),
        ] {
            let defs = defs_at.iter().fold(&doc, |v, k| &v[*k]);
            let text = doc.to_string();
            let refs: Vec<&str> = text
                .split("\"$ref\":\"")
                .skip(1)
                .map(|s| s.split('"').next().unwrap())
                .collect();
            assert!(refs.len() > 5, "{refs:?}");
            for r in refs {
                let name = r.rsplit('/').next().unwrap();
                assert!(defs.get(name).is_some(), "{r} does not resolve");
            }
            let unit = &defs[format!("{GROUP}.{VERSION}.PendingUnit")];
            assert_eq!(
                unit["x-kubernetes-group-version-kind"][0]["kind"],
                "PendingUnit"
            );
        }
    }

    #[test]
    fn discovery_lists_the_four_resources() {
        let list = resource_list();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "pendingunits",
                "queues/pendingunits",
                "quotausages",
                "histories"
            ]
        );
        assert_eq!(
            group_list()["groups"][0]["preferredVersion"]["groupVersion"],
            API_VERSION
        );
    }
}
