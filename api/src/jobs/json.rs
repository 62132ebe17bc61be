//! Small helpers to read and edit jobs as JSON: paths, annotations, counts and
//! conditions. Readers report a wrong shape as [`AdapterError::Invalid`] with the
//! JSON path of the field; editors never fail.

use serde_json::{Map, Value};

use super::AdapterError;

/// An [`AdapterError::Invalid`] for the field at `path`.
pub(crate) fn invalid(path: &str, reason: impl Into<String>) -> AdapterError {
    AdapterError::Invalid {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// The value at `path` under `value`; `None` when a step is missing, is not an
/// object, or the value is `null` (Kubernetes treats an explicit `null` as unset).
pub fn get_path<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |v, key| v.as_object()?.get(*key))
        .filter(|v| !v.is_null())
}

/// Sets the value at `path`, creating intermediate objects. An intermediate
/// value that is not an object is replaced by one: the edit must happen (a hold
/// that silently did nothing would let the job run unqueued), and such an object
/// is invalid for its kind anyway.
pub fn set_path(value: &mut Value, path: &[&str], new: Value) {
    let mut current = value;
    for key in path {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        // Always an object here; the `else` only satisfies the type checker.
        let Some(map) = current.as_object_mut() else {
            return;
        };
        current = map.entry(key.to_string()).or_insert(Value::Null);
    }
    *current = new;
}

/// Whether the value at `path` is the JSON boolean `true`.
pub fn is_true(value: &Value, path: &[&str]) -> bool {
    get_path(value, path).and_then(Value::as_bool) == Some(true)
}

/// The string annotation `key` of `job`, if set.
pub fn annotation<'a>(job: &'a Value, key: &str) -> Option<&'a str> {
    get_path(job, &["metadata", "annotations", key]).and_then(Value::as_str)
}

/// Sets annotation `key` of `job` to `value`, creating `metadata.annotations`
/// when missing.
pub fn set_annotation(job: &mut Value, key: &str, value: &str) {
    set_path(
        job,
        &["metadata", "annotations", key],
        Value::String(value.to_string()),
    );
}

/// Removes annotation `key` of `job`. The annotation map itself is kept, even
/// when it becomes empty, so that a patch computed from the edit touches only
/// the key.
pub fn remove_annotation(job: &mut Value, key: &str) {
    if let Some(annotations) = job
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(key);
    }
}

/// The field `key` of `value`, treating `null` as absent.
pub(crate) fn field<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.get(key).filter(|v| !v.is_null())
}

/// Reads an optional object at `path` (for error messages).
pub(crate) fn opt_object<'a>(
    value: Option<&'a Value>,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, AdapterError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(invalid(
            path,
            format!("expected an object, found {}", type_name(other)),
        )),
    }
}

/// Reads an optional array at `path` (for error messages).
pub(crate) fn opt_array<'a>(
    value: Option<&'a Value>,
    path: &str,
) -> Result<&'a [Value], AdapterError> {
    match value {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(invalid(
            path,
            format!("expected an array, found {}", type_name(other)),
        )),
    }
}

/// Reads an optional string at `path` (for error messages).
pub(crate) fn opt_str<'a>(
    value: Option<&'a Value>,
    path: &str,
) -> Result<Option<&'a str>, AdapterError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(
            path,
            format!("expected a string, found {}", type_name(other)),
        )),
    }
}

/// Reads an optional integer at `path`. An integral float such as `2.0` is
/// accepted (it is the same number); a fraction, a string or anything else is
/// refused.
pub(crate) fn opt_i64(value: Option<&Value>, path: &str) -> Result<Option<i64>, AdapterError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                Ok(Some(i))
            } else if n.is_u64() {
                Err(invalid(path, format!("{n} is too large")))
            } else {
                match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
                    _ => Err(invalid(path, format!("expected an integer, found {n}"))),
                }
            }
        }
        Some(other) => Err(invalid(
            path,
            format!("expected an integer, found {}", type_name(other)),
        )),
    }
}

/// Reads an optional pod count at `path`: an integer in `0..=i32::MAX`.
pub(crate) fn opt_count(value: Option<&Value>, path: &str) -> Result<Option<i32>, AdapterError> {
    match opt_i64(value, path)? {
        None => Ok(None),
        Some(n) if n < 0 => Err(invalid(path, format!("must not be negative, found {n}"))),
        Some(n) => i32::try_from(n)
            .map(Some)
            .map_err(|_| invalid(path, format!("{n} is too large"))),
    }
}

/// Reads the pod template at `path`: it must be present and an object.
pub(crate) fn template<'a>(
    value: Option<&'a Value>,
    path: &str,
) -> Result<&'a Value, AdapterError> {
    match value {
        None | Some(Value::Null) => Err(invalid(path, "a pod template is required")),
        Some(v @ Value::Object(_)) => Ok(v),
        Some(other) => Err(invalid(
            path,
            format!("expected a pod template object, found {}", type_name(other)),
        )),
    }
}

/// The non-empty string `spec.priorityClassName` of a pod template.
pub(crate) fn template_priority_class(template: &Value) -> Option<String> {
    non_empty(get_path(template, &["spec", "priorityClassName"]))
}

/// The value as a non-empty string.
pub(crate) fn non_empty(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Whether `status.conditions` has a condition of type `kind` with status `True`.
pub fn condition_true(job: &Value, kind: &str) -> bool {
    get_path(job, &["status", "conditions"])
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// A short name of the JSON type of `value`, for error messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn set_path_creates_and_replaces_intermediates() {
        let mut v = json!({"spec": {"other": 1}});
        set_path(&mut v, &["spec", "runPolicy", "suspend"], json!(true));
        assert_eq!(
            v,
            json!({"spec": {"other": 1, "runPolicy": {"suspend": true}}})
        );
        let mut v = json!({"spec": "bogus"});
        set_path(&mut v, &["spec", "suspend"], json!(true));
        assert_eq!(v, json!({"spec": {"suspend": true}}));
        let mut v = Value::Null;
        set_path(&mut v, &["a"], json!(1));
        assert_eq!(v, json!({"a": 1}));
    }

    #[test]
    fn get_path_treats_null_as_absent() {
        let v = json!({"a": {"b": null, "c": 2}, "d": [1]});
        assert_eq!(get_path(&v, &["a", "b"]), None);
        assert_eq!(get_path(&v, &["a", "c"]), Some(&json!(2)));
        assert_eq!(get_path(&v, &["d", "0"]), None);
        assert_eq!(get_path(&v, &["x", "y"]), None);
    }

    #[test]
    fn annotations_are_created_and_removed() {
        let mut job = json!({"metadata": {"name": "j"}});
        assert_eq!(annotation(&job, "k"), None);
        set_annotation(&mut job, "k", "v");
        assert_eq!(annotation(&job, "k"), Some("v"));
        remove_annotation(&mut job, "k");
        assert_eq!(job, json!({"metadata": {"name": "j", "annotations": {}}}));
        // Removing from a job without annotations does not create the map.
        let mut job = json!({"metadata": {}});
        remove_annotation(&mut job, "k");
        assert_eq!(job, json!({"metadata": {}}));
    }

    #[test]
    fn counts_are_validated() {
        assert_eq!(opt_count(Some(&json!(3)), "p"), Ok(Some(3)));
        assert_eq!(opt_count(Some(&json!(2.0)), "p"), Ok(Some(2)));
        assert_eq!(opt_count(None, "p"), Ok(None));
        assert_eq!(opt_count(Some(&Value::Null), "p"), Ok(None));
        for bad in [
            json!(-1),
            json!(1.5),
            json!("3"),
            json!(true),
            json!(u64::MAX),
            json!(i64::from(i32::MAX) + 1),
        ] {
            let err = opt_count(Some(&bad), "spec.x").unwrap_err();
            assert!(
                matches!(&err, AdapterError::Invalid { path, .. } if path == "spec.x"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn conditions_need_status_true() {
        let job = json!({"status": {"conditions": [
            {"type": "Complete", "status": "False"},
            {"type": "Failed", "status": "True"},
        ]}});
        assert!(!condition_true(&job, "Complete"));
        assert!(condition_true(&job, "Failed"));
        assert!(!condition_true(
            &json!({"status": {"conditions": "x"}}),
            "Failed"
        ));
    }
}
