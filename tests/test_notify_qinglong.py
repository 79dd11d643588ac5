"""A QingLong user's own config.sh as the source of the notification settings
(QL_NOTIFY_FILE, docs/NOTIFY.md): read without running anything, every other line
skipped, each unreadable line named once, the environment and the conf file winning, and
the channels it sets (go-cqhttp, PushDeer) sending what QingLong's notify.py sends."""
from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse

import pytest

from qlshadow import config
from qlshadow.host import crontab
from qlshadow.watch import notify
from helpers import ROOT
from receivers import PROXY_VARIABLES, Receiver
from test_notify_channels import _form

# As a QingLong user has it: the sample's comments and settings, empty exports, bash arrays
# over several lines, a function, a commented-out case block, quoted values with spaces and
# escapes, single quotes, and a value only a shell could give ({gobot} and {deer}: the
# receivers' addresses).
CONFIG_SH = r"""## Version: v2.17.13
## Date: 2024-09-01

## 在运行 ql repo 命令时，是否自动删除失效的脚本与定时任务
AutoDelCron="true"
RepoFileExtensions="js py"
GithubProxyUrl=""
CommandTimeoutTime="1h"

## 通知环境变量
## 1. Server酱
export PUSH_KEY=""

## 2. BARK
export BARK_PUSH=""
export BARK_SOUND=""

## 8. go-cqhttp
## gobot_url 推送到个人QQ: http://127.0.0.1/send_private_msg  群：http://127.0.0.1/send_group_msg
export GOBOT_URL="{gobot}/send_private_msg"
export GOBOT_TOKEN='go "token" $1'
export GOBOT_QQ="user_id=10001"   # 个人QQ

## 9. PushDeer
export DEER_KEY="PDU1 \"key\" \$x"
export DEER_URL={deer}/message/push

## 一言
export HITOKOTO="true"

## 跳过推送的标题，一行一个
export SKIP_PUSH_TITLE='Daily check-in
Cron 9 failed'

## 需组合的环境变量列表
env_name=(
  JD_COOKIE
  "PUSH_KEY=not-this"
)
var_name=(Cookie ForOtherFruit)

## 如果只是想要屏蔽某个ck不执行某个脚本
## case $1 in
##   test.js)
##     TempBlockCookie="5"
##     ;;
## esac

push_helper() {
  export TG_BOT_TOKEN="set only when called"
}

export QYWX_KEY="$HOME/key"
export TempBlockCookie=""
"""


def _config_sh(path, gobot: str = "http://127.0.0.1:9", deer: str = "http://127.0.0.1:9") -> str:
    path.write_text(CONFIG_SH.replace("{gobot}", gobot).replace("{deer}", deer), encoding="utf-8")
    return str(path)


@pytest.fixture
def gobot():
    server = Receiver(default=(200, b'{"status":"ok","retcode":0,"data":{"message_id":1}}'))
    yield server
    server.close()


@pytest.fixture
def deer():
    server = Receiver(default=(200, b'{"code":0,"content":{"result":["{\\"counts\\":1}"]}}'))
    yield server
    server.close()


def _notify_test(env: dict, *args: str) -> subprocess.CompletedProcess:
    drop = config.NOTIFY_KEYS | config.NOTIFY_UNUSED_KEYS | {"QL_CONFIG", *PROXY_VARIABLES}
    full = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("QL_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "qlshadow.cli", *args, "notify", "--test"],
                          env=full, cwd=ROOT, capture_output=True, text=True, timeout=60)


# --- reading the file -----------------------------------------------------------------------

def test_only_the_notification_variables_are_taken_as_the_shell_would_read_them(tmp_path):
    values, warnings = config.read_ql_notify_file(_config_sh(tmp_path / "config.sh"))

    assert values == {
        "GOBOT_URL": "http://127.0.0.1:9/send_private_msg",
        "GOBOT_TOKEN": 'go "token" $1',
        "GOBOT_QQ": "user_id=10001",
        "DEER_KEY": 'PDU1 "key" $x',
        "DEER_URL": "http://127.0.0.1:9/message/push",
        "HITOKOTO": "true",
        "SKIP_PUSH_TITLE": "Daily check-in\nCron 9 failed",
    }
    line = CONFIG_SH.splitlines().index('export QYWX_KEY="$HOME/key"') + 1
    assert warnings == (f"{tmp_path}/config.sh:{line}: QYWX_KEY not read: "
                        "it needs the shell to expand it",)


@pytest.mark.parametrize("text, values, warned", [
    ("export PUSH_KEY=a\nexport PUSH_KEY=b\n", {"PUSH_KEY": "b"}, []),
    ("export PUSH_KEY=a\nexport PUSH_KEY=''\n", {}, []),
    ("PUSH_KEY=a; FSKEY='b c' # both\n", {"PUSH_KEY": "a", "FSKEY": "b c"}, []),
    ("export PUSH_KEY=one\\ two\\\\three\n", {"PUSH_KEY": "one two\\three"}, []),
    ('export PUSH_KEY="a\\\nb"\n', {"PUSH_KEY": "ab"}, []),
    ('export PUSH_KEY="keeps \\n and \\t"\n', {"PUSH_KEY": "keeps \\n and \\t"}, []),
    ("arr=(\n  'x)'\n  \"PUSH_KEY=no\"\n)\nexport FSKEY=yes\n", {"FSKEY": "yes"}, []),
    ("f()\n{\n  PUSH_KEY=no\n}\nFSKEY=yes\n", {"FSKEY": "yes"}, []),
    ("function g {\n  if true; then PUSH_KEY=no; fi\n}\nFSKEY=yes\n", {"FSKEY": "yes"}, []),
    ("if [ -f x ]; then\n  export PUSH_KEY=maybe\nfi\nFSKEY=yes\n", {"FSKEY": "yes"}, [2]),
    ("export PUSH_KEY=`cat key`\n", {}, [1]),
    ("export PUSH_KEY=$(cat key)\n", {}, [1]),
    ("export PUSH_KEY=\"${KEY}\"\n", {}, [1]),
    # The line is named; the next lines are read on their own.
    ("export PUSH_KEY='never closed\nFSKEY=yes\n", {"FSKEY": "yes"}, [1]),
    ("export PUSH_KEY=\"costs $ 5\"\n", {"PUSH_KEY": "costs $ 5"}, []),
    ("export PUSH_KEY=a b\n", {}, [1]),
    ("export OTHER=$(date)\nOTHER2=`x`\necho \"$PUSH_KEY\"\n", {}, []),
    ("export QL_NOTIFY_FILE=/elsewhere\n", {}, []),
])
def test_a_shell_file_is_read_without_running_it(tmp_path, text, values, warned):
    path = tmp_path / "config.sh"
    path.write_text(text)

    found, warnings = config.read_ql_notify_file(str(path))

    assert found == values
    assert [int(w.split(":")[1]) for w in warnings] == warned


def test_an_unreadable_file_is_one_error_naming_it(tmp_path):
    missing = tmp_path / "config.sh"
    result = _notify_test({"QL_NOTIFY_FILE": str(missing)})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"qlshadow: cannot read QL_NOTIFY_FILE {missing}: No such file or directory"]


def test_the_environment_and_the_conf_file_win_over_the_file(tmp_path):
    ql_file = tmp_path / "config.sh"
    ql_file.write_text('export NTFY_TOPIC="from-ql"\nexport NTFY_URL="http://ql.example"\n'
                       'export NTFY_PRIORITY="5"\nexport PUSH_KEY=ql-key\n')
    conf = tmp_path / "qlshadow.conf"
    conf.write_text(f"QL_NOTIFY_FILE={ql_file}\nNTFY_URL=http://conf.example\nPUSH_KEY=\n")

    sources = config.notify_sources({"NTFY_TOPIC": "from-env", "NTFY_PRIORITY": ""},
                                    config_file=str(conf))

    assert sources.values == {"QL_NOTIFY_FILE": str(ql_file), "NTFY_TOPIC": "from-env",
                              "NTFY_URL": "http://conf.example", "NTFY_PRIORITY": "5",
                              "PUSH_KEY": "ql-key"}
    assert sources.origin == {"QL_NOTIFY_FILE": str(conf), "NTFY_TOPIC": config.ENVIRONMENT,
                              "NTFY_URL": str(conf), "NTFY_PRIORITY": str(ql_file),
                              "PUSH_KEY": str(ql_file)}
    channels = notify.configured_channels(sources.values, sources.origin)
    assert [(c.name, c.sources) for c in channels] == [
        ("ntfy", tuple(sorted([config.ENVIRONMENT, str(conf), str(ql_file)]))),
        ("serverchan", (str(ql_file),))]


def test_the_server_hands_the_tick_the_path_and_the_tick_reads_the_file_each_time(tmp_path):
    ql_file = tmp_path / "config.sh"
    ql_file.write_text("export PUSH_KEY=first\n")
    settings = config.load({"QL_DATA_DIR": str(tmp_path / "data")})
    environ = {"QL_NOTIFY_FILE": os.path.relpath(ql_file), "GOTIFY_URL": "http://g.example"}

    text = crontab.notify_conf_text(settings, environ)

    assert f'QL_NOTIFY_FILE="{ql_file}"\n' in text and 'GOTIFY_URL="http://g.example"\n' in text
    assert "PUSH_KEY" not in text  # read by the tick, so an edit in QingLong needs no restart
    conf = tmp_path / "notify.conf"
    conf.write_text(text)
    assert notify.load_settings({}, config_file=str(conf))["PUSH_KEY"] == "first"
    ql_file.write_text("export PUSH_KEY=second\n")
    assert notify.load_settings({}, config_file=str(conf))["PUSH_KEY"] == "second"


# --- a QingLong user's config.sh, end to end ------------------------------------------------

def test_qinglongs_config_sh_drives_go_cqhttp_and_pushdeer_as_notify_py_does(tmp_path, gobot, deer):
    path = _config_sh(tmp_path / "config.sh", gobot.url, deer.url)

    result = _notify_test({"QL_NOTIFY_FILE": path})

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"pushdeer: ok: HTTP 200 (settings from {path})",
                                          f"gobot: ok: HTTP 200 (settings from {path})"]
    title, content = "qlshadow: test notification", None
    # go-cqhttp: a GET of GOBOT_URL with the token, the QQ and the message in the query.
    request = gobot.last
    parts = urllib.parse.urlsplit(request["path"])
    query = dict(urllib.parse.parse_qsl(parts.query))
    assert (request["method"], parts.path, request["body"]) == ("GET", "/send_private_msg", b"")
    assert query.keys() == {"access_token", "user_id", "message"}
    assert (query["access_token"], query["user_id"]) == ('go "token" $1', "10001")
    title, _, content = query["message"].partition("\n\n")
    assert title == "qlshadow: test notification" and "This channel works." in content
    # PushDeer: a form POST to DEER_URL with text, desp, type=markdown and pushkey.
    request = deer.last
    assert (request["method"], request["path"]) == ("POST", "/message/push")
    assert _form(request) == {"text": title, "desp": content, "type": "markdown",
                              "pushkey": 'PDU1 "key" $x'}
    # The unused QingLong variable is a note, the unreadable line one warning; both once.
    line = CONFIG_SH.splitlines().index('export QYWX_KEY="$HOME/key"') + 1
    assert result.stderr.splitlines() == [
        f"qlshadow: warning: {path}:{line}: QYWX_KEY not read: it needs the shell to expand it",
        f"qlshadow: note: HITOKOTO (from {path}) is a QingLong setting qlshadow does not use"]


def test_a_listed_title_is_not_pushed_and_the_others_are(tmp_path, gobot, deer):
    path = _config_sh(tmp_path / "config.sh", gobot.url, deer.url)
    sources = notify.load_sources({"QL_NOTIFY_FILE": path})
    channels = notify.configured_channels(sources.values, sources.origin)

    skipped = [notify.send(channel, "Cron 9 failed", "exit 1") for channel in channels]
    sent = [notify.send(channel, "Cron 10 failed", "exit 1") for channel in channels]

    assert skipped == [notify.Result(True, "not sent: SKIP_PUSH_TITLE lists this title")] * 2
    assert sent == [notify.Result(True, "HTTP 200")] * 2
    assert len(gobot.requests) == len(deer.requests) == 1


def test_the_conf_file_wins_and_notify_test_names_each_file(tmp_path, gobot, deer):
    path = _config_sh(tmp_path / "config.sh", "http://127.0.0.1:9", deer.url)
    conf = tmp_path / "qlshadow.conf"
    conf.write_text(f"QL_NOTIFY_FILE={path}\nGOBOT_URL={gobot.url}/send_private_msg\n"
                    "CONSOLE=true\n")

    result = _notify_test({}, "--config", str(conf))

    assert result.returncode == 0, result.stderr
    both = ", ".join(sorted([path, str(conf)]))
    assert result.stdout.splitlines() == [f"pushdeer: ok: HTTP 200 (settings from {path})",
                                          f"gobot: ok: HTTP 200 (settings from {both})"]
    assert len(gobot.requests) == 1
    notes = [line for line in result.stderr.splitlines() if "note:" in line]
    assert notes == [
        f"qlshadow: note: CONSOLE (from {conf}) is a QingLong setting qlshadow does not use",
        f"qlshadow: note: HITOKOTO (from {path}) is a QingLong setting qlshadow does not use"]


def test_serve_warns_about_an_unreadable_file_at_start_and_keeps_going(tmp_path, monkeypatch, capsys):
    from qlshadow.web import serving

    missing = tmp_path / "config.sh"
    monkeypatch.setenv("QL_NOTIFY_FILE", str(missing))
    monkeypatch.delenv("QL_CONFIG", raising=False)
    settings = config.load({"QL_DATA_DIR": str(tmp_path / "data")})

    serving._startup_crontab(settings)

    assert capsys.readouterr().err == (
        "qlshadow: warning: the notify tick cannot get this server's settings: "
        f"cannot read QL_NOTIFY_FILE {missing}: No such file or directory\n")
