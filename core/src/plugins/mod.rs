//! The built-in plugins.

pub mod default_queue;
pub mod elastic_quota;
pub mod priority;
pub mod resource_quota;

use serde_yaml::Value;

/// Refuses any argument for a plugin that takes none.
pub(crate) fn no_args(args: Option<&Value>) -> Result<(), String> {
    match args {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Mapping(m)) if m.is_empty() => Ok(()),
        Some(other) => Err(format!(
            "this plugin takes no arguments, got {}",
            describe(other)
        )),
    }
}

/// The arguments as a map of known keys, refusing other shapes and keys.
pub(crate) fn args_map<'a>(
    args: Option<&'a Value>,
    known: &[&str],
) -> Result<Vec<(&'a str, &'a Value)>, String> {
    let map = match args {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Mapping(m)) => m,
        Some(other) => {
            return Err(format!(
                "expected a map of arguments ({}), got {}",
                known.join(", "),
                describe(other)
            ));
        }
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map {
        let Some(key) = k.as_str() else {
            return Err(format!(
                "argument names must be strings, got {}",
                describe(k)
            ));
        };
        if !known.contains(&key) {
            return Err(format!(
                "unknown argument {key:?} (known: {})",
                known.join(", ")
            ));
        }
        out.push((key, v));
    }
    Ok(out)
}

/// A short description of a YAML value for error messages.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a map".to_string(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}
