#!/bin/sh
# tick.sh: the alert tick that qlshadow's crontab block runs every minute (docs/ALERTS.md).
#
# It asks the running service to tick: POST /open/notify/tick with the runner's token,
# through the callbacks' own transport (common.sh: curl, else BusyBox nc, else wget). The
# service answers 202 at once and ticks in its background, so a minute costs this shell
# and one request, and no Python starts. Only when the service does not answer does this
# start the Python tick, `qlshadow --config <data dir>/notify.conf notify`, which then
# reports the outage once (--unanswered WHY); when the service answered without ticking
# (a refused token, say) that tick runs with --answered, which ends an outage.
#
# Environment: QL_DATA_DIR, the data dir (the crontab line sets it), holding runner.env
# (ql_base_url, ql_cli, ql_timeout), runner-token.json and notify.conf. QL_BASE_URL, QL_CLI
# and QL_CALLBACK_TIMEOUT in the environment win over runner.env, as for task.sh.
#
# POSIX sh: BusyBox ash, dash and bash run this unchanged.

if [ "$*" = --help ]; then
  echo "usage: tick.sh
The alert tick qlshadow's crontab block runs every minute: it asks the running service
(POST /open/notify/tick with the runner's token); only when the service does not answer
does it run \`qlshadow notify\`, which reports the outage once. Takes no arguments.
Environment: QL_DATA_DIR, the data dir (holding runner.env, runner-token.json and
notify.conf); QL_BASE_URL, QL_CLI and QL_CALLBACK_TIMEOUT win over runner.env."
  exit 0
fi

case $0 in
  */*) ql_dir=${0%/*} ;;
  *) ql_dir=. ;;
esac
. "$ql_dir/common.sh"

ql_data=${QL_DATA_DIR:-./data}
case $ql_data in /*) ;; *) ql_data=$PWD/$ql_data ;; esac
ql_log=/dev/null  # common.sh's notes: the fallback tick says what matters
ql_base_url= ql_cli= ql_timeout=
ql_read_runner_env "$ql_data/runner.env"
ql_base_url=${QL_BASE_URL:-${ql_base_url:-http://127.0.0.1:5600}}
ql_cli=${QL_CLI:-${ql_cli:-qlshadow}}
ql_timeout=${QL_CALLBACK_TIMEOUT:-$ql_timeout}
ql_tick=/open/notify/tick

# The token file is read without a clock: a token the service refuses (expired, or none
# yet) is refreshed, which starts Python, about once a month, and the request is made again.
ql_http= ql_post_error=
if ql_read_token "$ql_data/runner-token.json"; then
  ql_post '{}' "$ql_tick" && exit 0
fi
if [ -z "$ql_token" ] || [ "$ql_http" = 401 ]; then
  if ql_load_token "$(date +%s)"; then
    ql_post '{}' "$ql_tick" && exit 0
  fi
fi

# What the request saw, as one line (curl's message ends with a line break).
ql_why=${ql_post_error:-no answer from $ql_base_url$ql_tick}
while :; do
  case $ql_why in
    *"$ql_nl") ql_why=${ql_why%"$ql_nl"} ;;
    *"$ql_nl"*) ql_why="${ql_why%%"$ql_nl"*} ${ql_why#*"$ql_nl"}" ;;
    *"$ql_cr"*) ql_why="${ql_why%%"$ql_cr"*}${ql_why#*"$ql_cr"}" ;;
    *) break ;;
  esac
done
ql_quote "$ql_why"
ql_why=$ql_q
ql_quote "$ql_data/notify.conf"
ql_conf=$ql_q
if [ -z "$ql_token" ]; then
  ql_answer=  # not asked: whether the service runs is not known here
else
  case $ql_http in
    '' | 5??) ql_answer="--unanswered $ql_why" ;;
    *) ql_answer=--answered ;;
  esac
fi
# ql_cli is a command line written by the service; eval lets it carry its own quoting.
eval "exec $ql_cli --config $ql_conf notify $ql_answer"
