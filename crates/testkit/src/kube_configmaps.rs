//! `/api/v1/namespaces/{ns}/configmaps` of the Kubernetes API test server, as the apiserver answers it:
//! - create (POST): a name that exists is 409 AlreadyExists, a namespace that does not exist 404 (the
//!   generic registry, `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`, and the
//!   NamespaceLifecycle admission);
//! - validation (`pkg/apis/core/validation/validation.go`): ValidateConfigMap refuses data whose keys and
//!   values (data and binaryData) total over `core.MaxSecretSize` = 1 MiB, 422 `[]: Too long`; the object's
//!   annotations over 262144 bytes are refused as for any object (`staging/src/k8s.io/apimachinery/pkg/api/
//!   validation/objectmeta.go`, TotalAnnotationSizeLimitB); ValidateConfigMapUpdate refuses, once
//!   `immutable` is set, any change of data or binaryData and unsetting `immutable`, 422 `data: Forbidden:
//!   field is immutable when `immutable` is set`;
//! - update (PUT) with a stale resourceVersion is 409 Conflict; delete of a missing name 404, a
//!   delete whose preconditions (uid, resourceVersion) do not hold 409 Conflict;
//! - a list asked for as `PartialObjectMetadataList` (the Accept header kube's `list_metadata` sends)
//!   carries only each item's metadata (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go`,
//!   asPartialObjectMetadataList).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Key, State, conflict, kube_rules, list, ok_json, status};

/// `core.MaxSecretSize`, the most a ConfigMap's data may hold (`pkg/apis/core/types.go`).
pub(super) const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

fn data_bytes(object: &Value) -> usize {
    ["data", "binaryData"]
        .iter()
        .filter_map(|field| object[*field].as_object())
        .flat_map(|m| m.iter())
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum()
}

/// ValidateConfigMap (and the object's annotations): the errors, in the apiserver's words.
fn validate(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(error) = kube_rules::annotations_too_long(object) {
        errors.push(error);
    }
    if data_bytes(object) > MAX_CONFIG_MAP_BYTES {
        errors.push(format!(
            "[]: Too long: must have at most {MAX_CONFIG_MAP_BYTES} bytes"
        ));
    }
    errors
}

/// ValidateConfigMapUpdate's immutability rules.
pub(super) fn validate_update(old: &Value, new: &Value) -> Vec<String> {
    const IMMUTABLE: &str = "Forbidden: field is immutable when `immutable` is set";
    let mut errors = Vec::new();
    if old["immutable"] == json!(true) {
        if new["immutable"] != json!(true) {
            errors.push(format!("immutable: {IMMUTABLE}"));
        }
        if new["data"] != old["data"] {
            errors.push(format!("data: {IMMUTABLE}"));
        }
        if new["binaryData"] != old["binaryData"] {
            errors.push(format!("binaryData: {IMMUTABLE}"));
        }
    }
    errors.extend(validate(new));
    errors
}

fn invalid(name: &str, errors: &[String]) -> Response {
    status(
        422,
        "Invalid",
        &kube_rules::invalid_message("ConfigMap", name, errors),
    )
}

fn not_found(name: &str) -> Response {
    status(404, "NotFound", &format!("configmaps \"{name}\" not found"))
}

pub(super) fn configmaps(
    state: &Arc<Mutex<State>>,
    method: &Method,
    ns: &str,
    name: Option<&str>,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let parsed = || serde_json::from_slice::<Value>(body).ok();
    match (method.clone(), name) {
        (Method::GET, None) => {
            let partial = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("as=PartialObjectMetadataList"));
            let response = list(state, "configmaps", ns, q);
            if partial {
                metadata_only(response)
            } else {
                response
            }
        }
        (Method::GET, Some(name)) => {
            let partial = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("as=PartialObjectMetadata"));
            let s = state.lock().unwrap();
            match s
                .cluster
                .objects
                .get(&("configmaps".into(), ns.into(), name.into()))
            {
                Some(object) if partial => ok_json(&json!({"apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata", "metadata": object["metadata"]})),
                Some(object) => ok_json(object),
                None => not_found(name),
            }
        }
        (Method::POST, None) => {
            let Some(mut map) = parsed() else {
                return status(400, "BadRequest", "the configmap is not JSON");
            };
            let Some(name) = map["metadata"]["name"].as_str().map(str::to_string) else {
                return invalid(
                    "",
                    &["metadata.name: Required value: name or generateName is required".into()],
                );
            };
            let errors = validate(&map);
            if !errors.is_empty() {
                return invalid(&name, &errors);
            }
            let mut s = state.lock().unwrap();
            if !s
                .cluster
                .objects
                .contains_key(&("namespaces".into(), String::new(), ns.into()))
            {
                return status(404, "NotFound", &format!("namespaces \"{ns}\" not found"));
            }
            let key: Key = ("configmaps".into(), ns.into(), name.clone());
            if s.cluster.objects.contains_key(&key) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("configmaps \"{name}\" already exists"),
                );
            }
            map["apiVersion"] = json!("v1");
            map["kind"] = json!("ConfigMap");
            map["metadata"]["namespace"] = json!(ns);
            map["metadata"]["uid"] = json!(s.cluster.uid());
            map["metadata"]["creationTimestamp"] = json!(s.cluster.now());
            s.cluster.store(key.clone(), map);
            (
                StatusCode::CREATED,
                [(header::CONTENT_TYPE, "application/json")],
                s.cluster.objects[&key].to_string(),
            )
                .into_response()
        }
        (Method::PUT, Some(name)) => {
            let Some(mut map) = parsed() else {
                return status(400, "BadRequest", "the configmap is not JSON");
            };
            let mut s = state.lock().unwrap();
            let key: Key = ("configmaps".into(), ns.into(), name.into());
            let Some(current) = s.cluster.objects.get(&key).cloned() else {
                return not_found(name);
            };
            let sent = &map["metadata"]["resourceVersion"];
            if !sent.is_null() && *sent != current["metadata"]["resourceVersion"] {
                return conflict("configmaps", name);
            }
            let errors = validate_update(&current, &map);
            if !errors.is_empty() {
                return invalid(name, &errors);
            }
            for field in ["uid", "creationTimestamp", "namespace", "name"] {
                map["metadata"][field] = current["metadata"][field].clone();
            }
            map["apiVersion"] = json!("v1");
            map["kind"] = json!("ConfigMap");
            s.cluster.store(key.clone(), map);
            ok_json(&s.cluster.objects[&key])
        }
        (Method::DELETE, Some(name)) => {
            let mut s = state.lock().unwrap();
            let key: Key = ("configmaps".into(), ns.into(), name.into());
            let Some(current) = s.cluster.objects.get(&key).cloned() else {
                return not_found(name);
            };
            if let Some(refused) = failed_precondition(name, &current, parsed().as_ref()) {
                return refused;
            }
            s.cluster.objects.remove(&key);
            s.cluster.resource_version += 1;
            ok_json(&current)
        }
        _ => status(
            405,
            "MethodNotAllowed",
            &format!(
                "the server does not allow this method on the requested resource ({method} configmaps)"
            ),
        ),
    }
}

/// A delete's preconditions (DeleteOptions.preconditions: uid, resourceVersion) against the object:
/// the generic registry's Delete passes them to the storage (`staging/src/k8s.io/apiserver/pkg/
/// registry/generic/registry/store.go`), whose `Preconditions.Check` (`staging/src/k8s.io/apiserver/
/// pkg/storage/interfaces.go`) fails with an invalid-object error, which `InterpretDeleteError`
/// (`staging/src/k8s.io/apiserver/pkg/storage/errors/storage.go`) answers as 409 Conflict.
fn failed_precondition(name: &str, current: &Value, options: Option<&Value>) -> Option<Response> {
    let preconditions = &options?["preconditions"];
    for (field, path) in [("UID", "uid"), ("ResourceVersion", "resourceVersion")] {
        let wanted = &preconditions[path];
        let have = &current["metadata"][path];
        if !wanted.is_null() && wanted != have {
            let show = |v: &Value| v.as_str().unwrap_or_default().to_string();
            return Some(status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on configmaps \"{name}\": Precondition failed: {field} in precondition: {}, {field} in object meta: {}",
                    show(wanted),
                    show(have)
                ),
            ));
        }
    }
    None
}

/// A list cut to its items' metadata, as `PartialObjectMetadataList`.
fn metadata_only(response: Response) -> Response {
    if response.status() != StatusCode::OK {
        return response;
    }
    let (_, body) = response.into_parts();
    let bytes = futures_util::FutureExt::now_or_never(axum::body::to_bytes(body, usize::MAX))
        .and_then(Result::ok)
        .unwrap_or_default();
    let mut list: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
    let items: Vec<Value> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": i["metadata"]}))
                .collect()
        })
        .unwrap_or_default();
    list["apiVersion"] = json!("meta.k8s.io/v1");
    list["kind"] = json!("PartialObjectMetadataList");
    list["items"] = json!(items);
    ok_json(&list)
}
