#!/usr/bin/env python3
"""Validates CDI spec files (YAML or JSON) for edgegpu's tests: the JSON schema in
schema.json (written from the CDI specification), device names unique, and a cdiVersion
no lower than the content needs (the rules of the CDI library's specs-go/version.go:
0.4.0 for a mount type, 0.5.0 for a device name not starting with a letter or a device
node hostPath, 0.6.0 for annotations or a dot in the kind's class, 0.7.0 for intelRdt or
additionalGIDs). YAML and JSON are loaded strictly, as the CDI library loads them: a key
given twice in one mapping is an error. Prints one line per file; exits 1 if any file is
invalid. (The CDI project's own Go library checks the same files too: tests/cdi_validate.)

Usage: validate.py FILE...
"""
import json
import os
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def version_tuple(v):
    return tuple(int(x) for x in v.split("."))


def required_version(spec):
    need = (0, 3, 0)
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec["devices"]]
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        need = max(need, (0, 4, 0))
    if any(not d["name"][:1].isalpha() for d in spec["devices"]):
        need = max(need, (0, 5, 0))
    if any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", [])):
        need = max(need, (0, 5, 0))
    if spec.get("annotations") or any(d.get("annotations") for d in spec["devices"]):
        need = max(need, (0, 6, 0))
    if "." in spec["kind"].split("/", 1)[1]:
        need = max(need, (0, 6, 0))
    if any(e.get("intelRdt") or e.get("additionalGIDs") for e in edits):
        need = max(need, (0, 7, 0))
    return need


class StrictYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping repeating a key is an error (PyYAML keeps
    the last value silently; the CDI library's YAML decoder refuses the file)."""


def _mapping_without_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictYamlLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load(path):
    """The document in `path` (JSON by extension, else YAML), duplicate keys refused."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        def no_duplicates(pairs):
            keys = [k for k, _ in pairs]
            dup = {k for k in keys if keys.count(k) > 1}
            if dup:
                raise ValueError(f"duplicate keys {sorted(dup)}")
            return dict(pairs)
        return json.loads(text, object_pairs_hook=no_duplicates)
    return yaml.load(text, Loader=StrictYamlLoader)


def problems(path, schema):
    try:
        spec = load(path)
    except (ValueError, yaml.YAMLError) as e:
        return [f"not loadable: {e}".replace("\n", " ")]
    out = [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
           for e in jsonschema.Draft7Validator(schema).iter_errors(spec)]
    if out:
        return out
    names = [d["name"] for d in spec["devices"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        out.append(f"device names listed twice: {dup}")
    need = required_version(spec)
    if version_tuple(spec["cdiVersion"]) < need:
        out.append(f"cdiVersion {spec['cdiVersion']} is below what the content needs ({'.'.join(map(str, need))})")
    return out


def main(argv):
    with open(os.path.join(HERE, "schema.json"), encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    bad = 0
    for path in argv[1:]:
        found = problems(path, schema)
        if found:
            bad += 1
            for p in found:
                print(f"{path}: INVALID: {p}")
        else:
            print(f"{path}: valid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
