# Helpers that task.sh loads with '.': execution ids, the service token, status callbacks.
#
# POSIX sh only: this runs unchanged under BusyBox ash, dash and bash, on routers that have
# nothing but BusyBox. No arrays, no double-bracket tests, no jq. Every name starts with ql_ so that the
# helpers never clobber a variable of the task they wrap. Builtins are preferred over
# commands: each fork costs a router a few milliseconds and some memory.

# Character classes are spelled out: a range such as [a-f] may match other letters in
# some locales, and the execution_id must be strictly lowercase.
ql_hex='[0123456789abcdef]'
ql_hex4=$ql_hex$ql_hex$ql_hex$ql_hex
ql_tokchars='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-'

# ql_is_uuid4 TEXT: true when TEXT is a canonical lowercase version 4 UUID, nothing more.
ql_is_uuid4() {
  case $1 in
    $ql_hex4$ql_hex4-$ql_hex4-4$ql_hex$ql_hex$ql_hex-[89ab]$ql_hex$ql_hex$ql_hex-$ql_hex4$ql_hex4$ql_hex4)
      return 0 ;;
  esac
  return 1
}

# ql_new_uuid: set ql_uuid from the first provider whose output is a valid v4 UUID: the
# kernel (read without a fork), then uuidgen, python3, node. Returns 1 with ql_uuid empty
# when none gives one; the caller then sends no execution_id at all.
ql_new_uuid() {
  ql_uuid=
  if [ -r /proc/sys/kernel/random/uuid ]; then
    read -r ql_uuid < /proc/sys/kernel/random/uuid
    ql_is_uuid4 "$ql_uuid" && return 0
  fi
  for ql_source in uuidgen python3 node; do
    command -v "$ql_source" >/dev/null 2>&1 || continue
    case $ql_source in
      uuidgen) ql_uuid=$(uuidgen 2>/dev/null) ;;
      python3) ql_uuid=$(python3 -S -c 'import uuid; print(uuid.uuid4())' 2>/dev/null) ;;
      node) ql_uuid=$(node -e 'console.log(require("crypto").randomUUID())' 2>/dev/null) ;;
    esac
    ql_is_uuid4 "$ql_uuid" && return 0
  done
  ql_uuid=
  return 1
}

# ql_note TEXT: one line in the task's log (never on stdout: crond would mail it).
ql_note() {
  printf 'qlshadow: %s\n' "$*" >> "$ql_log" 2>/dev/null
}

# ql_read_token FILE: set ql_token and ql_token_exp from token.json, which the service
# writes as one line {"value": "...", "expiration": N}. Returns 1 unless both are sane.
ql_read_token() {
  ql_token= ql_token_exp= ql_json=
  [ -r "$1" ] || return 1
  IFS= read -r ql_json < "$1"
  case $ql_json in
    *'"value"'*'"expiration"'* | *'"expiration"'*'"value"'*) ;;
    *) return 1 ;;
  esac
  ql_rest=${ql_json#*'"value"'}
  ql_rest=${ql_rest#*'"'}
  ql_token=${ql_rest%%'"'*}
  ql_rest=${ql_json#*'"expiration"'}
  ql_rest=${ql_rest#*:}
  ql_rest=${ql_rest#"${ql_rest%%[!' ']*}"}
  ql_token_exp=${ql_rest%%[!0123456789]*}
  case $ql_token in '' | *[!$ql_tokchars]*) ql_token= ; return 1 ;; esac
  case $ql_token_exp in '') ql_token= ; return 1 ;; esac
  return 0
}

# ql_load_token NOW: a token that is still valid a minute from NOW, refreshed with
# `qlshadow token system` when token.json is missing, unreadable or (nearly) expired.
ql_load_token() {
  ql_token_file=$ql_data/token.json
  if ql_read_token "$ql_token_file" && [ "$ql_token_exp" -gt $(($1 + 60)) ]; then
    return 0
  fi
  # QL_CLI is a command line written by the service (for example an absolute path to the
  # qlshadow script); eval lets it carry its own quoting.
  if ! eval "${QL_CLI:-qlshadow} token system" >/dev/null 2>>"$ql_log" </dev/null; then
    ql_note "token refresh failed (${QL_CLI:-qlshadow} token system)"
  fi
  if ql_read_token "$ql_token_file" && [ "$ql_token_exp" -gt "$1" ]; then
    return 0
  fi
  ql_note "no valid token in $ql_token_file; callbacks are sent without one"
  ql_token=
  return 1
}

# ql_bounded SECONDS COMMAND...: run COMMAND, killing it after SECONDS. Used only when
# no `timeout` command exists; the watchdog's output goes to /dev/null so that a command
# substitution around this does not wait for it.
ql_bounded() {
  ql_secs=$1
  shift
  "$@" &
  ql_child=$!
  (sleep "$ql_secs" && kill "$ql_child") >/dev/null 2>&1 &
  ql_dog=$!
  wait "$ql_child"
  ql_bounded_rc=$?
  kill "$ql_dog" 2>/dev/null
  return $ql_bounded_rc
}

# ql_post JSON: send one status callback. Returns 0 when the service answered 200;
# otherwise sets ql_post_error. One attempt bounded by QL_CALLBACK_TIMEOUT seconds
# (default 5), never a retry: the task must not wait on the service, and the service
# handles a lost callback (the Run is closed by the other one).
ql_post() {
  ql_url=${QL_BASE_URL:-http://127.0.0.1:5600}/open/crons/status
  ql_post_error=
  ql_wait=${QL_CALLBACK_TIMEOUT:-5}
  case $ql_wait in '' | 0 | *[!0123456789]*) ql_wait=5 ;; esac
  if command -v curl >/dev/null 2>&1; then
    # The Authorization header goes through curl's config on stdin, not the command
    # line, where any user could read it in ps.
    ql_out=$(printf 'header = "Authorization: Bearer %s"\n' "$ql_token" |
      curl -sS -K - -o /dev/null -w '%{http_code}' --connect-timeout "$ql_wait" --max-time "$ql_wait" \
        -X PUT -H 'Content-Type: application/json' --data-binary "$1" "$ql_url" 2>&1)
    case $ql_out in
      200) return 0 ;;
      [0123456789][0123456789][0123456789]) ql_post_error="HTTP $ql_out from $ql_url" ;;
      *) ql_post_error="curl: $ql_out" ;;
    esac
    return 1
  fi
  if command -v wget >/dev/null 2>&1; then
    # BusyBox wget sends only GET and POST (the service takes POST too). Debian's BusyBox
    # 1.35 wget has no -T and crashes when given it, so time is bounded from outside;
    # -t 1 keeps GNU wget from retrying (BusyBox accepts and ignores it).
    set -- wget -q -t 1 -O /dev/null --header 'Content-Type: application/json' \
      --header "Authorization: Bearer $ql_token" --post-data "$1" "$ql_url"
    if command -v timeout >/dev/null 2>&1; then
      ql_out=$(timeout "$ql_wait" "$@" 2>&1)
    else
      ql_out=$(ql_bounded "$ql_wait" "$@" 2>&1)
    fi
    ql_wget_rc=$?
    [ "$ql_wget_rc" -eq 0 ] && return 0
    ql_post_error="wget exit $ql_wget_rc: $ql_out"
    return 1
  fi
  ql_post_error="neither curl nor wget is installed"
  return 1
}
