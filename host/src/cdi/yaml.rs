//! YAML output of a CDI spec: block style, every string double-quoted with JSON escapes
//! (a valid YAML double-quoted scalar), keys in the spec's field order. Hand-written because
//! the spec is a fixed tree of maps, lists and strings, and the workspace's YAML crate is a
//! parser being replaced; this keeps node-setup's static binary free of a YAML serializer.

use serde_json::Value;

/// The YAML document for `value` (a JSON object).
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::from("---\n");
    match value {
        Value::Object(map) if !map.is_empty() => object(map, 0, &mut out),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Object(m) if m.is_empty() => "{}".into(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        // JSON's escapes are a subset of YAML's double-quoted ones.
        Value::String(s) => serde_json::to_string(s).expect("a string serialises"),
        other => other.to_string(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

fn object(map: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (key, v) in map {
        if !is_block(v) {
            out.push_str(&format!("{pad}{key}: {}\n", scalar(v)));
            continue;
        }
        out.push_str(&format!("{pad}{key}:\n"));
        match v {
            Value::Object(m) => object(m, indent + 2, out),
            Value::Array(a) => sequence(a, indent, out),
            _ => unreachable!("block values are objects or arrays"),
        }
    }
}

fn sequence(items: &[Value], indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for item in items {
        match item {
            Value::Object(m) if !m.is_empty() => {
                // The first key goes on the dash's line.
                let mut inner = String::new();
                object(m, indent + 2, &mut inner);
                out.push_str(&pad);
                out.push_str("- ");
                out.push_str(&inner[indent + 2..]);
            }
            Value::Array(a) if !a.is_empty() => {
                out.push_str(&format!("{pad}-\n"));
                sequence(a, indent + 2, out);
            }
            other => out.push_str(&format!("{pad}- {}\n", scalar(other))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_style_with_quoted_strings() {
        let v = serde_json::json!({
            "cdiVersion": "0.5.0",
            "devices": [
                {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
                {"name": "all", "containerEdits": {"env": ["A=\"b\"\n"]}}
            ],
            "empty": [],
            "n": 3
        });
        let expected = "---\ncdiVersion: \"0.5.0\"\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: \"/dev/nvidia0\"\n- name: \"all\"\n  containerEdits:\n    env:\n    - \"A=\\\"b\\\"\\n\"\nempty: []\nn: 3\n";
        assert_eq!(to_yaml(&v), expected);
    }
}
