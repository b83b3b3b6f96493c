//! Secrets out of what the support bundle carries. A node's configuration holds the k3s join
//! token (`token:` in config.yaml, `K3S_TOKEN=` in the unit's environment file, `--token` on
//! its command line), registry passwords (`registries.yaml`, containerd's `auth` tables,
//! docker's `auths`), API tokens and private keys. Redacted, in every file and command
//! output:
//! - the value of any key or flag whose name has `token`, `password`, `passwd`, `secret`,
//!   `credential`, `auth` or `private` in it (`key: v`, `key = v`, `KEY=v`, `"key": "v"`,
//!   `--flag v`, `--flag=v`);
//! - wherever they stand, k3s tokens (`K10<hex>::<user>:<password>`), JSON Web Tokens
//!   (`eyJ….….…`) and what follows `Bearer `;
//! - PEM private key blocks, whole.
//!
//! Over-redacting a value that was no secret (a `token-file` path) is the accepted cost.

/// What a redacted value is replaced with.
pub const MARK: &str = "<redacted>";

const SENSITIVE: [&str; 7] = [
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "auth",
    "private",
];

/// `text` with every secret replaced by [`MARK`]; also how many were replaced.
pub fn redact(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut in_private_key = false;
    for line in text.split_inclusive('\n') {
        if line.contains("-----BEGIN") && line.contains("PRIVATE KEY") {
            in_private_key = true;
            count += 1;
            out.push_str(MARK);
            out.push('\n');
        }
        if in_private_key {
            if line.contains("-----END") {
                in_private_key = false;
            }
            continue;
        }
        let (l, n) = redact_line(line);
        count += n;
        out.push_str(&l);
    }
    (out, count)
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// One line: values of sensitive keys, then free-standing tokens.
fn redact_line(line: &str) -> (String, usize) {
    let mut s = line.to_string();
    let mut count = 0;
    // Values of sensitive keys and flags.
    let mut from = 0;
    while let Some((start, end)) = next_sensitive_key(&s, from) {
        match value_after_key(&s, start, end) {
            Some((vs, ve)) if ve > vs && &s[vs..ve] != MARK => {
                s.replace_range(vs..ve, MARK);
                count += 1;
                from = vs + MARK.len();
            }
            _ => from = end,
        }
    }
    // Free-standing tokens.
    for (prefix, valid) in [
        ("K10", k3s_token_len as fn(&str) -> usize),
        ("eyJ", jwt_len),
        ("Bearer ", bearer_len),
    ] {
        let mut from = 0;
        while let Some(pos) = s[from..].find(prefix).map(|p| p + from) {
            let len = valid(&s[pos..]);
            if len > 0 {
                let keep = if prefix == "Bearer " { prefix.len() } else { 0 };
                s.replace_range(pos + keep..pos + len, MARK);
                count += 1;
                from = pos + keep + MARK.len();
            } else {
                from = pos + prefix.len();
            }
        }
    }
    (s, count)
}

/// The next key (a run of key characters) at or after `from` that names a secret.
fn next_sensitive_key(s: &str, from: usize) -> Option<(usize, usize)> {
    let lower = s.to_ascii_lowercase();
    let mut i = from;
    while i < s.len() {
        let rest = &lower[i..];
        let c = rest.chars().next()?;
        if !is_key_char(c) {
            i += c.len_utf8();
            continue;
        }
        let len = rest.find(|c: char| !is_key_char(c)).unwrap_or(rest.len());
        let word = &rest[..len];
        if SENSITIVE.iter().any(|w| word.contains(w)) {
            return Some((i, i + len));
        }
        i += len;
    }
    None
}

/// Where the value of the key at `start..end` lies: after `:` or `=` (a closing quote of
/// the key first), or, for a `--flag`, the next word.
fn value_after_key(s: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let bytes = s.as_bytes();
    let mut i = end;
    if i < bytes.len() && (bytes[i] == b'"' || bytes[i] == b'\'') {
        i += 1;
    }
    while i < bytes.len() && bytes[i] == b' ' {
        i += 1;
    }
    let flag = s[start..].starts_with("--") || s[..start].ends_with("--");
    if i < bytes.len() && (bytes[i] == b':' || bytes[i] == b'=') {
        i += 1;
        // `::` is not a separator (an IPv6 address, a Go type).
        if i < bytes.len() && bytes[i] == b':' {
            return None;
        }
    } else if !(flag && i > end) {
        return None;
    }
    while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b'\t') {
        i += 1;
    }
    if i >= bytes.len() {
        return None;
    }
    let (vs, ve) = match bytes[i] {
        q @ (b'"' | b'\'') => {
            let close = s[i + 1..].find(q as char).map_or(s.len(), |p| i + 1 + p);
            (i + 1, close)
        }
        // A YAML block or a table follows on the next lines: nothing on this one.
        b'\n' | b'\r' | b'{' | b'[' | b'|' | b'>' => return None,
        _ => {
            let word_end = |from: usize| {
                s[from..]
                    .find(|c: char| {
                        c.is_whitespace() || matches!(c, ',' | '}' | ']' | ';' | '"' | '\'')
                    })
                    .map_or(s.len(), |p| from + p)
            };
            let mut end = word_end(i);
            // `Authorization: Bearer <token>`: the scheme and its credentials.
            let scheme = s[i..end].to_ascii_lowercase();
            if (scheme == "bearer" || scheme == "basic") && s[end..].starts_with(' ') {
                end = word_end(end + 1);
            }
            (i, end)
        }
    };
    Some((vs, ve))
}

/// `K10<hex>::<user>:<password>` (k3s's secure token format, `pkg/clientaccess/token.go`).
fn k3s_token_len(s: &str) -> usize {
    let hex = s[3..]
        .find(|c: char| !c.is_ascii_hexdigit())
        .map_or(s.len() - 3, |p| p);
    if hex < 16 || !s[3 + hex..].starts_with("::") {
        return 0;
    }
    3 + hex
        + s[3 + hex..]
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(s.len() - 3 - hex)
}

/// `eyJ<base64url>.<base64url>.<base64url>`.
fn jwt_len(s: &str) -> usize {
    let len = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(s.len());
    if s[..len].matches('.').count() == 2 && len > 20 {
        len
    } else {
        0
    }
}

/// `Bearer <token>`.
fn bearer_len(s: &str) -> usize {
    let rest = &s["Bearer ".len()..];
    let len = rest
        .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .unwrap_or(rest.len());
    if len >= 8 {
        "Bearer ".len() + len
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> String {
        redact(text).0
    }

    #[test]
    fn values_of_sensitive_keys_in_every_syntax() {
        assert_eq!(r("token: abc123\n"), "token: <redacted>\n");
        assert_eq!(r("agent-token: \"abc\"\n"), "agent-token: \"<redacted>\"\n");
        assert_eq!(r("K3S_TOKEN=abc\n"), "K3S_TOKEN=<redacted>\n");
        assert_eq!(
            r("      password: hunter2\n"),
            "      password: <redacted>\n"
        );
        assert_eq!(
            r(r#"{"auths": {"r.io": {"auth": "dXNlcjpwYXNz"}}}"#),
            r#"{"auths": {"r.io": {"auth": "<redacted>"}}}"#
        );
        assert_eq!(r("  password = \"x y\"\n"), "  password = \"<redacted>\"\n");
        assert_eq!(
            r("ExecStart=/usr/local/bin/k3s server --token s3cr3t --write-kubeconfig-mode 644\n"),
            "ExecStart=/usr/local/bin/k3s server --token <redacted> --write-kubeconfig-mode 644\n"
        );
        assert_eq!(
            r("ExecStart=/k3s agent --token=s3cr3t\n"),
            "ExecStart=/k3s agent --token=<redacted>\n"
        );
        // Nothing to redact.
        for plain in [
            "default_runtime_name = \"nvidia\"\n",
            "[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"r.io\".auth]\n",
            "server: https://[::1]:6443\n",
        ] {
            assert_eq!(r(plain), plain);
        }
    }

    #[test]
    fn free_standing_tokens_and_keys() {
        let token = "K10f0e1d2c3b4a5968778695a4b3c2d1e0f::server:0123456789abcdef";
        assert_eq!(
            r(&format!("join with {token} now\n")),
            "join with <redacted> now\n"
        );
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLWJ5dGVz";
        assert_eq!(r(&format!("x {jwt}\n")), "x <redacted>\n");
        assert_eq!(
            r("Authorization: Bearer abcdefgh1234\n"),
            "Authorization: <redacted>\n"
        );
        assert_eq!(
            r("curl -H 'X: Bearer abcdefgh1234'\n"),
            "curl -H 'X: Bearer <redacted>'\n"
        );
        let pem =
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nb\n";
        assert_eq!(r(pem), "a\n<redacted>\nb\n");
    }
}
