//! Kubernetes label values: at most 63 characters, alphanumerics with `-`, `_`, `.` inside,
//! starting and ending alphanumeric, or empty (apimachinery `validation.IsValidLabelValue`,
//! regex `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`).

/// The longest label value (`validation.LabelValueMaxLength`).
pub const MAX_LEN: usize = 63;

/// Whether `value` is a valid, non-empty label value.
pub fn is_valid(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `text` as a label value: every run of other characters (spaces, parentheses, slashes,
/// non-ASCII) becomes one `-` (GFD writes `NVIDIA A100-SXM4-40GB` as
/// `NVIDIA-A100-SXM4-40GB`), the ends are trimmed to alphanumerics and the result cut to 63
/// characters. `None` when nothing usable is left.
pub fn sanitize(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut replaced = false;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
            out.push(c);
            replaced = false;
        } else if !replaced {
            out.push('-');
            replaced = true;
        }
    }
    let trim = |s: &str| -> String {
        s.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_string()
    };
    let mut value = trim(&out);
    if value.len() > MAX_LEN {
        value = trim(&value[..MAX_LEN]);
    }
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(
            sanitize("NVIDIA A100-SXM4-40GB").as_deref(),
            Some("NVIDIA-A100-SXM4-40GB")
        );
        assert_eq!(sanitize("Orin (nvgpu)").as_deref(), Some("Orin-nvgpu"));
        assert_eq!(
            sanitize("NVIDIA Jetson AGX Orin Developer Kit").as_deref(),
            Some("NVIDIA-Jetson-AGX-Orin-Developer-Kit")
        );
        assert_eq!(sanitize("36.4.3").as_deref(), Some("36.4.3"));
        assert_eq!(sanitize("  (x) ").as_deref(), Some("x"));
        assert_eq!(sanitize("Grüße/GPU").as_deref(), Some("Gr-e-GPU"));
        assert_eq!(sanitize("()"), None);
        assert_eq!(sanitize(""), None);
        let long = "a".repeat(62) + "-b";
        assert_eq!(sanitize(&long).as_deref(), Some("a".repeat(62).as_str()));
        assert!(!is_valid("-a"));
        assert!(!is_valid("a b"));
        assert!(!is_valid(&"a".repeat(64)));
        assert!(is_valid("a"));
        assert!(is_valid("a_b.c-d"));
    }

    proptest! {
        #[test]
        fn sanitized_values_are_valid(text in "\\PC{0,100}") {
            if let Some(v) = sanitize(&text) {
                prop_assert!(is_valid(&v), "{v:?} from {text:?}");
            }
        }

        #[test]
        fn valid_values_are_kept(v in "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?") {
            prop_assert_eq!(sanitize(&v), Some(v.clone()));
        }
    }
}
