#!/bin/sh
# ql-task.sh FILE [now] [ARGS...]: QingLong's `task` word, for crons brought from QingLong.
#
# task.sh makes `task` run this script when a command's first word is `task`. It runs the
# script FILE of the scripts folder (QL_SCRIPTS_DIR, default $QL_DATA_DIR/scripts; FILE may
# be sub/x.js, or an absolute path) with the interpreter its extension names: .js node,
# .py/.pyc python3, .sh sh, in the script's folder, with ARGS. `now` is dropped (we never add
# QingLong's random delay). Exported variables of QingLong's config.sh (QL_NOTIFY_FILE) and
# env.sh (QL_ENV_FILE) are added to its environment; both files are read, never sourced:
# only `export KEY=VALUE` lines count, VALUE bare, in single quotes or in double quotes
# (\" \\ \$ \` escapes, nothing expanded), and every other line is ignored.
# QL_SCRIPTS_DIR, QL_NOTIFY_FILE and QL_ENV_FILE come from the environment, else from
# $QL_DATA_DIR/runner.env (ql_scripts_dir=, ql_notify_file=, ql_env_file=), which qlshadow
# writes from its settings of those names.
#
# Failures are one line on stderr, which task.sh writes to the task log: exit 127 when the
# script, its interpreter or its kind is missing, 2 for QingLong's forms we do not run
# (`conc`, `desi`, options such as -l and -m; the API refuses them too).
#
# POSIX sh: BusyBox ash, dash and bash run this unchanged. Every name starts with ql_, and
# a key of that form in the files is skipped, so that a file cannot change this script.

ql_usage='use task FILE [now] [ARGS...]'
ql_fail() {
  ql_rc=$1
  shift
  printf 'qlshadow: task: %s\n' "$*" >&2
  exit "$ql_rc"
}

[ $# -gt 0 ] || ql_fail 2 "no script named; $ql_usage"
case $1 in
  -*) ql_fail 2 "QingLong's option $1 is not supported here; $ql_usage" ;;
esac
ql_file=$1
shift
case ${1-} in
  now) shift ;;
  conc | desi) ql_fail 2 "QingLong's 'task FILE $1' (a run per account) is not supported here; $ql_usage" ;;
esac
case $ql_file in
  *.js) ql_prog=node ;;
  *.py | *.pyc) ql_prog=python3 ;;
  *.sh) ql_prog=sh ;;
  *) ql_fail 127 "cannot run $ql_file: only .js (node), .py (python3) and .sh (sh) scripts are run" ;;
esac

ql_data=${QL_DATA_DIR:-./data}
ql_scripts= ql_notify= ql_envs=
if [ -r "$ql_data/runner.env" ]; then
  while IFS= read -r ql_line; do
    case $ql_line in
      ql_scripts_dir=*) ql_scripts=${ql_line#*=} ;;
      ql_notify_file=*) ql_notify=${ql_line#*=} ;;
      ql_env_file=*) ql_envs=${ql_line#*=} ;;
    esac
  done < "$ql_data/runner.env"
fi
ql_scripts=${QL_SCRIPTS_DIR:-${ql_scripts:-$ql_data/scripts}}
ql_notify=${QL_NOTIFY_FILE:-$ql_notify}
ql_envs=${QL_ENV_FILE:-$ql_envs}

case $ql_file in
  /*) ql_path=$ql_file ql_dir=$ql_scripts ql_run=$ql_file ;;
  */*) ql_path=$ql_scripts/$ql_file ql_dir=$ql_scripts/${ql_file%/*} ql_run=${ql_file##*/} ;;
  *) ql_path=$ql_scripts/$ql_file ql_dir=$ql_scripts ql_run=$ql_file ;;
esac
[ -f "$ql_path" ] || ql_fail 127 "no script $ql_path (the scripts folder is QL_SCRIPTS_DIR=$ql_scripts)"
command -v "$ql_prog" >/dev/null 2>&1 || ql_fail 127 "$ql_prog is not installed; it runs $ql_file"
cd "$ql_dir" 2>/dev/null || ql_fail 1 "cannot enter the folder $ql_dir"

ql_nl='
'

# ql_single TEXT: the rest of a single-quoted value into ql_val; ql_open stays set while
# no closing quote has been seen.
ql_single() {
  ql_head=${1%%\'*}
  ql_val=$ql_val$ql_head
  [ "$ql_head" = "$1" ] || ql_open=
}

# ql_double TEXT: the same for a double-quoted value, undoing \" \\ \$ \` and joining a line
# that ends in a backslash to the next (ql_join).
ql_double() {
  ql_text=$1 ql_join=
  while :; do
    ql_head=${ql_text%%[\"\\]*}
    ql_val=$ql_val$ql_head
    [ "$ql_head" != "$ql_text" ] || return 0
    ql_text=${ql_text#"$ql_head"}
    case $ql_text in
      \"*) ql_open= ; return 0 ;;
      \\) ql_join=1 ; return 0 ;;
      \\[\"\\\$\`]*) ql_text=${ql_text#?} ; ql_val=$ql_val${ql_text%"${ql_text#?}"} ;;
      *) ql_val=$ql_val\\ ;;
    esac
    ql_text=${ql_text#?}
  done
}

# ql_put: export the finished KEY=VALUE, unless the key is one of this script's.
ql_put() {
  case $ql_key in
    ql_*) ;;
    *) export "$ql_key=$ql_val" ;;
  esac
}

# ql_load FILE: export the `export KEY=VALUE` lines of FILE.
ql_load() {
  [ -n "$1" ] || return 0
  if [ ! -r "$1" ]; then
    printf 'qlshadow: task: cannot read %s; its variables are not set\n' "$1" >&2
    return 0
  fi
  ql_open=
  while IFS= read -r ql_line || [ -n "$ql_line" ]; do
    if [ -n "$ql_open" ]; then
      [ -n "$ql_join" ] || ql_val=$ql_val$ql_nl
      if [ "$ql_open" = "'" ]; then ql_single "$ql_line"; else ql_double "$ql_line"; fi
      [ -n "$ql_open" ] || ql_put
      continue
    fi
    ql_line=${ql_line#"${ql_line%%[! 	]*}"}
    case $ql_line in
      export[\ \	]*) ql_line=${ql_line#export} ;;
      *) continue ;;
    esac
    ql_line=${ql_line#"${ql_line%%[! 	]*}"}
    ql_key=${ql_line%%=*}
    case $ql_key in
      '' | [0123456789]* | *[!ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_]*) continue ;;
    esac
    [ "$ql_key" != "$ql_line" ] || continue  # `export KEY` alone sets nothing
    ql_rest=${ql_line#*=} ql_val= ql_join=
    case $ql_rest in
      \'*) ql_open="'" ; ql_single "${ql_rest#?}" ;;
      \"*) ql_open='"' ; ql_double "${ql_rest#?}" ;;
      *) ql_val=${ql_rest%%[ 	]*} ;;
    esac
    [ -n "$ql_open" ] || ql_put
  done < "$1"
}

# config.sh first, then env.sh, as QingLong reads them: a key in both takes env.sh's value.
ql_load "$ql_notify"
ql_load "$ql_envs"
exec "$ql_prog" "$ql_run" "$@"
