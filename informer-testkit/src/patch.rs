//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and the field sets
//! server-side apply keeps per manager.

use serde_json::{Map, Value};

/// Applies a JSON merge patch to `target` (RFC 7386: objects merge, `null` removes, anything
/// else replaces, lists included).
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Why a JSON patch could not be applied.
#[derive(Debug)]
pub(crate) enum JsonPatchError {
    /// Not a list of operations, or an operation malformed.
    Malformed(String),
    /// A `test` failed or a path did not exist.
    Failed(String),
}

/// Applies an RFC 6902 JSON patch (add, remove, replace, move, copy, test) to `target`.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| JsonPatchError::Malformed("a JSON patch is a list of operations".into()))?;
    for op in ops {
        let field = |name: &str| {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| JsonPatchError::Malformed(format!("operation without \"{name}\"")))
        };
        let path = field("path")?;
        match field("op")? {
            "add" => {
                let value = op
                    .get("value")
                    .ok_or_else(|| JsonPatchError::Malformed("add without value".into()))?;
                add(target, path, value.clone())?;
            }
            "remove" => {
                remove(target, path)?;
            }
            "replace" => {
                let value = op
                    .get("value")
                    .ok_or_else(|| JsonPatchError::Malformed("replace without value".into()))?;
                let slot = target.pointer_mut(path).ok_or_else(|| missing(path))?;
                *slot = value.clone();
            }
            "move" => {
                let from = field("from")?;
                let v = remove(target, from)?;
                add(target, path, v)?;
            }
            "copy" => {
                let from = field("from")?;
                let v = target.pointer(from).ok_or_else(|| missing(from))?.clone();
                add(target, path, v)?;
            }
            "test" => {
                let value = op
                    .get("value")
                    .ok_or_else(|| JsonPatchError::Malformed("test without value".into()))?;
                if target.pointer(path) != Some(value) {
                    return Err(JsonPatchError::Failed(format!(
                        "testing value {path} failed"
                    )));
                }
            }
            other => {
                return Err(JsonPatchError::Malformed(format!(
                    "unknown operation \"{other}\""
                )));
            }
        }
    }
    Ok(())
}

fn missing(path: &str) -> JsonPatchError {
    JsonPatchError::Failed(format!("doc is missing path: \"{path}\""))
}

/// The parent of `path` and its last token (unescaped).
fn split(path: &str) -> Result<(&str, String), JsonPatchError> {
    let i = path
        .rfind('/')
        .ok_or_else(|| JsonPatchError::Malformed(format!("bad path \"{path}\"")))?;
    Ok((
        &path[..i],
        path[i + 1..].replace("~1", "/").replace("~0", "~"),
    ))
}

fn add(target: &mut Value, path: &str, value: Value) -> Result<(), JsonPatchError> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match target.pointer_mut(parent).ok_or_else(|| missing(parent))? {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last.parse().map_err(|_| missing(path))?;
                if i > a.len() {
                    return Err(missing(path));
                }
                a.insert(i, value);
            }
        }
        _ => return Err(missing(path)),
    }
    Ok(())
}

fn remove(target: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let (parent, last) = split(path)?;
    match target.pointer_mut(parent).ok_or_else(|| missing(parent))? {
        Value::Object(m) => m.remove(&last).ok_or_else(|| missing(path)),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing(path))?;
            if i >= a.len() {
                return Err(missing(path));
            }
            Ok(a.remove(i))
        }
        _ => Err(missing(path)),
    }
}

/// The leaf paths an applied object sets: object members recursively, lists and scalars as
/// leaves (lists are atomic in this subset of server-side apply). `apiVersion`, `kind`,
/// `metadata.name`, `metadata.namespace` and `metadata.resourceVersion` are not owned.
pub(crate) fn leaf_paths(v: &Value) -> Vec<Vec<String>> {
    fn walk(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    prefix.push(k.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => out.push(prefix.clone()),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out.retain(|p| {
        let p: Vec<&str> = p.iter().map(String::as_str).collect();
        !matches!(
            p.as_slice(),
            ["apiVersion"]
                | ["kind"]
                | ["metadata", "name"]
                | ["metadata", "namespace"]
                | ["metadata", "resourceVersion"]
                | ["metadata", "uid"]
                | ["metadata", "managedFields", ..]
                | ["metadata", "creationTimestamp"]
        )
    });
    out
}

/// Leaf paths as a `fieldsV1` tree (`{"f:data":{"f:message":{}}}`).
pub(crate) fn fields_v1(paths: &[Vec<String>]) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut node = &mut root;
        for k in p {
            let entry = node
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(next) = entry else { break };
            node = next;
        }
    }
    Value::Object(root)
}

/// The leaf paths of a `fieldsV1` tree (the inverse of [`fields_v1`]).
pub(crate) fn paths_of_fields(v: &Value) -> Vec<Vec<String>> {
    fn walk(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    let Some(name) = k.strip_prefix("f:") else {
                        // "." and "k:"/"v:" entries (list items) are not in this subset: the
                        // path so far is the leaf.
                        out.push(prefix.clone());
                        continue;
                    };
                    prefix.push(name.to_string());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => out.push(prefix.clone()),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out.sort();
    out.dedup();
    out
}

/// The value at `path`, if any.
pub(crate) fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

/// Removes the value at `path` and then any object it leaves empty on the way up.
pub(crate) fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    {
        let mut node = &mut *v;
        for k in parent {
            match node.get_mut(k) {
                Some(n) => node = n,
                None => return,
            }
        }
        if let Value::Object(m) = node {
            m.remove(last);
        }
    }
    // Prune what became empty (one pass from the deepest parent up).
    for depth in (1..path.len()).rev() {
        let prefix = &path[..depth];
        let empty = at(v, prefix).is_some_and(|n| n.as_object().is_some_and(Map::is_empty));
        if empty {
            remove_path(v, prefix);
        }
    }
}

/// Merges an applied object into `target`: members set recursively, lists and scalars
/// replaced (lists atomic), nothing removed.
pub(crate) fn apply_merge(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(slot) if slot.is_object() && v.is_object() => apply_merge(slot, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_merges_objects_removes_nulls_replaces_lists() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1});
        merge(
            &mut t,
            &json!({"a": {"b": null, "d": 3}, "l": [3], "x": null}),
        );
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_operations_and_failures() {
        let mut t = json!({"a": [1, 2], "b": {"c": 1}});
        json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/a/-", "value": 3},
                {"op": "add", "path": "/a/0", "value": 0},
                {"op": "replace", "path": "/b/c", "value": 2},
                {"op": "copy", "from": "/b/c", "path": "/d"},
                {"op": "move", "from": "/d", "path": "/e"},
                {"op": "remove", "path": "/a/1"},
                {"op": "test", "path": "/e", "value": 2}
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": [0, 2, 3], "b": {"c": 2}, "e": 2}));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "test", "path": "/e", "value": 9}])),
            Err(JsonPatchError::Failed(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])),
            Err(JsonPatchError::Failed(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!({"op": "add"})),
            Err(JsonPatchError::Malformed(_))
        ));
    }

    #[test]
    fn field_sets_round_trip_and_prune() {
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"m": "hi"}, "l": [1]});
        let paths = leaf_paths(&applied);
        assert_eq!(
            paths,
            vec![
                vec!["data".to_string(), "m".into()],
                vec!["l".into()],
                vec!["metadata".into(), "labels".into(), "x".into()],
            ]
        );
        assert_eq!(paths_of_fields(&fields_v1(&paths)), paths);
        let mut v = applied.clone();
        remove_path(&mut v, &paths[0]);
        assert_eq!(v.get("data"), None, "an emptied parent goes too");
    }
}
