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

# ql_quote TEXT: set ql_q to TEXT as one single-quoted shell word.
ql_quote() {
  ql_q= ql_rest=$1
  while :; do
    case $ql_rest in
      *\'*) ql_q=$ql_q${ql_rest%%\'*}\'\\\'\' ; ql_rest=${ql_rest#*\'} ;;
      *) break ;;
    esac
  done
  ql_q="'$ql_q$ql_rest'"
}

ql_nl='
'
ql_cr=$(printf '\r')

# ql_note TEXT: one line in the task's log (never on stdout: crond would mail it). Line
# breaks inside TEXT become spaces, so each note is exactly one line.
ql_note() {
  ql_line=$*
  while :; do
    case $ql_line in
      *"$ql_nl"*) ql_line="${ql_line%%"$ql_nl"*} ${ql_line#*"$ql_nl"}" ;;
      *"$ql_cr"*) ql_line="${ql_line%%"$ql_cr"*}${ql_line#*"$ql_cr"}" ;;
      *) break ;;
    esac
  done
  printf 'qlshadow: %s\n' "$ql_line" >> "$ql_log" 2>/dev/null
}

# ql_read_token FILE: set ql_token and ql_token_exp from a token file, which the service
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

# ql_read_runner_env FILE: ql_base_url, ql_cli and ql_timeout from runner.env, which the
# service writes as name=value lines (read, never sourced: values are taken verbatim).
ql_read_runner_env() {
  [ -r "$1" ] || return 0
  while IFS= read -r ql_line; do
    case $ql_line in
      ql_base_url=*) ql_base_url=${ql_line#*=} ;;
      ql_cli=*) ql_cli=${ql_line#*=} ;;
      ql_timeout=*) ql_timeout=${ql_line#*=} ;;
    esac
  done < "$1"
}

# ql_load_token NOW: the runner's callback-only token, still valid a minute from NOW,
# refreshed with `qlshadow token runner` when the file is missing, unreadable or (nearly)
# expired. That command finds the database through runner.conf, so the database URL is
# never in a task's environment.
ql_load_token() {
  ql_token_file=$ql_data/runner-token.json
  if ql_read_token "$ql_token_file" && [ "$ql_token_exp" -gt $(($1 + 60)) ]; then
    return 0
  fi
  # ql_cli is a command line written by the service (for example an absolute path to the
  # qlshadow script); eval lets it carry its own quoting.
  if ! ql_err=$(
      if [ -z "${QL_CONFIG:-}" ] && [ -r "$ql_data/runner.conf" ]; then
        QL_CONFIG=$ql_data/runner.conf
        export QL_CONFIG
      fi
      eval "$ql_cli token runner" 2>&1 >/dev/null </dev/null); then
    ql_err=${ql_err#qlshadow: }
    ql_note "token refresh failed ($ql_cli token runner): ${ql_err:-no message}"
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
  # A background command's input is /dev/null unless redirected: keep ours (nc reads the
  # request from it).
  { "$@" <&5 5<&- & } 5<&0
  ql_child=$!
  (sleep "$ql_secs" && kill "$ql_child") >/dev/null 2>&1 &
  ql_dog=$!
  wait "$ql_child"
  ql_bounded_rc=$?
  kill "$ql_dog" 2>/dev/null
  return $ql_bounded_rc
}

# ql_timed COMMAND...: run COMMAND bounded by $ql_wait seconds.
ql_timed() {
  if command -v timeout >/dev/null 2>&1; then
    timeout "$ql_wait" "$@"
  else
    ql_bounded "$ql_wait" "$@"
  fi
}

# ql_post JSON [PATH]: send one status callback (or, with PATH, that request: tick.sh's).
# Returns 0 when the service answered 200 (or 202); otherwise sets ql_post_error to one
# line, and ql_http to the HTTP status when the service answered at all. One attempt
# bounded by the callback timeout (default 5 s), never a retry: the task must not wait on the service, and the service
# handles a lost callback (the Run is closed by the other one).
#
# The token never goes on a command line, where any local user could read it in ps:
# curl reads the header from its config on stdin; without curl, BusyBox nc gets the whole
# request from the shell's builtin printf. Only a box with neither curl nor nc sends it
# through wget's --header (in argv); it is the runner's token, which can post status
# callbacks and nothing else.
#
# ql_code is the HTTP status whenever one was read, 200 included (curl and nc; wget tells
# only a failed one): the claim of a `one` cron (task.sh) reads it.
ql_post() {
  ql_url=${ql_base_url:-http://127.0.0.1:5600}${2:-/open/crons/status}
  ql_post_error= ql_http= ql_code=
  ql_wait=${ql_timeout:-5}
  case $ql_wait in '' | 0 | *[!0123456789]*) ql_wait=5 ;; esac
  if command -v curl >/dev/null 2>&1; then
    # The status code follows a marker: on a failed connection curl prints its error on
    # stderr and 000 as the code, and neither belongs in the note as such.
    # A here-document, not `printf |`: one fork fewer per request.
    ql_out=$(curl -sS -K - -o /dev/null -w 'ql-http-code:%{http_code}' --connect-timeout "$ql_wait" \
        --max-time "$ql_wait" -X PUT -H 'Content-Type: application/json' --data-binary "$1" \
        "$ql_url" 2>&1 <<ql_header
header = "Authorization: Bearer $ql_token"
ql_header
)
    ql_code=${ql_out##*ql-http-code:}
    ql_out=${ql_out%ql-http-code:*}
    case $ql_code in
      200 | 202) return 0 ;;
      [123456789][0123456789][0123456789]) ql_http=$ql_code; ql_post_error="HTTP $ql_code from $ql_url" ;;
      *) ql_post_error=${ql_out:-curl could not reach $ql_url} ;;
    esac
    return 1
  fi
  case $ql_url in
    http://*) command -v nc >/dev/null 2>&1 && { ql_post_nc "$1"; return; } ;;
  esac
  if command -v wget >/dev/null 2>&1; then
    # BusyBox wget sends only GET and POST (the service takes POST too). Debian's BusyBox
    # 1.35 wget has no -T and crashes when given it, so time is bounded from outside;
    # -t 1 keeps GNU wget from retrying (BusyBox accepts and ignores it).
    ql_out=$(ql_timed wget -q -t 1 -O /dev/null --header 'Content-Type: application/json' \
      --header "Authorization: Bearer $ql_token" --post-data "$1" "$ql_url" 2>&1)
    ql_rc=$?
    [ "$ql_rc" -eq 0 ] && return 0
    case $ql_out in
      *'HTTP/1.'?' '[123456789][0123456789][0123456789]*)
        ql_http=${ql_out#*HTTP/1.? }; ql_http=${ql_http%%[!0123456789]*}; ql_code=$ql_http ;;
    esac
    ql_post_error=${ql_out:-wget exited $ql_rc (no answer from $ql_url within $ql_wait s)}
    return 1
  fi
  ql_post_error="neither curl nor nc nor wget is installed"
  return 1
}

# ql_post_nc JSON: the callback as a plain HTTP/1.0 request through nc, written by the
# builtin printf (no token in any argv). http:// only. The request goes through a FIFO
# held open until nc is done: the service drops a request whose sender half-closes the
# connection, which is what nc does when its input ends.
ql_post_nc() {
  ql_rest=${ql_url#http://}
  ql_hostport=${ql_rest%%/*}
  ql_path=/${ql_rest#*/}
  case $ql_hostport in
    \[*\]:*) ql_host=${ql_hostport%%]*}; ql_host=${ql_host#[}; ql_port=${ql_hostport##*]:} ;;
    \[*\]) ql_host=${ql_hostport#[}; ql_host=${ql_host%]}; ql_port=80 ;;
    *:*) ql_host=${ql_hostport%:*}; ql_port=${ql_hostport##*:} ;;
    *) ql_host=$ql_hostport; ql_port=80 ;;
  esac
  ql_fifo=$ql_data/.callback-$$
  # A leftover of a killed run with the same pid is removed only when it is in the way.
  if ! mkfifo -m 600 "$ql_fifo" 2>/dev/null &&
     ! { rm -f "$ql_fifo" && mkfifo -m 600 "$ql_fifo" 2>/dev/null; }; then
    ql_post_error="cannot make the FIFO $ql_fifo for nc"
    return 1
  fi
  ql_timed nc -w "$ql_wait" "$ql_host" "$ql_port" < "$ql_fifo" > "$ql_fifo.out" 2>&1 &
  ql_nc=$!
  # nc may be gone (connection refused) before the request is written: a write error,
  # not a SIGPIPE that would end the task.
  trap '' PIPE
  exec 4> "$ql_fifo"
  printf 'POST %s HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
    "$ql_path" "$ql_hostport" "$ql_token" "${#1}" "$1" >&4 2>/dev/null
  wait "$ql_nc"
  ql_rc=$?
  exec 4>&-
  trap - PIPE
  ql_out=
  IFS= read -r ql_out < "$ql_fifo.out"
  rm -f "$ql_fifo" "$ql_fifo.out"
  case $ql_out in
    'HTTP/1.'?' 200 '* | 'HTTP/1.'?' 202 '*) return 0 ;;
    'HTTP/1.'?' '[0123456789][0123456789][0123456789]*)
      ql_code=${ql_out#HTTP/1.? }
      ql_code=${ql_code%%[!0123456789]*}
      ql_http=$ql_code
      ql_post_error="HTTP $ql_code from $ql_url" ;;
    '') ql_post_error="nc exited $ql_rc (no answer from $ql_url within $ql_wait s)" ;;
    *) ql_post_error=${ql_out%"$ql_cr"} ;;
  esac
  return 1
}
