#!/bin/sh
# Smoke check of a running qlshadow service, with curl only:
#
#   scripts/smoke.sh BASE_URL TOKEN        e.g. scripts/smoke.sh http://127.0.0.1:5600 "$TOKEN"
#
# It checks /health, creates a temporary cron (due only on the 1st of a month six months
# on), sends a running and an idle callback with a fresh execution_id, checks that the cron
# went running -> idle and, when Shadow is on, that the Run exists and is exited; then it
# deletes the cron (also when a check failed or the script is interrupted).
# One line per check: "ok - ...", "FAIL - ..." or "skip - ...". Exit 0 only when none
# failed. POSIX sh: runs under BusyBox ash, dash and bash.

usage() {
	cat <<EOF
usage: $0 BASE_URL TOKEN

Smoke check of a running qlshadow service: /health, a temporary cron (deleted at the
end), a running and an idle callback, and, when Shadow is on, its Run. One line per check
("ok - ...", "FAIL - ...", "skip - ..."); exit 0 only when none failed, 2 on a usage
mistake. TOKEN: a system token, e.g. the "value" in \$QL_DATA_DIR/token.json.
EOF
}
case ${1:-} in
	-h|--help) usage; exit 0 ;;
esac
if [ $# -ne 2 ] || [ -z "$1" ] || [ -z "$2" ]; then
	usage >&2
	exit 2
fi
command -v curl >/dev/null 2>&1 || { echo "FAIL - curl is not installed" >&2; exit 2; }

BASE=${1%/}
TOKEN=$2
NAME=qlshadow-smoke
failed=0
cron_id=

ok() { echo "ok - $*"; }
skip() { echo "skip - $*"; }
fail() {
	echo "FAIL - $*"
	failed=1
}

# request METHOD PATH [JSON]: sets CODE (HTTP status, 000 when there was no answer)
# and BODY. Every request carries the token; /health simply ignores it.
request() {
	if [ $# -ge 3 ]; then
		out=$(curl -sS --max-time 10 -X "$1" -H "Authorization: Bearer $TOKEN" \
			-H 'Content-Type: application/json' --data-binary "$3" \
			-w '\n%{http_code}' "$BASE$2" 2>&1)
	else
		out=$(curl -sS --max-time 10 -X "$1" -H "Authorization: Bearer $TOKEN" \
			-w '\n%{http_code}' "$BASE$2" 2>&1)
	fi
	CODE=${out##*
}
	BODY=${out%
*}
	case $CODE in
		[0-9][0-9][0-9]) ;;
		*) BODY=$out CODE=000 ;;
	esac
}

# What a failed request said, in one line: the server's message or curl's error.
said() {
	printf '%s' "HTTP $CODE: $(printf '%s' "$BODY" | tr '\n' ' ' | cut -c1-200)"
}

# json_int KEY: the integer value of "KEY" in BODY (compact JSON, KEY appearing once).
json_int() {
	printf '%s' "$BODY" | sed -n "s/^[^{]*{.*\"$1\":\([0-9][0-9]*\).*/\1/p" | head -n 1
}

cleanup() {
	[ -n "$cron_id" ] || return 0
	request DELETE /open/crons "[$cron_id]"
	if [ "$CODE" = 200 ]; then
		request GET "/open/crons/$cron_id"
		if [ "$CODE" = 404 ]; then
			ok "temporary cron $cron_id deleted"
		else
			fail "temporary cron $cron_id still answers after delete ($(said))"
		fi
	else
		fail "delete temporary cron $cron_id ($(said))"
	fi
	cron_id=
}

finish() {
	cleanup
	exit "$failed"
}
trap finish EXIT
trap 'failed=1; exit' INT TERM HUP

# 1. health
request GET /health
case $CODE:$BODY in
	200:*'"status":"ok"'*)
		ok "health: $BASE answers, database ok"
		;;
	*)
		fail "health: $BASE/health ($(said))"
		exit
		;;
esac
shadow=off
case $BODY in
	*'"shadow_origins":['*'"scheduled_system"'*']'*) shadow=on ;;
esac

# 2. a temporary cron
now=$(date +%s)
# A valid schedule not due for months: midnight on the 1st of the month six months on (a
# schedule that never fires is refused).
month=$(date +%m)
month=$(( (${month#0} + 5) % 12 + 1 ))
request POST /open/crons \
	"{\"name\":\"$NAME-$now\",\"command\":\"true\",\"schedule\":\"0 0 1 $month *\"}"
cron_id=$(json_int id)
if [ "$CODE" = 200 ] && [ -n "$cron_id" ]; then
	ok "temporary cron $cron_id created"
else
	cron_id=
	fail "create temporary cron ($(said))"
	exit
fi

# 3. a fresh execution_id, as the task scripts build it
uuid=
[ -r /proc/sys/kernel/random/uuid ] && read -r uuid < /proc/sys/kernel/random/uuid
[ -n "$uuid" ] || uuid=$(uuidgen 2>/dev/null | tr 'ABCDEF' 'abcdef')
h='[0-9a-f]'
case $uuid in
	$h$h$h$h$h$h$h$h-$h$h$h$h-4$h$h$h-[89ab]$h$h$h-$h$h$h$h$h$h$h$h$h$h$h$h) ;;
	*)
		fail "no version 4 UUID from /proc/sys/kernel/random/uuid or uuidgen"
		exit
		;;
esac
eid="legacy-system:$now:$uuid"
log_path="$NAME/$now.log"
pid=$$

# 4. running callback -> cron status 0
request PUT /open/crons/status "{\"ids\":[$cron_id],\"status\":0,\"pid\":$pid,\"log_path\":\"$log_path\",\"last_execution_time\":$now,\"execution_id\":\"$eid\"}"
if [ "$CODE" = 200 ]; then
	ok "running callback accepted ($eid)"
else
	fail "running callback ($(said))"
fi
request GET "/open/crons/$cron_id"
status=$(json_int status)
if [ "$CODE" = 200 ] && [ "$status" = 0 ]; then
	ok "cron $cron_id is running after the running callback"
else
	fail "cron $cron_id is not running after the running callback (status '$status', $(said))"
fi

# 5. idle callback with the same execution_id -> cron status 1
request PUT /open/crons/status "{\"ids\":[$cron_id],\"status\":1,\"pid\":$pid,\"log_path\":\"$log_path\",\"last_running_time\":1,\"exit_code\":0,\"execution_id\":\"$eid\"}"
if [ "$CODE" = 200 ]; then
	ok "idle callback accepted"
else
	fail "idle callback ($(said))"
fi
request GET "/open/crons/$cron_id"
status=$(json_int status)
if [ "$CODE" = 200 ] && [ "$status" = 1 ]; then
	ok "cron $cron_id is idle after the idle callback"
else
	fail "cron $cron_id is not idle after the idle callback (status '$status', $(said))"
fi

# 6. the Shadow Run
if [ "$shadow" = on ]; then
	# The cron id may be a reused one (SQLite hands out a deleted cron's id again),
	# so look for our execution_id rather than at every run of the cron.
	request GET "/open/runs?cron_id=$cron_id&limit=500"
	key="\"idempotency_key\":\"$eid\""
	runs=$(printf '%s' "$BODY" | grep -o "$key" | wc -l | tr -d ' ')
	run=${BODY#*"$key"}
	run=${run%%'"idempotency_key"'*}
	case $CODE:$runs:$run in
		200:1:*'"state":"exited"'*)
			ok "Shadow Run for $eid exists and is exited"
			;;
		*)
			fail "Shadow Run for $eid: expected one exited run, found $runs ($(said))"
			;;
	esac
else
	skip "Shadow Run check skipped: Shadow is off on this server (scheduled_system not in shadow_origins)"
fi

exit
