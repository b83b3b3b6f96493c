# shellcheck shell=bash
# Sourced (from the repository root) by the scripts that install tools into .tools/.
#
# edgegpu_tools_dir: makes sure .tools exists and prints its real path. A checkout without
# .tools gets a link to the per-user tools cache, ${EDGEGPU_TOOLS_DIR:-${XDG_CACHE_HOME:-~/.cache}/edgegpu-tools},
# which every checkout of the repository shares: a fresh clone (CI's, a second worktree)
# finds the toolchains, validators and Debian roots the last one installed instead of
# downloading and building them again. A .tools directory already in the checkout is used
# as it is. Each installer still checks what it needs and installs only what is missing.
#
# Create virtual environments and run their pip through the printed real path, never through
# the link: a venv writes its own path into its scripts' shebangs, and a path through a
# clone's .tools link would die with the clone.
edgegpu_tools_dir() {
    if [ ! -e .tools ] && [ ! -L .tools ]; then
        local cache=${EDGEGPU_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgegpu-tools}
        mkdir -p "$cache"
        ln -s "$cache" .tools
    fi
    (cd .tools && pwd -P)
}
