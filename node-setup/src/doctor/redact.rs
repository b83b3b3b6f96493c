//! Secrets out of what the support bundle carries. A node's configuration holds the k3s join
//! token (`token:` in config.yaml, `K3S_TOKEN=` in the unit's environment file, `--token` on
//! its command line, one argument per line as the k3s installer writes it), registry
//! passwords (`registries.yaml`, containerd's `auth` tables, docker's `auths`), database and
//! proxy URLs with a password, API tokens and private keys. Redacted, in every file and
//! command output:
//! - the value of any key or flag whose name has `token`, `password`, `passwd`, `passphrase`,
//!   `secret`, `credential`, `auth`, `private`, `key-data`/`key_data` or `apikey`/`api_key`
//!   in it: `key: v`, `key = v`, `KEY=v` (to the end of the line), `"key": "v"` (the quoted
//!   string, escapes included), `--flag v`, `--flag=v`, a flag whose value is on the next
//!   line (`--token \`), a YAML block (`key: |`) and a TOML multi-line string (`key = """`);
//! - wherever they stand, k3s tokens (`K10<hex>::<user>:<password>`), JSON Web Tokens
//!   (`eyJ….….…`), what follows `Bearer ` or `Basic `, and the password of a URL
//!   (`scheme://user:password@host`);
//! - PEM private key blocks, whole.
//!
//! Over-redacting a value that was no secret (a `token-file` path) is the accepted cost. The
//! scan is linear in the text's length.

/// What a redacted value is replaced with.
pub const MARK: &str = "<redacted>";

const SENSITIVE: [&str; 12] = [
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "credential",
    "auth",
    "private",
    "key-data",
    "key_data",
    "apikey",
    "api_key",
];

/// What a line leaves for the next ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carry {
    Nothing,
    /// A flag's value is the first word of the next line (`'--token' \`).
    NextWord,
    /// A YAML block scalar: every line indented deeper than the key's.
    Block {
        indent: usize,
    },
    /// A TOML multi-line string, up to its closing `"""`.
    TripleQuote,
    /// A PEM private key, up to its END line.
    PrivateKey,
}

/// `text` with every secret replaced by [`MARK`]; also how many were replaced.
pub fn redact(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut carry = Carry::Nothing;
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        // Every way through sets `carry` for the next line.
        let rest = match carry {
            Carry::PrivateKey => {
                if body.contains("-----END") {
                    carry = Carry::Nothing;
                }
                continue;
            }
            Carry::TripleQuote => match body.find("\"\"\"") {
                Some(p) => {
                    out.push_str(MARK);
                    &body[p..]
                }
                None => continue,
            },
            Carry::Block { indent } => {
                let own = body.len() - body.trim_start().len();
                if body.trim().is_empty() || own > indent {
                    out.push_str(&body[..own]);
                    out.push_str(MARK);
                    out.push_str(end);
                    continue;
                }
                body
            }
            Carry::NextWord => {
                let start = body.len() - body.trim_start().len();
                match value_span(body, start) {
                    Some((vs, ve)) if ve > vs => {
                        out.push_str(&body[..vs]);
                        out.push_str(MARK);
                        count += 1;
                        &body[ve..]
                    }
                    _ => body,
                }
            }
            Carry::Nothing => body,
        };
        if rest.contains("-----BEGIN") && rest.contains("PRIVATE KEY") {
            carry = Carry::PrivateKey;
            count += 1;
            out.push_str(MARK);
            out.push_str(end);
            if rest.contains("-----END") {
                carry = Carry::Nothing;
            }
            continue;
        }
        let (keys_done, n, next) = redact_keys(rest);
        let (tokens_done, m) = redact_tokens(&keys_done);
        count += n + m;
        carry = next;
        out.push_str(&tokens_done);
        out.push_str(end);
    }
    (out, count)
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')
}

/// The values of sensitive keys in one line (without its newline), and what the line leaves
/// for the next ones.
fn redact_keys(line: &str) -> (String, usize, Carry) {
    let lower = line.to_ascii_lowercase();
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut count = 0;
    let mut carry = Carry::Nothing;
    let mut flows = Flows::default();
    let mut i = 0;
    while i < bytes.len() {
        if !is_key_char(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_key_char(bytes[i]) {
            i += 1;
        }
        let word = &lower[start..i];
        if !SENSITIVE.iter().any(|w| word.contains(w)) {
            continue;
        }
        match value_after_key(line, start, i, &mut |pos| flows.inside(line, pos)) {
            Value::Span(vs, ve) => {
                out.push_str(&line[copied..vs]);
                out.push_str(MARK);
                copied = ve;
                i = ve.max(i);
                count += 1;
            }
            Value::Carry(c) => {
                carry = c;
                count += 1;
            }
            Value::Nothing => {}
        }
    }
    out.push_str(&line[copied..]);
    (out, count, carry)
}

/// What follows a sensitive key.
enum Value {
    /// The value on this line, as byte offsets.
    Span(usize, usize),
    /// The value continues on the next lines.
    Carry(Carry),
    Nothing,
}

/// Where the value of the key at `start..end` lies: after `:` or `=` (a closing quote of the
/// key first), or, for a `--flag`, the next word.
fn value_after_key(
    s: &str,
    start: usize,
    end: usize,
    in_flow: &mut dyn FnMut(usize) -> bool,
) -> Value {
    let bytes = s.as_bytes();
    let mut i = end;
    if i < bytes.len() && (bytes[i] == b'"' || bytes[i] == b'\'') {
        i += 1;
    }
    let after_key = i;
    while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b'\t') {
        i += 1;
    }
    let flag = s[start..].starts_with("--") || s[..start].ends_with("--");
    let separated = i < bytes.len() && (bytes[i] == b':' || bytes[i] == b'=');
    if separated {
        i += 1;
        // `::` is not a separator (an IPv6 address, a Go type).
        if i < bytes.len() && bytes[i] == b':' {
            return Value::Nothing;
        }
    } else if !(flag && i > after_key) {
        return Value::Nothing;
    }
    while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b'\t') {
        i += 1;
    }
    let rest = s[i..].trim_end();
    if rest.is_empty() {
        // `key:` alone: a YAML map follows (registries.yaml's `auth:`), its keys checked
        // one by one.
        return Value::Nothing;
    }
    if rest == "\\" {
        return Value::Carry(Carry::NextWord);
    }
    if separated && (rest.starts_with('|') || rest.starts_with('>')) {
        let indent = s.len() - s.trim_start().len();
        return Value::Carry(Carry::Block { indent });
    }
    if let Some(inner) = rest.strip_prefix("\"\"\"") {
        return match inner.find("\"\"\"") {
            Some(p) => Value::Span(i + 3, i + 3 + p),
            None => Value::Carry(Carry::TripleQuote),
        };
    }
    if matches!(bytes[i], b'{' | b'[') {
        // A table or list: its own keys are checked one by one.
        return Value::Nothing;
    }
    match value_span(s, i) {
        // `key: v` and `KEY=v` run to the end of the line (a password may hold `,` or `;`),
        // but inside a flow (`{a: x, b: y}`) and on a command line only to the word's end.
        Some((vs, _)) if separated && !flag && !quoted_at(s, vs) && !in_flow(start) => {
            Value::Span(vs, vs + s[vs..].trim_end().len())
        }
        Some((vs, ve)) if ve > vs => Value::Span(vs, ve),
        _ => Value::Nothing,
    }
}

/// Whether a value starts with a quote just before `vs`.
fn quoted_at(s: &str, vs: usize) -> bool {
    vs > 0 && matches!(s.as_bytes()[vs - 1], b'"' | b'\'')
}

/// Whether a position of a line is inside a `{…}` or `[…]` flow opened earlier on it (JSON,
/// inline TOML tables, YAML flow maps): the nesting depth at each byte, computed once per line
/// and only when asked.
#[derive(Default)]
struct Flows {
    depth: Option<Vec<i32>>,
}

impl Flows {
    fn inside(&mut self, s: &str, pos: usize) -> bool {
        let depth = self.depth.get_or_insert_with(|| {
            let mut out = Vec::with_capacity(s.len() + 1);
            let (mut d, mut quote) = (0i32, None);
            for &b in s.as_bytes() {
                out.push(d);
                match (quote, b) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), _) => {}
                    (None, b'"' | b'\'') => quote = Some(b),
                    (None, b'{' | b'[') => d += 1,
                    (None, b'}' | b']') => d -= 1,
                    _ => {}
                }
            }
            out.push(d);
            out
        });
        depth.get(pos).is_some_and(|d| *d > 0)
    }
}

/// The value starting at `i`: a quoted string (its content, `\"` escapes included), else one
/// word (a scheme and its credentials: `Bearer <token>`).
fn value_span(s: &str, i: usize) -> Option<(usize, usize)> {
    let bytes = s.as_bytes();
    if i >= bytes.len() {
        return None;
    }
    if bytes[i] == b'"' || bytes[i] == b'\'' {
        let q = bytes[i];
        let mut j = i + 1;
        while j < bytes.len() && bytes[j] != q {
            if bytes[j] == b'\\' && q == b'"' {
                j += 1;
            }
            j += 1;
        }
        return Some((i + 1, j.min(bytes.len())));
    }
    let word_end = |from: usize| {
        s[from..]
            .find(|c: char| c.is_whitespace() || matches!(c, ',' | '}' | ']' | ';' | '"' | '\''))
            .map_or(s.len(), |p| from + p)
    };
    let mut end = word_end(i);
    let scheme = s[i..end].to_ascii_lowercase();
    if (scheme == "bearer" || scheme == "basic") && s[end..].starts_with(' ') {
        end = word_end(end + 1);
    }
    Some((i, end))
}

/// Free-standing secrets: k3s tokens, JWTs, `Bearer`/`Basic` credentials, URL passwords.
fn redact_tokens(line: &str) -> (String, usize) {
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut count = 0;
    let mut i = 0;
    while i < bytes.len() {
        let rest = &line[i..];
        let span = if rest.starts_with("K10") {
            k3s_token_len(rest).map(|n| (i, i + n))
        } else if rest.starts_with("eyJ") {
            jwt_len(rest).map(|n| (i, i + n))
        } else if rest.starts_with("Bearer ") || rest.starts_with("Basic ") {
            let skip = rest.find(' ').unwrap_or(0) + 1;
            credential_len(&rest[skip..]).map(|n| (i + skip, i + skip + n))
        } else if let Some(after) = rest.strip_prefix("://") {
            url_password(after).map(|(a, b)| (i + 3 + a, i + 3 + b))
        } else {
            None
        };
        match span {
            Some((a, b)) if a >= copied => {
                out.push_str(&line[copied..a]);
                out.push_str(MARK);
                copied = b;
                i = b.max(i + 1);
                count += 1;
            }
            _ => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push_str(&line[copied..]);
    (out, count)
}

/// `K10<hex>::<user>:<password>` (k3s's secure token format, `pkg/clientaccess/token.go`).
fn k3s_token_len(s: &str) -> Option<usize> {
    let hex = s[3..]
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(s.len() - 3);
    if hex < 16 || !s[3 + hex..].starts_with("::") {
        return None;
    }
    let tail = &s[3 + hex..];
    Some(
        3 + hex
            + tail
                .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .unwrap_or(tail.len()),
    )
}

/// `eyJ<base64url>.<base64url>.<base64url>`.
fn jwt_len(s: &str) -> Option<usize> {
    let len = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(s.len());
    (s[..len].matches('.').count() == 2 && len > 20).then_some(len)
}

/// The credentials after `Bearer `/`Basic ` (at least 8 characters: not a word of prose).
fn credential_len(s: &str) -> Option<usize> {
    let len = s
        .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .unwrap_or(s.len());
    (len >= 8).then_some(len)
}

/// In `user:password@host/…` (what follows `://`), where the password lies.
fn url_password(s: &str) -> Option<(usize, usize)> {
    let authority = &s[..s
        .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
        .unwrap_or(s.len())];
    let at = authority.rfind('@')?;
    let colon = authority[..at].find(':')?;
    (at > colon + 1).then_some((colon + 1, at))
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
        assert_eq!(r("K3S_TOKEN=x;y z\n"), "K3S_TOKEN=<redacted>\n");
        assert_eq!(r("      password: ab,cd\n"), "      password: <redacted>\n");
        assert_eq!(
            r(r#"{"auths": {"r.io": {"auth": "dXNlcjpwYXNz"}}}"#),
            r#"{"auths": {"r.io": {"auth": "<redacted>"}}}"#
        );
        assert_eq!(
            r(r#"{"password":"a\"b","user":"u"}"#),
            r#"{"password":"<redacted>","user":"u"}"#
        );
        assert_eq!(r("  password = \"x y\"\n"), "  password = \"<redacted>\"\n");
        assert_eq!(
            r("auth = { username = \"u\", password = \"p\" }\n"),
            "auth = { username = \"u\", password = \"<redacted>\" }\n"
        );
        assert_eq!(
            r("ExecStart=/usr/local/bin/k3s server --token s3cr3t --write-kubeconfig-mode 644\n"),
            "ExecStart=/usr/local/bin/k3s server --token <redacted> --write-kubeconfig-mode 644\n"
        );
        assert_eq!(
            r("ExecStart=/k3s agent --token=s3cr3t\n"),
            "ExecStart=/k3s agent --token=<redacted>\n"
        );
        // The k3s installer's unit: one argument per line.
        assert_eq!(
            r("ExecStart=/usr/local/bin/k3s \\\n    server \\\n\t'--token' \\\n\t'mysecret' \\\n\t'--disable' 'traefik'\n"),
            "ExecStart=/usr/local/bin/k3s \\\n    server \\\n\t'--token' \\\n\t'<redacted>' \\\n\t'--disable' 'traefik'\n"
        );
        // A YAML block and a TOML multi-line string.
        assert_eq!(
            r("token: |\n  line1\n  line2\nnext: 1\n"),
            "token: |\n  <redacted>\n  <redacted>\nnext: 1\n"
        );
        assert_eq!(
            r("password = \"\"\"\nsecret\n\"\"\"\nother = 1\n"),
            "password = \"\"\"\n<redacted>\"\"\"\nother = 1\n"
        );
        assert_eq!(
            r("    client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t\n"),
            "    client-key-data: <redacted>\n"
        );
        // Nothing to redact.
        for plain in [
            "default_runtime_name = \"nvidia\"\n",
            "[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"r.io\".auth]\n",
            "server: https://[::1]:6443\n",
            "    auth:\n",
        ] {
            assert_eq!(r(plain), plain);
        }
    }

    #[test]
    fn free_standing_tokens_urls_and_keys() {
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
        assert_eq!(
            r("datastore-endpoint: postgres://k3s:S3cret@db:5432/k3s\n"),
            "datastore-endpoint: postgres://k3s:<redacted>@db:5432/k3s\n"
        );
        assert_eq!(
            r("HTTPS_PROXY=http://user:pr0xy@proxy:3128\n"),
            "HTTPS_PROXY=http://user:<redacted>@proxy:3128\n"
        );
        assert_eq!(
            r("see https://example.com/a:b@c\n"),
            "see https://example.com/a:b@c\n"
        );
        let pem =
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nb\n";
        assert_eq!(r(pem), "a\n<redacted>\nb\n");
    }

    #[test]
    fn a_long_line_is_scanned_once() {
        let line = format!("{{{}}}\n", "\"password\": \"x\", ".repeat(50_000));
        let (out, n) = redact(&line);
        assert_eq!(n, 50_000);
        assert!(!out.contains("\"x\""));
        let numbers = format!("{{{}}}\n", "\"password\": 12345, ".repeat(50_000));
        let (out, n) = redact(&numbers);
        assert_eq!(n, 50_000);
        assert!(!out.contains("12345"));
    }
}
