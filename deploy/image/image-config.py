#!/usr/bin/env python3
"""Prints the `buildah config` arguments that give an image the metadata its Containerfile's final
stage declares (ENTRYPOINT, CMD, USER, ENV, LABEL, WORKDIR), one argument per line, so that
scripts/build-images.sh, which builds without a container engine, and a `docker buildx build` of
the Containerfile give the same image configuration. Any other instruction in the final stage
besides FROM and COPY is an error: this reader would not reproduce it.

Usage: image-config.py CONTAINERFILE
"""

import json
import shlex
import sys

SUPPORTED = {"FROM", "COPY", "ENTRYPOINT", "CMD", "USER", "ENV", "LABEL", "WORKDIR"}


def instructions(text):
    """(keyword, argument text) of each instruction, continuation lines joined."""
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#") and current:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    for line in logical:
        keyword, _, rest = line.partition(" ")
        yield keyword.upper(), rest.strip()


def pairs(argument):
    """key=value pairs of ENV / LABEL (quoted values allowed)."""
    for word in shlex.split(argument):
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {word!r}")
        yield key, value


def config_args(text):
    final = []
    for keyword, argument in instructions(text):
        if keyword == "FROM":
            final = []
        final.append((keyword, argument))
    args = []
    for keyword, argument in final:
        if keyword not in SUPPORTED:
            raise ValueError(f"{keyword} in the final stage is not reproduced by scripts/build-images.sh")
        if keyword in ("ENTRYPOINT", "CMD"):
            args += [f"--{keyword.lower()}", json.dumps(json.loads(argument))]
        elif keyword in ("USER", "WORKDIR"):
            args += [f"--{keyword.lower()}", argument]
        elif keyword in ("ENV", "LABEL"):
            for key, value in pairs(argument):
                args += [f"--{keyword.lower()}", f"{key}={value}"]
    return args


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1], encoding="utf-8") as handle:
            args = config_args(handle.read())
    except (OSError, ValueError) as error:
        sys.exit(f"image-config: {sys.argv[1]}: {error}")
    print("\n".join(args))


if __name__ == "__main__":
    main()
