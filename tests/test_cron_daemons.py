"""Every accepted cron runs exactly as written under real BusyBox crond and Debian's cron.

One crond minute for the whole module: a batch of hostile-but-valid crons (quotes, '#',
'%', backslashes, $(...), a trailing backslash, line separators, commands at the length
limit, every day-of-week form) is created through the API of one server per daemon; each
daemon runs its crontab at the same target minute. Each cron must run exactly once (its
minute field is the target minute, so a slow test cannot see a second run) with the exact
bytes: its output equals what `sh -c` makes of the same text here. Crons whose schedule
says another day must not run. Refused crons get a 400 and change nothing.

Debian's cron runs in a private mount namespace (`unshare -m`, tests run as root) with its
own empty spool, /etc/crontab, /etc/cron.d and /run, so the machine's crontabs are
neither read nor touched; the server installs into it through `nsenter`.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from helpers import http, stop_process
from shellenv import IN_CI, SYSTEM_PATH, busybox_static, runs_of, start_module_server, wait_for

# It waits for one target minute of both daemons.
pytestmark = pytest.mark.slow

DAYS = "sun mon tue wed thu fri sat".split()
SETUP_SECONDS = 30  # creating the batch must end before the target minute begins

# A namespace holder: private spool, no system crontabs, its own /run (cron's pid file).
NAMESPACE = """set -e
mount -t tmpfs tmpfs /var/spool/cron/crontabs
chmod 1730 /var/spool/cron/crontabs
mount -t tmpfs tmpfs /etc/cron.d
mount -t tmpfs tmpfs /run
: > "$0"
mount --bind "$0" /etc/crontab
exec sleep 100000
"""


def _need(tool: str) -> str:
    found = shutil.which(tool, path=SYSTEM_PATH)
    if not found:
        reason = f"{tool} is not installed (apt-get install -y cron util-linux)"
        if IN_CI:
            pytest.fail(reason + " — required in CI")
        pytest.skip(reason)
    return found


class Daemon:
    """One cron daemon with its own spool, and how the server installs into it."""

    def __init__(self, name: str, tmp):
        self.name, self.tmp, self.processes = name, tmp, []
        if name == "busybox":
            self.bb = busybox_static()
            self.spool = str(tmp / "spool")
            os.makedirs(self.spool)
            self.install = f"{self.bb} crontab -c {self.spool} {{file}}"
            self.list = f"{self.bb} crontab -c {self.spool} -l"
            return
        if os.geteuid() != 0:
            pytest.skip("Debian's cron needs root for a private mount namespace")
        cron, unshare, nsenter = _need("cron"), _need("unshare"), _need("nsenter")
        errors = str(tmp / "namespace.err")
        with open(errors, "wb") as err:
            holder = subprocess.Popen([unshare, "-m", "sh", "-c", NAMESPACE, str(tmp / "empty")],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=err, start_new_session=True)
        self.processes.append(holder)
        self.enter = [nsenter, "-t", str(holder.pid), "-m"]
        ready = wait_for(lambda: self._entered("test -f /etc/crontab && ! test -s /etc/crontab "
                                               "&& mountpoint -q /etc/cron.d"), timeout=10)
        if not ready:
            self.stop()
            with open(errors, encoding="utf-8", errors="replace") as fh:
                pytest.fail(f"the private namespace for cron did not come up: {fh.read()}")
        self.cron = cron
        # Through stdin: Debian's crontab reads at most 99 bytes of a file name, and a test's
        # temp path (under pytest-xdist above all) can be longer. docs/INSTALL.md says the same.
        self.install = f"{nsenter} -t {holder.pid} -m sh -c 'exec crontab - < \"$0\"' {{file}}"
        self.list = f"{nsenter} -t {holder.pid} -m crontab -l"

    def _entered(self, script: str) -> bool:
        return subprocess.run([*self.enter, "sh", "-c", script],
                              capture_output=True).returncode == 0

    def start(self) -> None:
        env = {"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"}
        if self.name == "busybox":
            argv = [self.bb, "crond", "-f", "-c", self.spool, "-L", str(self.tmp / "crond.log")]
        else:
            argv = [*self.enter, self.cron, "-f"]
        self.processes.append(subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))

    def put(self, text: str) -> None:
        """Install text as the user's crontab, the way the user would (before qlshadow)."""
        path = self.tmp / "users-own.crontab"
        path.write_text(text)
        argv = [word.replace("{file}", str(path)) for word in shlex.split(self.install)]
        subprocess.run(argv, check=True, capture_output=True)

    def installed(self) -> str:
        return subprocess.run(shlex.split(self.list), capture_output=True, text=True).stdout

    def stop_daemon(self) -> None:
        """Stop crond itself; the namespace holder stays so its spool can still be listed."""
        self.stop(self.processes[-1:] if self.name == "busybox" else self.processes[1:])

    def stop(self, processes=None) -> None:
        for process in reversed(self.processes if processes is None else processes):
            stop_process(process)
        if processes is None:
            # The lock file of this private crontab (crontab.lock_path): no one else uses it.
            import types
            from qlshadow.host.crontab import lock_path
            try:
                os.unlink(lock_path(types.SimpleNamespace(crontab_list=self.list,
                                                          crontab_install=self.install)))
            except (FileNotFoundError, AttributeError):
                pass  # never installed into, or the daemon never came up


def hostile_commands(base: str) -> dict:
    """name -> cron fields; each writes ./out in its own work dir."""
    nl = "\n"
    return {
        "plain": {"command": "echo plain > out"},
        "hash": {"command": "echo start > out; echo '#tag' >> out # a comment"},
        "hash_in_before": {"command": "echo cmd >> out",
                           "task_before": "echo before > out # comment 'unclosed"},
        "percent": {"command": "printf '%s %d%%\\n' '100% done' 50 > out; date +%s >/dev/null"},
        "escaped_percent": {"command": "echo '100\\% and \\\\%' > out"},
        "backslashes": {"command": "printf '%s\\n' 'a\\b\\\\c\\n' \"d\\\\e\" > out"},
        "trailing_backslash": {"command": "echo tail > out; echo x >> out \\"},
        "substitutions": {"command": "echo \"$(echo sub)\" `echo tick` $((6*7)) '$(no)' > out"},
        "quotes": {"command": "echo \"it's\" 'say \"hi\"' '' \"\" > out"},
        "newlines": {"command": f"echo one > out{nl}echo two >> out{nl}{nl}"},
        "crlf_tab": {"command": "printf 'a\\tb\\r\\n' > out;\r\nprintf 'c\td\\n' >> out"},
        "unicode_separators": {"command": "printf '%s\\n' '中文 \u2028 \u0085 \u00a0 x' > out"},
        "vertical_formfeed": {"command": "printf '%s\\n' 'v\vf\f' > out"},
        "heredoc": {"command": f"cat > out <<'EOF'{nl}#!% \\ $HOME `x` '\"{nl}EOF"},
        "exit_code": {"command": "echo failing > out; exit 3"},
        "hooks": {"command": "echo cmd >> out",
                  "task_before": f"echo 'before #1 %s \\' > out{nl}X=from_before",
                  "task_after": "echo \"after $X 100%\" >> out \\"},
        "work_dir": {"command": "pwd > out", "work_dir": os.path.join(base, "w #%\\ 'x\ny")},
    }


def expected_output(fields: dict, scratch: str) -> bytes:
    """What sh makes of the same texts here, run the way task.sh runs them."""
    if fields.get("work_dir", "").endswith("y"):
        return (fields["work_dir"] + "\n").encode()
    os.makedirs(scratch, exist_ok=True)
    env = {"PATH": SYSTEM_PATH, "B": fields.get("task_before", ""), "C": fields["command"],
           "A": fields.get("task_after", "")}
    subprocess.run(["sh", "-c", 'eval "$B"; (eval "$C"); [ -z "$A" ] || (eval "$A")'],
                   cwd=scratch, env=env, capture_output=True)
    with open(os.path.join(scratch, "out"), "rb") as fh:
        return fh.read()


def day_schedules(minute: int, when: time.struct_time) -> dict:
    """name -> (schedule, whether it runs at that minute on that day, read as Vixie cron does)."""
    dow = (when.tm_wday + 1) % 7  # Python: Monday 0; cron: Sunday 0
    other = (dow + 3) % 7
    odd_day = when.tm_mday % 2 == 1
    return {
        "dow_7": (f"{minute} * * * 7", dow == 0),
        "dow_5_7": (f"{minute} * * * 5-7", dow in (5, 6, 0)),
        "dow_0_7": (f"{minute} * * * 0-7", True),
        "dow_today": (f"{minute} * * * {dow}", True),
        "dow_today_7": (f"{minute} * * * {dow or 7}", True),
        "dow_name": (f"{minute} * * * {DAYS[dow].upper()}", True),
        "dow_other": (f"{minute} * * * {other}", False),
        "dow_other_name": (f"{minute} * * * {DAYS[other]}", False),
        "dow_range_names": (f"{minute} * * * sun-sat", True),
        "dow_step": (f"{minute} * * * */2", dow % 2 == 0),
        "dom_step": (f"{minute} * */2 * *", odd_day),
        "dom_full_or_dow": (f"{minute} * 1-31 * {other}", True),
        "dom_or_dow": (f"{minute} * {when.tm_mday} * {other}", True),
        "minute_step": (f"{minute}-59/60 * * * *", True),
        "month_names": (f"{minute} * * jan-dec *", True),
    }


def _shorten(server, body: dict, key: str) -> dict:
    """Post body; on the 400 naming the byte excess, cut the padding and post again."""
    status, answer = http("POST", f"{server.url}/open/crons", body, server.headers)
    assert status == 400, answer
    assert f"'{key}'" in answer["message"]
    excess = int(re.search(r"shorten it by (\d+) bytes", answer["message"]).group(1))
    per_char = 5 if body[key].endswith("%' > out") else 1
    cut = math.ceil(excess / per_char)
    end = len("' > out")
    body = dict(body, **{key: body[key][:-(cut + end)] + body[key][-end:]})
    status, answer = http("POST", f"{server.url}/open/crons", body, server.headers)
    assert status == 200, answer
    return answer["data"]


def users_own_crontab(minute: int, out: str) -> str:
    """What the user's crontab held before qlshadow: environment, comments, a job of the
    target minute, and lines that look like qlshadow's but are not in its block."""
    return ("MAILTO=\"\"\n"
            "# the user's own jobs\n"
            f"{minute} * * * * echo users-own >> {out}\n"
            "# BEGIN qlshadow /srv/elsewhere\n"
            "# 0 0 1 1 * ID=9 QL_EXECUTION_ORIGIN=scheduled_system /x/task.sh true\n"
            "# END qlshadow /srv/elsewhere\n")


class Batch:
    def __init__(self, daemon: Daemon, server, base: str):
        self.daemon, self.server, self.base = daemon, server, base
        self.crons = {}  # name -> (cron json, fields, should run)
        self.users_own = ""  # the user's crontab before qlshadow installed anything
        self.users_out = ""  # where the user's own job writes


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    started, cleanups, problems = {}, [], {}
    start = time.time()
    target = math.ceil((start + SETUP_SECONDS) / 60) * 60
    minute = time.localtime(target).tm_min
    when = time.localtime(target)
    try:
        for name in ("busybox", "debian"):
            tmp = tmp_path_factory.mktemp(f"daemon-{name}")
            try:
                daemon = Daemon(name, tmp)
            except pytest.skip.Exception as exc:
                problems[name] = str(exc)
                continue
            cleanups.append(daemon.stop)
            users_out = str(tmp / "users-own.out")
            users_own = users_own_crontab(minute, users_out)
            daemon.put(users_own)
            server, cleanup = start_module_server(tmp_path_factory, "sqlite",
                                                  QL_SCHEDULER="system",
                                                  QL_CRONTAB_INSTALL=daemon.install,
                                                  QL_CRONTAB_LIST=daemon.list)
            cleanups.append(cleanup)
            batch = Batch(daemon, server, str(tmp / "work"))
            batch.users_own, batch.users_out = users_own, users_out
            for cname, fields in hostile_commands(batch.base).items():
                work = fields.get("work_dir") or os.path.join(batch.base, cname)
                os.makedirs(work, exist_ok=True)
                body = {"name": cname, "schedule": f"{minute} * * * *", "work_dir": work, **fields}
                status, answer = http("POST", f"{server.url}/open/crons", body, server.headers)
                assert status == 200, (cname, answer)
                batch.crons[cname] = (answer["data"], body, True)
            for cname, (schedule, runs) in day_schedules(minute, when).items():
                work = os.path.join(batch.base, cname)
                os.makedirs(work)
                body = {"name": cname, "schedule": schedule, "work_dir": work,
                        "command": f"echo {cname} >> out"}
                status, answer = http("POST", f"{server.url}/open/crons", body, server.headers)
                assert status == 200, (cname, answer)
                batch.crons[cname] = (answer["data"], body, runs)
            for cname, pad in (("long_ascii", "y"), ("long_percent", "%")):
                work = os.path.join(batch.base, cname)
                os.makedirs(work)
                body = {"name": cname, "schedule": f"{minute} * * * *", "work_dir": work,
                        "command": "printf '%s' '" + pad * 1200 + "' > out" if pad == "%"
                        else "echo '" + pad * 1200 + "' > out"}
                cron = _shorten(server, body, "command")
                with open(os.path.join(server.data_dir, "crontab.list"), encoding="utf-8") as fh:
                    line = [text for text in fh if f" ID={cron['id']} " in text][0]
                batch.crons[cname] = (cron, dict(body, command=cron["command"]), True)
                batch.crons[cname][1]["line_bytes"] = len(line.rstrip("\n").split(" ", 5)[5].encode())
            started[name] = batch
        if time.time() > target - 2:
            pytest.fail(f"creating the batch took {time.time() - start:.0f} s, past the target minute")
        for batch in started.values():
            batch.daemon.start()
        # Every expected run has exited on the server, then a little longer for strays.
        deadline = target + 40
        for batch in started.values():
            expected = {c["id"] for c, _, runs in batch.crons.values() if runs}
            wait_for(lambda expected=expected, server=batch.server:
                     expected <= {r["cron_id"] for r in _exited(server)},
                     timeout=max(1, deadline - time.time()), interval=1)
        time.sleep(3)
        for batch in started.values():
            batch.daemon.stop_daemon()
        yield started, problems
    finally:
        for cleanup in reversed(cleanups):
            cleanup()


def _exited(server) -> list:
    status, body = http("GET", f"{server.url}/open/runs?limit=500", headers=server.headers)
    assert status == 200, body
    return [run for run in body["data"] if run["state"] == "exited"]


@pytest.fixture(params=["busybox", "debian"])
def batch(request, batches):
    started, problems = batches
    if request.param in problems:
        pytest.skip(problems[request.param])
    return started[request.param]


def test_the_whole_batch_is_installed_in_the_daemon(batch):
    status, health = http("GET", f"{batch.server.url}/health")
    # The daemon has been stopped after its minute, so the words may add "crond not running"
    # (unless another test's daemon runs meanwhile): installed either way.
    assert health["data"]["crontab"].startswith("installed"), health
    installed = batch.daemon.installed()
    assert "# qlshadow crontab" in installed
    assert all(f" ID={cron['id']} " in installed for cron, _, _ in batch.crons.values())


def test_the_users_own_lines_are_kept_byte_for_byte_and_run(batch):
    installed = batch.daemon.installed()
    assert installed.startswith(batch.users_own)
    assert installed[len(batch.users_own):].startswith("# BEGIN qlshadow ")
    with open(batch.users_out, encoding="utf-8") as fh:
        assert fh.read() == "users-own\n"


def test_each_hostile_cron_ran_exactly_once_with_its_exact_bytes(batch, tmp_path):
    problems = []
    for name, (cron, fields, _) in batch.crons.items():
        if name not in hostile_commands(batch.base) and not name.startswith("long_"):
            continue
        runs = runs_of(batch.server, cron["id"])
        try:
            with open(os.path.join(fields["work_dir"], "out"), "rb") as fh:
                got = fh.read()
        except OSError:
            got = None
        want = expected_output(fields, str(tmp_path / name))
        if len(runs) != 1 or got != want:
            problems.append(f"{name}: {len(runs)} runs, wrote {got!r}, expected {want!r}")
    assert not problems, "\n".join(problems)


def test_exit_codes_reach_the_run(batch):
    cron = batch.crons["exit_code"][0]
    assert [run["exit_code"] for run in runs_of(batch.server, cron["id"])] == [3]


def test_the_longest_accepted_commands_sit_at_the_limit_and_run(batch):
    from qlshadow.host.crontab import MAX_COMMAND_BYTES
    for name in ("long_ascii", "long_percent"):
        size = batch.crons[name][1]["line_bytes"]
        # A new cron is checked with room for the longest id (19 digits).
        assert MAX_COMMAND_BYTES - 24 <= size <= MAX_COMMAND_BYTES, (name, size)


def test_every_day_of_week_form_runs_on_the_days_it_names_and_no_other(batch):
    wrong = []
    for name, (cron, fields, should) in batch.crons.items():
        if name in hostile_commands(batch.base) or name.startswith("long_"):
            continue
        count = len(runs_of(batch.server, cron["id"]))
        if count != (1 if should else 0):
            wrong.append(f"{name} ({fields['schedule']}): {count} runs, expected {int(should)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("body", [
    {"schedule": "5/10 * * * *"},
    {"schedule": "* * */2 * 1"},
    {"schedule": "0 0 5-2 * *"},
    {"command": "echo " + "#" * 400},
], ids=["step-without-range", "day-both-and-either", "wrapping-range", "too-long"])
def test_a_refused_cron_gets_400_and_changes_nothing(batch, body):
    crontab = os.path.join(batch.server.data_dir, "crontab.list")
    with open(crontab, "rb") as fh:
        before = fh.read()
    installed = batch.daemon.installed()
    assert installed
    full = {"name": "refused", "command": "true", "schedule": "* * * * *", **body}
    status, answer = http("POST", f"{batch.server.url}/open/crons", full, batch.server.headers)
    assert status == 400, answer
    field = "schedule" if "schedule" in body else "command"
    assert f"'{field}'" in answer["message"]
    with open(crontab, "rb") as fh:
        assert fh.read() == before
    assert batch.daemon.installed() == installed
    status, listing = http("GET", f"{batch.server.url}/open/crons?size=500", headers=batch.server.headers)
    assert listing["data"]["total"] == len(batch.crons)
