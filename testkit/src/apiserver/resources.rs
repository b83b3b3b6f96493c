//! The fake's `resource.k8s.io` part: ResourceSlices and ResourceClaims, stored as JSON and
//! answered as the real API server does (status codes, `Status` objects, `resourceVersion`
//! checks, `generateName`).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::release::{self, Release};

const GROUP: &str = "resource.k8s.io";
/// The API server's generated names: at most 63 characters, the `generateName` cut to 58 and
/// 5 random characters from this alphabet (apiserver `names.SimpleNameGenerator`,
/// `utilrand.String`).
const MAX_GENERATED_BASE: usize = 58;
const RANDOM_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A UUID-shaped UID derived from `seed` (stable, so tests can predict it).
pub fn uid_for(seed: &str) -> String {
    // FNV-1a, twice with different offsets, for 128 bits.
    let hash = |offset: u64| {
        seed.bytes().fold(offset, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let (a, b) = (hash(0xcbf2_9ce4_8422_2325), hash(0x84222325_cbf29ce4));
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

#[derive(Default)]
pub(super) struct Resources {
    slices: BTreeMap<String, Value>,
    pub(super) claims: BTreeMap<(String, String), Value>,
    /// The cluster's last `resourceVersion` (etcd's revision).
    revision: u64,
    /// Objects created so far (names and UIDs come from it).
    created: u64,
    pub(super) modify_after_next_list: bool,
    pub(super) writes_only_for_node: Option<String>,
    /// `None`: every version the release has is served.
    pub(super) served: Option<Vec<String>>,
    /// The Kubernetes release the fake acts as.
    pub(super) release: Release,
    /// Fields dropped from written slices (gate off, or not in the version), in order.
    pub(super) dropped: Vec<String>,
}

type Answer = (StatusCode, Value);

fn failure(code: StatusCode, reason: &str, message: &str, details: Value) -> Answer {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code.as_u16()}),
    )
}

/// The 404 for a path the server does not serve.
fn not_served() -> Answer {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
        json!({}),
    )
}

fn not_found(resource: &str, name: &str) -> Answer {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{resource}.{GROUP} \"{name}\" not found"),
        json!({"name": name, "group": GROUP, "kind": resource}),
    )
}

fn conflict(name: &str, why: &str) -> Answer {
    failure(
        StatusCode::CONFLICT,
        "Conflict",
        &format!("Operation cannot be fulfilled on resourceslices.{GROUP} \"{name}\": {why}"),
        json!({"name": name, "group": GROUP, "kind": "resourceslices"}),
    )
}

fn invalid(name: &str, causes: &[String]) -> Answer {
    failure(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!(
            "ResourceSlice.{GROUP} \"{name}\" is invalid: {}",
            causes.join(", ")
        ),
        json!({"name": name, "group": GROUP, "kind": "ResourceSlice"}),
    )
}

fn bad_request(message: &str) -> Answer {
    failure(StatusCode::BAD_REQUEST, "BadRequest", message, json!({}))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// RFC 3339 UTC, seconds (`metadata.creationTimestamp`).
fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// One field-selector requirement (`key=value`, `key==value`, `key!=value`).
struct Requirement {
    key: String,
    value: String,
    equal: bool,
}

fn parse_field_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        let (key, value, equal) = if let Some((k, v)) = term.split_once("!=") {
            (k, v, false)
        } else if let Some((k, v)) = term.split_once("==") {
            (k, v, true)
        } else if let Some((k, v)) = term.split_once('=') {
            (k, v, true)
        } else {
            return Err(format!(
                "invalid selector: '{selector}'; can't understand '{term}'"
            ));
        };
        if !["spec.nodeName", "spec.driver", "metadata.name"].contains(&key) {
            return Err(format!("field label not supported: {key}"));
        }
        out.push(Requirement {
            key: key.to_string(),
            value: value.to_string(),
            equal,
        });
    }
    Ok(out)
}

fn selects(requirements: &[Requirement], slice: &Value) -> bool {
    requirements.iter().all(|r| {
        let pointer = format!("/{}", r.key.replace('.', "/"));
        (str_at(slice, &pointer) == r.value) == r.equal
    })
}

/// What the real validation of a v1 ResourceSlice would refuse that a test could plausibly
/// send (a subset: the shape, the limits, the immutable fields are checked elsewhere).
fn validate_slice(slice: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let spec = slice.get("spec").cloned().unwrap_or(Value::Null);
    if str_at(&spec, "/driver").is_empty() {
        causes.push("spec.driver: Required value".to_string());
    }
    if str_at(&spec, "/pool/name").is_empty() {
        causes.push("spec.pool.name: Required value".to_string());
    }
    if spec
        .pointer("/pool/resourceSliceCount")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        <= 0
    {
        causes
            .push("spec.pool.resourceSliceCount: Invalid value: must be greater than zero".into());
    }
    if spec
        .pointer("/pool/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        < 0
    {
        causes
            .push("spec.pool.generation: Invalid value: must be greater than or equal to 0".into());
    }
    let selections = [
        "nodeName",
        "nodeSelector",
        "allNodes",
        "perDeviceNodeSelection",
    ]
    .iter()
    .filter(|k| spec.get(**k).is_some_and(|v| !v.is_null()))
    .count();
    if selections != 1 {
        causes.push(
            "spec: Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required".into(),
        );
    }
    let devices = spec
        .get("devices")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if devices.len() > 128 {
        causes.push(format!(
            "spec.devices: Too many: {}: must have at most 128 items",
            devices.len()
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, device) in devices.iter().enumerate() {
        let name = str_at(device, "/name");
        if name.is_empty() {
            causes.push(format!("spec.devices[{i}].name: Required value"));
        } else if !names.insert(name) {
            causes.push(format!(
                "spec.devices[{i}].name: Duplicate value: \"{name}\""
            ));
        }
    }
    causes
}

impl Resources {
    fn version_served(&self, version: &str) -> bool {
        self.release.served().contains(&version)
            && self
                .served
                .as_ref()
                .map_or(true, |v| v.iter().any(|s| s == version))
    }

    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    /// A generated name: the base (cut to 58 characters) and 5 characters from the
    /// API server's alphabet, deterministic per object created.
    fn generated_name(&self, base: &str) -> String {
        let base: String = base.chars().take(MAX_GENERATED_BASE).collect();
        let mut n = self
            .created
            .wrapping_mul(2_654_435_761)
            .wrapping_add(12_345);
        let mut suffix = String::new();
        for _ in 0..5 {
            suffix.push(RANDOM_ALPHABET[(n % RANDOM_ALPHABET.len() as u64) as usize] as char);
            n /= RANDOM_ALPHABET.len() as u64;
        }
        format!("{base}{suffix}")
    }

    pub(super) fn slices(&self) -> Vec<Value> {
        self.slices.values().map(|s| with_kind(s, "v1")).collect()
    }

    /// `GET /apis/resource.k8s.io`: the group with the versions served (404 without any).
    fn group(&self) -> Answer {
        let versions: Vec<Value> = self
            .release
            .served()
            .into_iter()
            .filter(|v| self.version_served(v))
            .map(|v| json!({"groupVersion": format!("{GROUP}/{v}"), "version": v}))
            .collect();
        let Some(preferred) = versions.first().cloned() else {
            return not_served();
        };
        (
            StatusCode::OK,
            json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
                "versions": versions, "preferredVersion": preferred}),
        )
    }

    pub(super) fn insert_slice(&mut self, slice: Value) -> Result<Value, Value> {
        match self.create_slice(slice) {
            (StatusCode::CREATED, stored) => Ok(stored),
            (_, status) => Err(status),
        }
    }

    pub(super) fn add_claim(
        &mut self,
        namespace: &str,
        name: &str,
        uid: &str,
        allocation: Option<Value>,
    ) {
        let revision = self.next_revision();
        let mut claim = json!({
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                "resourceVersion": revision, "creationTimestamp": now_rfc3339()},
            "spec": {"devices": {"requests": []}},
            "status": {},
        });
        if let Some(allocation) = allocation {
            claim["status"]["allocation"] = allocation;
        }
        self.claims
            .insert((namespace.to_string(), name.to_string()), claim);
    }

    /// Answers one request under `/apis/resource.k8s.io/`.
    pub(super) fn answer(
        &mut self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let rest = path.trim_start_matches("/apis/resource.k8s.io");
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let Some(version) = parts.first().copied() else {
            return match *method {
                Method::GET => self.group(),
                _ => method_not_allowed(),
            };
        };
        if !self.version_served(version) {
            return not_served();
        }
        match parts[1..] {
            ["resourceslices"] => match *method {
                Method::GET => self.list_slices(version, query),
                Method::POST => match body {
                    Some(b) => self.checked_create(version, b.clone()),
                    None => bad_request("the body of the request is not a ResourceSlice"),
                },
                _ => method_not_allowed(),
            },
            ["resourceslices", name] => match *method {
                Method::GET => match self.slices.get(name) {
                    Some(s) => (StatusCode::OK, with_kind(s, version)),
                    None => not_found("resourceslices", name),
                },
                Method::PUT => match body {
                    Some(b) => self.update_slice(version, name, b),
                    None => bad_request("the body of the request is not a ResourceSlice"),
                },
                Method::DELETE => self.delete_slice(version, name, body),
                _ => method_not_allowed(),
            },
            ["namespaces", namespace, "resourceclaims", name] => match *method {
                Method::GET => match self.claims.get(&(namespace.to_string(), name.to_string())) {
                    Some(c) => (StatusCode::OK, with_claim_kind(c, version)),
                    None => not_found("resourceclaims", name),
                },
                _ => method_not_allowed(),
            },
            _ => not_served(),
        }
    }

    fn list_slices(&mut self, version: &str, query: Option<&str>) -> Answer {
        let list_kind = format!("{GROUP}/{version}");
        let mut requirements = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Some(value) = percent_decode(value) else {
                return bad_request(&format!("invalid query parameter {pair}"));
            };
            match key {
                "fieldSelector" => match parse_field_selector(&value) {
                    Ok(r) => requirements.extend(r),
                    Err(message) => return bad_request(&message),
                },
                "labelSelector" if value.is_empty() => {}
                "labelSelector" => {
                    // Slices carry no labels here: any requirement but an empty one selects
                    // nothing. Enough for the driver, which never sends one.
                    return (
                        StatusCode::OK,
                        json!({"kind": "ResourceSliceList", "apiVersion": list_kind,
                            "metadata": {"resourceVersion": self.revision.to_string()}, "items": []}),
                    );
                }
                _ => {}
            }
        }
        let items: Vec<Value> = self
            .slices
            .values()
            .filter(|s| selects(&requirements, s))
            .map(|s| in_version_shape(s, version))
            .collect();
        let answer = json!({"kind": "ResourceSliceList", "apiVersion": list_kind,
            "metadata": {"resourceVersion": self.revision.to_string()}, "items": items});
        if self.modify_after_next_list {
            self.modify_after_next_list = false;
            let names: Vec<String> = items
                .iter()
                .map(|s| str_at(s, "/metadata/name").to_string())
                .collect();
            for name in names {
                let revision = self.next_revision();
                if let Some(s) = self.slices.get_mut(&name) {
                    s["metadata"]["resourceVersion"] = Value::String(revision);
                }
            }
        }
        (StatusCode::OK, answer)
    }

    /// The admission policy of [`super::FakeApiServer::restrict_slice_writes_to_node`].
    fn admitted(&self, name: &str, node: &str) -> Result<(), Answer> {
        match &self.writes_only_for_node {
            Some(allowed) if allowed != node => Err(failure(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "resourceslices.{GROUP} \"{name}\" is forbidden: ValidatingAdmissionPolicy \
                     'resourceslices-policy-edgegpu' with binding \
                     'resourceslices-policy-edgegpu' denied request: this user running on \
                     node '{allowed}' may not modify resourceslices on node '{node}'"
                ),
                json!({"name": name, "group": GROUP, "kind": "resourceslices"}),
            )),
            _ => Ok(()),
        }
    }

    /// A written slice in the stored (`v1`) shape, without what the release drops.
    fn decoded(&mut self, version: &str, mut slice: Value) -> Value {
        if version == "v1beta1" {
            release::map_devices(&mut slice, release::device_from_v1beta1);
        }
        if let Some(spec) = slice.get_mut("spec") {
            let dropped = self.release.drop_disabled(spec);
            self.dropped.extend(dropped);
        }
        slice
    }

    fn checked_create(&mut self, version: &str, slice: Value) -> Answer {
        let name = match str_at(&slice, "/metadata/name") {
            "" => str_at(&slice, "/metadata/generateName").to_string(),
            n => n.to_string(),
        };
        if let Err(denied) = self.admitted(&name, str_at(&slice, "/spec/nodeName")) {
            return denied;
        }
        for (field, want) in [
            ("kind", "ResourceSlice".to_string()),
            ("apiVersion", format!("{GROUP}/{version}")),
        ] {
            let have = str_at(&slice, &format!("/{field}"));
            if !have.is_empty() && have != want {
                return bad_request(&format!(
                    "the API version in the data ({have}) does not match the expected API version ({GROUP}/{version})"
                ));
            }
        }
        let slice = self.decoded(version, without_kind(&slice));
        match self.create_slice(slice) {
            (StatusCode::CREATED, stored) => (StatusCode::CREATED, with_kind(&stored, version)),
            other => other,
        }
    }

    fn create_slice(&mut self, mut slice: Value) -> Answer {
        if !slice.is_object() {
            return bad_request("the body of the request is not an object");
        }
        for (field, want) in [
            ("kind", "ResourceSlice"),
            ("apiVersion", "resource.k8s.io/v1"),
        ] {
            let have = str_at(&slice, &format!("/{field}"));
            if !have.is_empty() && have != want {
                return bad_request(&format!(
                    "the API version in the data ({have}) does not match the expected API version (resource.k8s.io/v1)"
                ));
            }
        }
        let name = str_at(&slice, "/metadata/name").to_string();
        let generate_name = str_at(&slice, "/metadata/generateName").to_string();
        let name = match (name.is_empty(), generate_name.is_empty()) {
            (false, _) => name,
            (true, false) => self.generated_name(&generate_name),
            (true, true) => {
                return invalid(
                    "",
                    &["metadata.name: Required value: name or generateName is required".into()],
                )
            }
        };
        let mut causes = validate_slice(&slice);
        causes.extend(self.release.validate(&slice["spec"]));
        if !causes.is_empty() {
            return invalid(&name, &causes);
        }
        if self.slices.contains_key(&name) {
            return failure(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!("resourceslices.{GROUP} \"{name}\" already exists"),
                json!({"name": name, "group": GROUP, "kind": "resourceslices"}),
            );
        }
        self.created += 1;
        let revision = self.next_revision();
        let metadata = slice["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        metadata.insert("name".into(), Value::String(name.clone()));
        metadata.insert(
            "uid".into(),
            Value::String(uid_for(&format!("slice-{}-{name}", self.created))),
        );
        metadata.insert("resourceVersion".into(), Value::String(revision));
        metadata.insert("generation".into(), json!(1));
        metadata.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        let stored = without_kind(&slice);
        self.slices.insert(name, stored.clone());
        (StatusCode::CREATED, with_kind(&stored, "v1"))
    }

    fn update_slice(&mut self, version: &str, name: &str, slice: &Value) -> Answer {
        let slice = &self.decoded(version, slice.clone());
        let Some(current) = self.slices.get(name).cloned() else {
            return not_found("resourceslices", name);
        };
        if let Err(denied) = self.admitted(name, str_at(&current, "/spec/nodeName")) {
            return denied;
        }
        if let Err(denied) = self.admitted(name, str_at(slice, "/spec/nodeName")) {
            return denied;
        }
        let body_name = str_at(slice, "/metadata/name");
        if body_name != name {
            return bad_request(&format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ));
        }
        let version = str_at(slice, "/metadata/resourceVersion");
        if version.is_empty() {
            return invalid(
                name,
                &[
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                        .into(),
                ],
            );
        }
        if version != str_at(&current, "/metadata/resourceVersion") {
            return conflict(
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            );
        }
        let mut causes = validate_slice(slice);
        causes.extend(self.release.validate(&slice["spec"]));
        for field in ["/spec/driver", "/spec/nodeName", "/spec/pool/name"] {
            if str_at(slice, field) != str_at(&current, field) {
                causes.push(format!(
                    "{}: Invalid value: field is immutable",
                    field.trim_start_matches('/').replace('/', ".")
                ));
            }
        }
        if !causes.is_empty() {
            return invalid(name, &causes);
        }
        let mut stored = without_kind(slice);
        // The server owns these.
        for field in ["uid", "creationTimestamp", "generateName"] {
            match current["metadata"].get(field) {
                Some(v) => stored["metadata"][field] = v.clone(),
                None => {
                    if let Some(m) = stored["metadata"].as_object_mut() {
                        m.remove(field);
                    }
                }
            }
        }
        let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
        let changed = stored.get("spec") != current.get("spec");
        stored["metadata"]["generation"] = json!(if changed { generation + 1 } else { generation });
        if stored != current {
            stored["metadata"]["resourceVersion"] = Value::String(self.next_revision());
        }
        self.slices.insert(name.to_string(), stored.clone());
        (StatusCode::OK, with_kind(&stored, version))
    }

    fn delete_slice(&mut self, version: &str, name: &str, options: Option<&Value>) -> Answer {
        let Some(current) = self.slices.get(name).cloned() else {
            return not_found("resourceslices", name);
        };
        if let Err(denied) = self.admitted(name, str_at(&current, "/spec/nodeName")) {
            return denied;
        }
        let preconditions = options
            .and_then(|o| o.get("preconditions"))
            .cloned()
            .unwrap_or(Value::Null);
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            if let Some(want) = preconditions.get(field).and_then(Value::as_str) {
                let have = str_at(&current, &format!("/metadata/{field}"));
                if want != have {
                    return conflict(
                        name,
                        &format!(
                            "Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"
                        ),
                    );
                }
            }
        }
        self.slices.remove(name);
        self.next_revision();
        (StatusCode::OK, with_kind(&current, version))
    }
}

fn method_not_allowed() -> Answer {
    failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        json!({}),
    )
}

fn without_kind(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("kind");
        map.remove("apiVersion");
    }
    object
}

/// An object as a GET answers it: `kind` and `apiVersion` first.
fn with_kind_named(object: &Value, kind: &str, version: &str) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(kind.into()));
    out.insert(
        "apiVersion".into(),
        Value::String(format!("{GROUP}/{version}")),
    );
    if let Some(map) = object.as_object() {
        for (k, v) in map {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn with_kind(slice: &Value, version: &str) -> Value {
    with_kind_named(&in_version_shape(slice, version), "ResourceSlice", version)
}

/// A stored slice as `version` has it: v1beta1 wraps each device in `basic`.
fn in_version_shape(slice: &Value, version: &str) -> Value {
    let mut slice = slice.clone();
    if version == "v1beta1" {
        release::map_devices(&mut slice, release::device_to_v1beta1);
    }
    slice
}

fn with_claim_kind(claim: &Value, version: &str) -> Value {
    with_kind_named(claim, "ResourceClaim", version)
}

/// Percent-decoding of a query value, as Go's `url.ParseQuery` does it.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(node: &str) -> Value {
        json!({"metadata": {"generateName": "00000-d-n-"},
            "spec": {"driver": "d", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}})
    }

    #[test]
    fn create_update_delete_as_the_api_server() {
        let mut r = Resources::default();
        let (code, created) = r.answer(
            &Method::POST,
            "/apis/resource.k8s.io/v1/resourceslices",
            None,
            Some(&slice("a")),
        );
        assert_eq!(code, StatusCode::CREATED);
        assert_eq!(created["kind"], "ResourceSlice");
        let name = str_at(&created, "/metadata/name").to_string();
        assert!(name.starts_with("00000-d-n-") && name.len() == 15, "{name}");
        let path = format!("/apis/resource.k8s.io/v1/resourceslices/{name}");
        let mut stale = created.clone();
        stale["spec"]["pool"]["generation"] = json!(2);
        let (code, updated) = r.answer(&Method::PUT, &path, None, Some(&stale));
        assert_eq!(code, StatusCode::OK);
        assert_eq!(updated["metadata"]["generation"], 2);
        let (code, status) = r.answer(&Method::PUT, &path, None, Some(&stale));
        assert_eq!(code, StatusCode::CONFLICT);
        assert_eq!(status["reason"], "Conflict");
        let old = json!({"preconditions": {"resourceVersion": str_at(&created, "/metadata/resourceVersion")}});
        assert_eq!(
            r.answer(&Method::DELETE, &path, None, Some(&old)).0,
            StatusCode::CONFLICT
        );
        assert_eq!(
            r.answer(&Method::DELETE, &path, None, None).0,
            StatusCode::OK
        );
        let (code, gone) = r.answer(&Method::DELETE, &path, None, None);
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert_eq!(gone["details"]["name"], name.as_str());
    }

    #[test]
    fn field_selectors_and_unserved_versions() {
        let mut r = Resources::default();
        r.insert_slice(slice("a")).unwrap();
        r.insert_slice(slice("b")).unwrap();
        let list = |r: &mut Resources, q: &str| {
            let (code, l) = r.answer(
                &Method::GET,
                "/apis/resource.k8s.io/v1/resourceslices",
                Some(q),
                None,
            );
            (code, l["items"].as_array().map_or(0, Vec::len))
        };
        assert_eq!(
            list(&mut r, "fieldSelector=spec.nodeName%3Da%2Cspec.driver%3Dd"),
            (StatusCode::OK, 1)
        );
        assert_eq!(
            list(&mut r, "fieldSelector=spec.nodeName!%3Da"),
            (StatusCode::OK, 1)
        );
        assert_eq!(list(&mut r, "").1, 2);
        assert_eq!(
            list(&mut r, "fieldSelector=spec.pool.name%3Da").0,
            StatusCode::BAD_REQUEST
        );
        r.served = Some(vec!["v1beta1".into()]);
        let (code, status) = r.answer(
            &Method::GET,
            "/apis/resource.k8s.io/v1/resourceslices",
            None,
            None,
        );
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert_eq!(status["details"], json!({}));
    }

    #[test]
    fn generated_names_are_cut_to_63() {
        let r = Resources::default();
        let name = r.generated_name(&"x".repeat(100));
        assert_eq!(name.len(), 63);
        assert_eq!(uid_for("n").len(), 36);
    }
}
