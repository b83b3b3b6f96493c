# shellcheck shell=bash
# Sourced by the scripts before they do anything: `-h`/`--help` prints the script's header
# comment (its usage) and exits 0; an option the script does not take is refused (exit 2)
# before anything runs. Arguments that are not options (paths, names) are the script's to
# check.
#
#   . scripts/lib/args.sh
#   script_args "$0" "--check --smoke" "$@"    # the options it takes, space-separated

script_usage() {
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$1"
}

script_args() {
    local script=$1 known=" $2 " arg
    shift 2
    for arg in "$@"; do
        case "$arg" in
        -h | --help)
            script_usage "$script"
            exit 0
            ;;
        -*)
            if [[ "$known" != *" ${arg%%=*} "* ]]; then
                echo "$script: unknown option '$arg' (see --help)" >&2
                exit 2
            fi
            ;;
        esac
    done
}
