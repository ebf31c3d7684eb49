//! Objects and selectors for the Kubernetes API test server: builders of workloads and pods, label and
//! field selectors, query strings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use axum::http::Uri;
use serde_json::{Value, json};

// ---- builders ----

/// A workload of `resource` (deployments/statefulsets/daemonsets) labelled for `module`, rolled out.
pub(crate) fn workload(
    resource: &str,
    name: &str,
    module: &str,
    containers: &[(&str, &str)],
    replicas: i32,
) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(n, image)| json!({"name": n, "image": image}))
        .collect();
    let template =
        json!({"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}});
    let mut spec = json!({"selector": {"matchLabels": {"app": name}}, "template": template});
    let status = if resource == "daemonsets" {
        json!({"desiredNumberScheduled": replicas, "currentNumberScheduled": replicas, "numberMisscheduled": 0,
            "numberReady": replicas, "numberAvailable": replicas, "updatedNumberScheduled": replicas, "observedGeneration": 1})
    } else {
        spec["replicas"] = json!(replicas);
        if resource == "statefulsets" {
            spec["serviceName"] = json!(name);
        }
        json!({"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
            "updatedReplicas": replicas, "observedGeneration": 1})
    };
    json!({"metadata": {"name": name, "labels": {"jr2.dev/module": module}}, "spec": spec, "status": status})
}

/// A running pod of the workload `app` whose container reports `image_id`.
pub(crate) fn pod(name: &str, app: &str, container: &str, image: &str, image_id: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": container, "image": image}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": container, "image": image, "imageID": image_id,
            "ready": true, "restartCount": 0, "state": {"running": {}}}]}})
}

// ---- selectors and queries ----

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn query(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

pub(crate) fn labels_match(match_labels: &Value, labels: &Value) -> bool {
    match_labels
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// Split a selector on commas outside parentheses.
pub(crate) fn terms(selector: &str) -> Vec<String> {
    let (mut out, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in selector.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

pub(crate) fn label_selector_matches(selector: &str, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    terms(selector).iter().all(|term| {
        let set = |t: &str, op: &str| {
            t.split_once(op).map(|(k, vs)| {
                let values: Vec<String> = vs
                    .trim()
                    .trim_start_matches('(')
                    .trim_end_matches(')')
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .collect();
                (k.trim().to_string(), values)
            })
        };
        if let Some((k, values)) = set(term, " notin ") {
            get(&k).is_none_or(|v| !values.iter().any(|x| x == v))
        } else if let Some((k, values)) = set(term, " in ") {
            get(&k).is_some_and(|v| values.iter().any(|x| x == v))
        } else if let Some((k, v)) = term.split_once("!=") {
            get(k) != Some(v)
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k) == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            get(k).is_none()
        } else {
            get(term).is_some()
        }
    })
}

/// A field selector's terms (`=`, `==`, `!=`; `fields/selector.go`), each over the object's field as text
/// (`source` of an event is its `source.component`, as `pkg/registry/core/event/strategy.go` sets it).
pub(crate) fn field_selector_matches(selector: &str, object: &Value) -> bool {
    terms(selector).iter().all(|term| {
        let (path, expected, equal) = match term.split_once("!=") {
            Some((p, v)) => (p, v, false),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((p, v)) => (p, v, true),
                None => return false,
            },
        };
        let mut value = object;
        for part in path.trim().split('.') {
            value = &value[part];
        }
        if path.trim() == "source" {
            value = &value["component"];
        }
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        (text == expected.trim()) == equal
    })
}
