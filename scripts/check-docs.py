#!/usr/bin/env python3
"""Keeps the documentation's flags, names and figures in step with the code.

Reads README.md, docs/**/*.md and yocto/meta-edgegpu/README.md and checks them against the
programs themselves (their `--help`, subcommands included), the scripts' `--help`, the release
script, the workspace, the deployment manifests and the image build script:

  * flags: a `--flag` written after one of our programs or scripts (in a code block line or a
    backticked span: `edgegpu-node-setup apply --cdi`) is an option of that program; a row of a
    flag table (its first cell a backticked `--flag`) is an option of the program the page
    documents; any other `--flag` is an option of one of our programs or scripts, or follows the
    name of another tool (kubectl, helm, cargo, ...), or is one of the few other tools' flags
    named in prose (EXTERNAL_PROSE_FLAGS, each with its tool);
  * programs: the README's program table and docs/development.md's crate table name every
    binary scripts/build-release.sh ships and every workspace crate; the number of release
    binaries the README and docs/development.md give is what build-release.sh builds;
  * names: every `job/<name>` and `Job <namespace>/<name>` is a Job of deploy/ or the chart
    (or one k3s makes: helm-install-<chart>);
  * figures: the release profile's opt-level in docs/development.md is Cargo.toml's; every
    table of byte figures (`1,234,567 B`) names the command that measured it (a backticked
    `scripts/...`, `deploy/image/...` or `cargo ...` in the lines above it); the image size
    targets in docs/deploy.md are scripts/build-images.sh's, the plugin image sizes in its
    table meet them, and the size range its introduction gives covers them.

Node-setup's exit codes are not checked here (docs/node-setup.md's own table is).

Usage: scripts/check-docs.py [--bin-dir DIR]   (default: the cargo target directory's debug/,
where `cargo test --workspace` leaves the four programs; scripts/test.sh runs it after that)
Exit status 0 only when every check passed; each problem is printed as FILE:LINE: message.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The programs whose flags the docs name, and the scripts (with --help) they also name.
PROGRAMS = ["edgegpu-device-plugin", "edgegpu-labeller", "edgegpu-dra-driver", "edgegpu-node-setup", "devicequery"]
# The programs of the multi-call binary `edgegpu`, run as `edgegpu SUBCOMMAND`, from its own
# dispatch table (edgegpu/src/main.rs: installed name -> subcommand); the others are binaries
# of their own.
MULTI_CALL = {installed: subcommand for subcommand, installed in re.findall(
    r'subcommand: "([^"]+)",\s*installed_as: "([^"]+)"', (REPO / "edgegpu/src/main.rs").read_text())}
SCRIPTS = {
    "scripts/e2e-node.sh": ["--help"],
    "scripts/build-images.sh": ["--help"],
    "scripts/validate-manifests.sh": ["--help"],
    "scripts/build-packages.sh": ["--help"],
}
# Scripts without --help: their options, from their usage line.
SCRIPT_USAGE = ["scripts/test.sh", "scripts/check-yocto.sh", "scripts/mps-check.sh", "scripts/bench.sh",
                "scripts/build-release.sh", "scripts/regen-proto.sh", "scripts/setup.sh",
                "scripts/gen-crates-inc.py", "scripts/check-docs.py", "deploy/image/measure-image-size.sh",
                "deploy/generate.sh", "deploy/generate.py", "yocto/tools/check_layer.py"]

# Which program a page's flag table documents.
PAGE_PROGRAM = {
    "docs/device-plugin.md": "edgegpu-device-plugin",
    "docs/metrics.md": "edgegpu-device-plugin",
    "docs/sharing.md": "edgegpu-device-plugin",
    "docs/platforms/README.md": "edgegpu-device-plugin",
    "docs/node-setup.md": "edgegpu-node-setup",
    "docs/cdi.md": "edgegpu-node-setup",
    "docs/devicequery.md": "devicequery",
    "docs/labels.md": "edgegpu-labeller",
    "docs/dra.md": "edgegpu-dra-driver",
}

# Other tools: a --flag after one of these names is theirs.
EXTERNAL_COMMANDS = {
    "kubectl", "k3s", "helm", "cargo", "docker", "buildah", "skopeo", "systemctl", "nvidia-ctk",
    "ctr", "containerd", "dockerd", "nvidia-container-cli", "nvidia-smi", "git", "pip", "python3",
    "python", "bitbake", "bitbake-layers", "kubelet", "apt-get", "readelf", "qemu-aarch64-static",
    "cargo-zigbuild", "kubernetes-validate", "yamllint", "oelint-adv", "shellcheck", "hadolint",
    "sudo", "install", "curl", "tar", "rustup", "journalctl", "mount", "go", "zig", "repo",
    "yocto-check-layer", "deviceQuery", "nvidia-cdi-hook", "tegrastats", "k3s-agent", "kas",
    "dcgm-exporter", "podman", "crictl", "nerdctl", "runc", "setup.sh", "buildx",
    "dpkg", "dpkg-deb", "apt", "lintian", "debootstrap", "sha256sum", "unshare", "trtexec",
    "nvpmodel", "jetson_clocks",
}
# Words that only prefix the command that follows them.
PREFIXES = {"sudo", "env", "exec", "time", "nohup"}
# Options whose value names a crate, binary or image, not a command.
VALUE_OPTIONS = {"-p", "--package", "--bin", "--example", "--bench", "-t", "--tag", "--test"}
# Flags of other tools that the docs name in prose, away from the tool's name.
EXTERNAL_PROSE_FLAGS = {
    "--take-ownership": "helm install (3.17+)",
    "--kube-version": "helm template",
    "--kubelet-arg": "k3s server/agent",
    "--default-runtime": "k3s (v1.29+)",
    "--container-runtime-endpoint": "k3s / kubelet",
    "--docker": "k3s",
    "--data-dir": "k3s",
    "--node-label": "k3s",
    "--write-kubeconfig-mode": "k3s",
    "--token": "k3s server/agent (the join token)",
    "--system-reserved": "kubelet",
    "--cgroup-root": "dockerd",
    "--add-runtime": "dockerd",
    "--log-opt": "dockerd",
    "--device": "docker run / podman",
    "--mode": "nvidia-ctk cdi generate",
    "--device-name-strategy": "nvidia-ctk cdi generate",
    "--config-file": "nvidia-container-runtime",
    "--link": "nvidia-ctk hook create-symlinks",
    "--folder": "nvidia-ctk hook update-ldcache",
    "--feature": "nvidia-ctk / cargo features",
    "--api-versions": "helm template",
    "--show-only": "helm template",
    "--set": "helm install",
    "--strict": "helm lint / kubernetes-validate / yamllint",
    "--frozen": "cargo (oe-core builds with it)",
    "--locked": "cargo",
    "--all-targets": "cargo",
    "--workspace": "cargo",
    "--release": "cargo",
    "--bench": "cargo",
    "--bin": "cargo",
    "--example": "cargo",
    "--target": "cargo",
    "--manifest-path": "cargo",
    "--now": "systemctl",
    "--all": "skopeo copy",
    "--validate": "nvidia-ctk / kubectl",
    "--platform": "docker buildx",
    "--push": "docker buildx",
    "--cdi-spec-dir": "dockerd",
    "--label": "dockerd",
    "--flag": "a placeholder for any flag",
}

MD_FILES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")),
            "yocto/meta-edgegpu/README.md"]

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


# --------------------------------------------------------------------------------- programs


def target_dir():
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return Path(json.loads(out)["target_directory"])


def help_flags(command):
    """Long options a clap --help lists (the option lines only), and its subcommands."""
    result = subprocess.run([*command, "--help"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} --help: exit {result.returncode}: {result.stderr}")
    text = result.stdout
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", text, re.M))
    for aliases in re.findall(r"\[aliases?: ([^\]]*)\]", text):
        flags |= set(FLAG.findall(aliases))
    commands = []
    section = re.search(r"^Commands:\n((?:  .*\n|\s*\n)*)", text, re.M)
    if section:
        commands = [c for c in re.findall(r"^  ([a-z][a-z0-9-]*)\s", section.group(1), re.M) if c != "help"]
    return flags, commands


def program_command(bin_dir, program):
    """The command line that starts `program` from the binaries in `bin_dir`."""
    if program in MULTI_CALL:
        return [str(bin_dir / "edgegpu"), MULTI_CALL[program]]
    return [str(bin_dir / program)]


def program_flags(command):
    """Every long option of a program and of its subcommands, recursively."""
    flags = set()
    queue = [command]
    while queue:
        command = queue.pop()
        own, subcommands = help_flags(command)
        flags |= own
        queue.extend(command + [c] for c in subcommands)
    return flags


def script_flags():
    flags = {}
    for script, args in SCRIPTS.items():
        result = subprocess.run([str(REPO / script), *args], capture_output=True, text=True, cwd=REPO)
        flags[script] = set(FLAG.findall(result.stdout + result.stderr))
    for script in SCRIPT_USAGE:
        path = REPO / script
        if not path.exists():
            problem(script, "missing: update scripts/check-docs.py SCRIPT_USAGE")
        elif script.endswith(".py"):  # argparse options
            flags[script] = set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", path.read_text()))
        else:  # the options its header comment (usage) names
            flags[script] = set(FLAG.findall(path.read_text().split("\nset -", 1)[0]))
    # The README's simulation example.
    flags["simulate"] = set(FLAG.findall((REPO / "plugin" / "examples" / "simulate.rs").read_text()))
    return flags


# ------------------------------------------------------------------------------------- docs


def spans(path):
    """(line number, text) of every code block line (a line ending in a backslash joined with
    the next) and of every backticked span of PATH."""
    in_block = False
    pending, pending_number = "", 0
    for number, line in enumerate((REPO / path).read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            if pending:
                line, number = pending + " " + line.strip(), pending_number
            if line.endswith("\\"):
                pending, pending_number = line[:-1], number
                continue
            pending = ""
            yield number, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def segments(text):
    """The shell commands of TEXT: split at pipes, lists, command substitutions and comments."""
    return re.split(r"\|\||&&|\||;|\$\(|(?:^|\s)#", text)


def command_of(segment, ours):
    """The program or tool SEGMENT runs (the first one it names, after sudo/env), or None: ours
    by name or path, another tool by name. Ours followed by a colon is its output, not a
    command; a name after -p/--bin/... is an argument."""
    words = segment.split()
    previous = None
    for word in words:
        if word in PREFIXES or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", word):
            previous = word
            continue
        if previous in VALUE_OPTIONS:
            previous = word
            continue
        previous = word
        clean = word.strip("()'\"")
        base = clean.rsplit("/", 1)[-1]
        for name in ours:
            if clean.rstrip(":") == name or clean.endswith("/" + name) or ("/" not in name and clean in (
                    f"./{name}", f"/usr/bin/{name}") or base == name and clean.startswith(("target/", "dist/"))):
                # `edgegpu-node-setup: error: …` is its output, not a command line.
                return None if clean.endswith(":") else name
        if base in EXTERNAL_COMMANDS:
            return base
    return None


def check_flags(known, scripts):
    ours = {**known, **scripts}
    every = set().union(*known.values(), *scripts.values())
    for path in MD_FILES:
        if not (REPO / path).exists():
            continue
        owner = PAGE_PROGRAM.get(path)
        lines = (REPO / path).read_text().splitlines()
        for number, text in spans(path):
            where = f"{path}:{number}"
            for segment in segments(text):
                name = command_of(segment, ours)
                for flag in FLAG.findall(segment):
                    if flag in ("--help", "--version"):
                        continue
                    if name is not None:
                        if name in ours and flag not in ours[name]:
                            problem(where, f"{flag} is not an option of {name} (its --help lists "
                                           f"{', '.join(sorted(ours[name])) or 'none'})")
                        continue
                    row = lines[number - 1].lstrip()
                    if owner and row.startswith("| `--") and row.split("|")[1].strip().startswith(f"`{flag}"):
                        if flag not in known[owner]:
                            problem(where, f"{flag} (a row of this page's flag table) is not an option of {owner}")
                        continue
                    if flag not in every and flag not in EXTERNAL_PROSE_FLAGS:
                        problem(where, f"{flag} is not an option of any edgegpu program or script, and no other "
                                       "tool runs it (scripts/check-docs.py EXTERNAL_PROSE_FLAGS)")


# -------------------------------------------------------------------------------- programs


WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
         "twelve": 12}


def bash_array(text, name):
    match = re.search(rf"^{name}=\(([^)]*)\)", text, re.M)
    return match.group(1).split() if match else []


def check_programs():
    release = (REPO / "scripts" / "build-release.sh").read_text()
    gnu_bins, musl_bins = bash_array(release, "GNU_BINS"), bash_array(release, "MUSL_BINS")
    count = (len(gnu_bins) * len(bash_array(release, "GNU_TARGETS"))
             + len(musl_bins) * len(bash_array(release, "MUSL_TARGETS")))
    if not gnu_bins or not musl_bins or count == 0:
        problem("scripts/build-release.sh", "GNU_BINS/MUSL_BINS/…_TARGETS not found: update scripts/check-docs.py")
        return
    readme = (REPO / "README.md").read_text()
    for number, line in enumerate(readme.splitlines(), 1):
        match = re.search(r"(\d+|\w+) stripped binaries", line)
        if match:
            said = int(match.group(1)) if match.group(1).isdigit() else WORDS.get(match.group(1))
            if said != count:
                problem(f"README.md:{number}", f"says {match.group(1)} stripped binaries; "
                                               f"scripts/build-release.sh builds {count}")
    development = (REPO / "docs" / "development.md").read_text()
    for number, line in enumerate(development.splitlines(), 1):
        match = re.search(r"produces (\d+|\w+) stripped binaries", line)
        if match:
            said = int(match.group(1)) if match.group(1).isdigit() else WORDS.get(match.group(1))
            if said != count:
                problem(f"docs/development.md:{number}", f"says {match.group(1)} stripped binaries; "
                                                         f"scripts/build-release.sh builds {count}")
    table = "\n".join(line for line in readme.splitlines() if line.startswith("| `"))
    for binary in gnu_bins + musl_bins:
        if f"| `{binary}` |" not in table:
            problem("README.md", f"the program table lacks `{binary}`, which scripts/build-release.sh ships")
    crates = "\n".join(line for line in development.splitlines() if line.startswith("| `"))
    workspace = (REPO / "Cargo.toml").read_text()
    members = re.search(r"members\s*=\s*\[([^\]]*)\]", workspace).group(1)
    for member in re.findall(r'"([^"]+)"', members):
        package = re.search(r'^name\s*=\s*"([^"]+)"', (REPO / member / "Cargo.toml").read_text(), re.M).group(1)
        if f"| `{package}` (`{member}/`) |" not in crates:
            problem("docs/development.md", f"the workspace table lacks `{package}` (`{member}/`)")
    for binary in gnu_bins + musl_bins:
        if f"binary `{binary}`" not in crates:
            problem("docs/development.md", f"the workspace table names no crate shipping binary `{binary}`")


# ------------------------------------------------------------------------------------- jobs


def job_names():
    """The Jobs of the manifests in deploy/ (rendered from the chart, the test hooks' included)."""
    names = set()
    for path in (REPO / "deploy").rglob("*.yaml"):
        if "helm" in path.relative_to(REPO / "deploy").parts:
            continue
        for document in re.split(r"^---", path.read_text(), flags=re.M):
            if re.search(r"^kind: Job\s*$", document, re.M):
                name = re.search(r"^metadata:\n(?:  .*\n)*?  name: (\S+)", document, re.M)
                if name:
                    names.add(name.group(1))
    return names


def check_jobs():
    known = job_names()
    if not known:
        problem("deploy/", "no Job found: update scripts/check-docs.py")
        return
    for path in MD_FILES + ["deploy/devicequery/job.yaml"]:
        if not (REPO / path).exists():
            continue
        for number, line in enumerate((REPO / path).read_text().splitlines(), 1):
            for name in re.findall(r"(?:\bjob/|\bJob [a-z0-9-]+/|job\.batch/)([a-z0-9][a-z0-9-]*)", line):
                if name in known or name.startswith("helm-install-"):  # k3s's helm controller's
                    continue
                problem(f"{path}:{number}", f"Job {name!r} is not a Job of deploy/ or the chart "
                                            f"({', '.join(sorted(known))})")


# ---------------------------------------------------------------------------------- figures


def check_figures():
    cargo = (REPO / "Cargo.toml").read_text()
    profile = re.search(r"^\[profile\.release\]\n((?:.*\n)*?)(?:\[|\Z)", cargo, re.M).group(1)
    opt = re.search(r"^opt-level\s*=\s*(\S+)", profile, re.M).group(1)
    development = (REPO / "docs" / "development.md").read_text()
    for number, line in enumerate(development.splitlines(), 1):
        for said in re.findall(r"`opt-level = ([^`]+)`", line):
            if said != opt:
                problem(f"docs/development.md:{number}", f"opt-level = {said}; Cargo.toml's release profile "
                                                         f"has opt-level = {opt}")

    # Tables of byte figures name the command that produced them.
    for path in MD_FILES:
        if not (REPO / path).exists():
            continue
        lines = (REPO / path).read_text().splitlines()
        for number, line in enumerate(lines, 1):
            starts_table = line.startswith("|") and (number < 2 or not lines[number - 2].startswith("|"))
            if not starts_table:
                continue
            rows = []
            for row in lines[number - 1:]:
                if not row.startswith("|"):
                    break
                rows.append(row)
            if not any(re.search(r"\b\d{1,3}(?:,\d{3})+ B\b", row) for row in rows):
                continue
            context = "\n".join(lines[max(0, number - 16):number - 1])
            if not re.search(r"`(?:scripts/|deploy/image/|cargo )[^`]*`", context):
                problem(f"{path}:{number}", "a table of byte figures with no command that produced them "
                                            "(a backticked scripts/…, deploy/image/… or cargo … above it)")

    # docs/deploy.md: the image targets are build-images.sh's, the plugin's sizes meet them and
    # the introduction's range covers them.
    images = (REPO / "scripts" / "build-images.sh").read_text()
    targets = {name: int(value.replace("_", "")) for name, value in
               re.findall(r'"([a-z-]+)": (\d[\d_]*)', re.search(r"targets = \{([^}]*)\}", images).group(1))}
    deploy = (REPO / "docs" / "deploy.md").read_text()
    sizes = []
    for number, line in enumerate(deploy.splitlines(), 1):
        row = re.match(r"\| (edgegpu-device-plugin|devicequery|edgegpu-node-setup) \| linux/\w+ \|.*?"
                       r"\*\*([\d,]+) B = [\d.]+ MB\*\* \|.*\| ≤ (\d+) MB \|$", line)
        if not row:
            continue
        image, size, target = row.group(1), int(row.group(2).replace(",", "")), int(row.group(3))
        if targets.get(image) != target * 1_000_000:
            problem(f"docs/deploy.md:{number}", f"target ≤ {target} MB; scripts/build-images.sh has "
                                                f"{targets.get(image)} bytes for {image}")
        if size > target * 1_000_000:
            problem(f"docs/deploy.md:{number}", f"{image} is {size} bytes, over its {target} MB target")
        if image == "edgegpu-device-plugin":
            sizes.append(size / 1e6)
    if not sizes:
        problem("docs/deploy.md", "no edgegpu-device-plugin row in the size table (section 4.1)")
        return
    intro = re.search(r"a (\d+(?:\.\d+)?)–(\d+(?:\.\d+)?) MB image", deploy)
    if not intro:
        problem("docs/deploy.md", "the introduction gives no 'a X–Y MB image' range")
    elif not (float(intro.group(1)) <= round(min(sizes), 1) and round(max(sizes), 1) <= float(intro.group(2))):
        problem("docs/deploy.md", f"the introduction says {intro.group(1)}–{intro.group(2)} MB; the size "
                                  f"table (4.1) has {min(sizes):.2f}–{max(sizes):.2f} MB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", type=Path,
                        help="where the binaries are: edgegpu, edgegpu-node-setup, devicequery "
                             "(default: <target>/debug)")
    args = parser.parse_args()
    bin_dir = args.bin_dir or target_dir() / "debug"
    if not MULTI_CALL:
        sys.exit("check-docs: no program found in edgegpu/src/main.rs's dispatch table (PROGRAMS)")
    binaries = {Path(program_command(bin_dir, p)[0]) for p in PROGRAMS}
    missing = sorted(b.name for b in binaries if not b.is_file())
    if missing:
        sys.exit(f"check-docs: {', '.join(missing)} not in {bin_dir}: run `cargo build --workspace --bins` "
                 "(or cargo test --workspace) first, or pass --bin-dir")
    known = {p: program_flags(program_command(bin_dir, p)) for p in PROGRAMS}
    check_flags(known, script_flags())
    check_programs()
    check_jobs()
    check_figures()
    for line in problems:
        print(line)
    print(f"check-docs: {len(MD_FILES)} pages, {sum(len(f) for f in known.values())} program options: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
