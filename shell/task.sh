#!/bin/sh
# task.sh COMMAND...: run one cron task and report it to qlshadow.
#
# The arguments are joined into one shell command, run by a new `/bin/sh -c` as crond
# runs a crontab line ($0 is /bin/sh and $# is 0, not this script's). Output goes to
# $QL_DATA_DIR/log/<name>/<time>-<pid>.log. Around the command two status callbacks
# (running, then idle with the duration and exit code) go to $QL_BASE_URL; a callback that
# fails is noted in the log and never stops the task or changes its exit code, which is
# the command's own.
#
# Environment (crontab lines written by qlshadow set what they need, because crond gives
# a task almost nothing; nothing secret is on a line):
#   ID                   the cron id; without it no callback is sent
#   QL_DATA_DIR          runner-token.json, runner.env, runner.conf and log/ (default ./data)
#   QL_LOG_NAME          the log folder name (default cron_<ID>)
#   QL_WORK_DIR          the directory the task runs in: absolute as is, relative under
#                        QL_DATA_DIR; one that cannot be entered fails the task (exit 1)
#   QL_TASK_BEFORE       shell text run before the command, in its shell and directory
#   QL_TASK_AFTER        shell text run after the command, whatever its exit code
#   QL_ESCAPED=1         the command, the three above and QL_DATA_DIR are written with
#                        printf %b escapes (\0ooo): a crontab line cannot hold a line break,
#                        BusyBox crond cuts it at '#', Vixie cron at '%'
#   QL_EXECUTION_ORIGIN  =scheduled_system only on active lines of a system-mode crontab:
#                        only then is an execution_id made, once, for both callbacks
#   QL_CLAIM=1           the cron's hosts_mode is `one`: before anything else the task
#                        claims its firing (POST /open/crons/<ID>/claim with its start
#                        second); when another host has it, the task exits 0 having run
#                        and recorded nothing; when the claim cannot be made (service or
#                        database unreachable) the task does not run either, notes why
#                        in its log and exits 75: `one` means never twice
# From $QL_DATA_DIR/runner.env (written by the service, 0600), unless set in the
# environment: QL_BASE_URL (default http://127.0.0.1:5600), QL_CLI (the qlshadow command
# line that refreshes the token; default qlshadow), QL_CALLBACK_TIMEOUT (seconds per
# callback; default 5).
#
# POSIX sh: BusyBox ash, dash and bash run this unchanged.

case $0 in
  */*) ql_dir=${0%/*} ;;
  *) ql_dir=. ;;
esac
. "$ql_dir/common.sh"

ql_usage="usage: task.sh COMMAND...
Run COMMAND (its words joined, by /bin/sh -c) as one cron task: its output goes to
\$QL_DATA_DIR/log/<name>/, a running and an idle callback go to qlshadow around it, and
the exit status is the command's own. ID names the cron; the other QL_* variables are
listed at the top of this script."
if [ $# -eq 0 ]; then
  echo "$ql_usage" >&2
  exit 2
fi
if [ "$*" = --help ]; then
  echo "$ql_usage"
  exit 0
fi
ql_cmd=$*
ql_work=${QL_WORK_DIR:-}
ql_before=${QL_TASK_BEFORE:-}
ql_after=${QL_TASK_AFTER:-}
ql_data=${QL_DATA_DIR:-./data}
if [ "${QL_ESCAPED:-}" = 1 ]; then
  # The '.' keeps trailing line breaks, which a command substitution would drop.
  ql_cmd=$(printf '%b.' "$ql_cmd"); ql_cmd=${ql_cmd%.}
  ql_data=$(printf '%b.' "$ql_data"); ql_data=${ql_data%.}
  [ -z "$ql_work" ] || { ql_work=$(printf '%b.' "$ql_work"); ql_work=${ql_work%.}; }
  [ -z "$ql_before" ] || { ql_before=$(printf '%b.' "$ql_before"); ql_before=${ql_before%.}; }
  [ -z "$ql_after" ] || { ql_after=$(printf '%b.' "$ql_after"); ql_after=${ql_after%.}; }
  QL_DATA_DIR=$ql_data
fi
# Consumed here, like the marker below: a task.sh that the command starts must not run
# this cron's hooks again.
ql_claim=${QL_CLAIM:-}
unset QL_ESCAPED QL_WORK_DIR QL_TASK_BEFORE QL_TASK_AFTER QL_CLAIM

# QingLong's `task` word: a command whose first word is `task` runs with a shell command of
# that name calling ql-task.sh (by absolute path: the task may cd), so that
# `task a.js && task b.py` works as it did on QingLong.
ql_first=${ql_cmd#"${ql_cmd%%[! 	]*}"}
case $ql_first in
  task | 'task '* | 'task	'*)
    case $ql_dir in /*) ql_abs=$ql_dir ;; *) ql_abs=$PWD/$ql_dir ;; esac
    ql_quote "$ql_abs/ql-task.sh"
    ql_cmd="task() { /bin/sh $ql_q \"\$@\"; }
$ql_cmd" ;;
esac

# One date call gives the start second (the execution_id's seconds and
# last_execution_time) and the log file's name.
ql_stamp=$(date '+%s %Y-%m-%d-%H-%M-%S')
ql_begin=${ql_stamp%% *}

# The marker is consumed here: commands the task starts (even another task.sh) do not
# inherit it, so nothing but the crontab line itself can claim a system-crond run.
ql_origin=${QL_EXECUTION_ORIGIN:-}
unset QL_EXECUTION_ORIGIN
ql_eid=
if [ "$ql_origin" = scheduled_system ] && ql_new_uuid; then
  ql_eid="legacy-system:$ql_begin:$ql_uuid"
fi

ql_id=${ID:-}
case $ql_id in '' | 0* | *[!0123456789]*) ql_id= ;; esac

# Absolute, so that the log and a relative work_dir still resolve after the task's cd.
case $ql_data in /*) ;; *) ql_data=$PWD/$ql_data ;; esac
case $ql_work in '' | /*) ;; *) ql_work=$ql_data/$ql_work ;; esac
ql_name=${QL_LOG_NAME:-}
case $ql_name in
  '' | .* | *[!.$ql_tokchars]*) ql_name=${ql_id:+cron_$ql_id} ; ql_name=${ql_name:-task} ;;
esac
ql_rel=$ql_name/${ql_stamp#* }-$$.log
ql_log=$ql_data/log/$ql_rel
# Logs are for the service's user only (commands print secrets); the umask is set in a
# subshell so that files the command creates keep the user's own.
if ! (umask 077
      [ -d "$ql_data/log/$ql_name" ] || mkdir -p "$ql_data/log/$ql_name" 2>/dev/null
      : >> "$ql_log") 2>/dev/null; then
  ql_log=/dev/null
fi

ql_base_url= ql_cli= ql_timeout=
ql_read_runner_env "$ql_data/runner.env"
ql_base_url=${QL_BASE_URL:-${ql_base_url:-http://127.0.0.1:5600}}
ql_cli=${QL_CLI:-${ql_cli:-qlshadow}}
ql_timeout=${QL_CALLBACK_TIMEOUT:-$ql_timeout}

ql_send() {
  [ -n "$ql_id" ] || return 0
  if ! ql_post "$2"; then
    ql_note "$1 callback not delivered: $ql_post_error"
  fi
}

ql_extra=${ql_eid:+",\"execution_id\":\"$ql_eid\""}
if [ -n "$ql_id" ]; then
  ql_load_token "$ql_begin"
else
  ql_note "no numeric ID in the environment: status callbacks are not sent"
fi

# hosts_mode `one`: the database gives this firing to the first host that claims it.
if [ "$ql_claim" = 1 ] && [ -n "$ql_id" ] && [ "$ql_origin" = scheduled_system ]; then
  if ! ql_post "{\"at\":$ql_begin}" "/open/crons/$ql_id/claim"; then
    if [ "$ql_code" = 409 ]; then
      # Another host runs it: nothing of this one is kept, not even its empty log.
      [ "$ql_log" = /dev/null ] || rm -f "$ql_log" 2>/dev/null
      exit 0
    fi
    ql_note "the firing could not be claimed ($ql_post_error): a cron run by one host at a time does not run where the claim fails"
    exit 75
  fi
fi
ql_send running "{\"ids\":[$ql_id],\"status\":0,\"pid\":$$,\"log_path\":\"$ql_rel\",\"last_execution_time\":$ql_begin$ql_extra}"

# The task runs in a new `/bin/sh -c` shell, as crond would run the command itself (by
# that absolute path, whatever PATH holds): $0 is /bin/sh, there are no positional
# parameters, and none of this script's variables (the token among them) reach it.
# Without hooks the command is that shell's whole script. With hooks a
# small script runs them and the command; the texts travel in the environment and are
# unset before anything runs. In that shell, as in 2.x, task_before runs in the command's
# own shell, so what it sets, exports or where it cds reaches the command. A failing
# task_before is noted and the command runs anyway (2.x does the same: the command is what
# the cron is for); only an `exit` in task_before ends the run there, with its code. The
# command gets a subshell when task_after follows, so that neither its `exit` nor
# task_after's can change the code reported, which is always the command's.
ql_shell='ql_cmd=$QL_RUN_COMMAND ql_before=$QL_RUN_BEFORE ql_after=$QL_RUN_AFTER
ql_log=$QL_RUN_LOG
unset QL_RUN_COMMAND QL_RUN_BEFORE QL_RUN_AFTER QL_RUN_LOG
ql_note() { printf "qlshadow: %s\n" "$*" >> "$ql_log" 2>/dev/null; }
if [ -n "$ql_before" ]; then
  trap '"'"'ql_note "task_before called exit $?: the command did not run"'"'"' EXIT
  eval "$ql_before"
  ql_rc=$?
  trap - EXIT
  [ "$ql_rc" -eq 0 ] || ql_note "task_before exited $ql_rc; the command runs anyway"
fi
if [ -z "$ql_after" ]; then
  eval "$ql_cmd"
  exit
fi
(eval "$ql_cmd")
ql_rc=$?
(eval "$ql_after") || ql_note "task_after exited $?"
exit "$ql_rc"'
(
  if [ -n "$ql_work" ] && ! cd "$ql_work" 2>/dev/null; then
    ql_note "work_dir $ql_work cannot be entered (missing, not a directory or not permitted): the task did not run"
    exit 1
  fi
  if [ -z "$ql_before" ] && [ -z "$ql_after" ]; then
    exec /bin/sh -c "$ql_cmd" /bin/sh
  fi
  QL_RUN_COMMAND=$ql_cmd QL_RUN_BEFORE=$ql_before QL_RUN_AFTER=$ql_after QL_RUN_LOG=$ql_log
  export QL_RUN_COMMAND QL_RUN_BEFORE QL_RUN_AFTER QL_RUN_LOG
  exec /bin/sh -c "$ql_shell" /bin/sh
) >> "$ql_log" 2>&1
ql_status=$?

ql_end=$(date +%s)
ql_took=$((ql_end - ql_begin))
# A clock stepped back (NTP after boot) must not produce a negative duration.
[ "$ql_took" -ge 0 ] || ql_took=0
ql_send idle "{\"ids\":[$ql_id],\"status\":1,\"pid\":$$,\"log_path\":\"$ql_rel\",\"last_execution_time\":$ql_begin,\"last_running_time\":$ql_took,\"exit_code\":$ql_status$ql_extra}"
exit "$ql_status"
