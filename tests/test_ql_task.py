"""QingLong's `task` word runs for real: task.sh gives a command whose first word is `task`
shell/ql-task.sh, under BusyBox sh, dash and bash (no server: no ID, no callbacks); and a
real BusyBox crond minute runs an imported `task hello.sh` cron as one Run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from qlshadow.host import crontab
from helpers import BACKENDS, run_cli
from shellenv import (BASE_TOOLS, SHELL_DIR, SHELLS, SYSTEM_PATH, ToolDir, busybox_static,
                      read_logs, run_task, runs_of, shell_argv, start_module_server, wait_for,
                      which, which_optional)
from test_qlimport import qinglong_row, qinglong_sqlite

QL_TASK = os.path.join(SHELL_DIR, "ql-task.sh")
HELLO_SH = 'echo "hello from sh [$0] [$*] [$PWD] [${GREETING-unset}]"\nexit "${EXIT:-0}"\n'
HELLO_PY = 'import os, sys\nprint("hello from python", sys.argv, os.getcwd())\n'


@pytest.fixture(params=list(SHELLS))
def shell(request) -> str:
    return request.param


@pytest.fixture
def box(tmp_path):
    """A data dir with scripts/hello.sh, scripts/sub/hello.sh and scripts/hello.py, and a
    PATH holding what task.sh needs plus sh and python3."""
    data = tmp_path / "data"
    (data / "scripts" / "sub").mkdir(parents=True)
    (data / "scripts" / "hello.sh").write_text(HELLO_SH)
    (data / "scripts" / "sub" / "hello.sh").write_text(HELLO_SH)
    (data / "scripts" / "hello.py").write_text(HELLO_PY)
    tools = ToolDir(str(tmp_path / "bin"), BASE_TOOLS + ("sh", "python3"))
    return {"PATH": tools.path, "QL_DATA_DIR": str(data)}


def task(shell: str, command: str, env: dict) -> tuple:
    """(exit code, the task log without task.sh's own notes) of one run through task.sh."""
    result = run_task(shell, command, env)
    log = read_logs(env["QL_DATA_DIR"])
    for name in os.listdir(os.path.join(env["QL_DATA_DIR"], "log")):
        for file in os.listdir(os.path.join(env["QL_DATA_DIR"], "log", name)):
            os.unlink(os.path.join(env["QL_DATA_DIR"], "log", name, file))
    lines = [line for line in log.splitlines() if not line.startswith("qlshadow: no numeric ID")]
    return result.returncode, "\n".join(lines)


def test_task_runs_a_sh_script_in_the_scripts_folder_with_its_args(shell, box):
    scripts = os.path.join(box["QL_DATA_DIR"], "scripts")
    assert task(shell, "task hello.sh", box) == (0, f"hello from sh [hello.sh] [] [{scripts}] [unset]")
    # `now` is QingLong's "no random delay": dropped; what follows is the script's.
    assert task(shell, "task hello.sh now a 'b c'", box) == (
        0, f"hello from sh [hello.sh] [a b c] [{scripts}] [unset]")
    assert task(shell, "task sub/hello.sh x", box) == (
        0, f"hello from sh [hello.sh] [x] [{scripts}/sub] [unset]")


def test_the_script_s_exit_code_is_the_task_s(shell, box):
    assert task(shell, "task hello.sh", {**box, "EXIT": "3"})[0] == 3


def test_task_runs_a_py_script_with_python3(shell, box):
    scripts = os.path.join(box["QL_DATA_DIR"], "scripts")
    code, log = task(shell, "task hello.py now 1", box)
    assert (code, log) == (0, f"hello from python ['hello.py', '1'] {scripts}")


def test_a_command_may_hold_several_task_words(shell, box):
    code, log = task(shell, "task hello.sh one && task hello.py two", box)
    assert code == 0 and "[one]" in log and "['hello.py', 'two']" in log


def test_an_unknown_extension_is_127_with_a_clear_line_in_the_log(shell, box):
    code, log = task(shell, "task x.rb", box)
    assert code == 127
    assert log == ("qlshadow: task: cannot run x.rb: only .js (node), .py (python3) and .sh "
                   "(sh) scripts are run")


def test_a_missing_script_or_interpreter_is_127(shell, box):
    code, log = task(shell, "task nothere.sh", box)
    assert code == 127 and "no script " in log and "nothere.sh" in log
    open(os.path.join(box["QL_DATA_DIR"], "scripts", "hello.js"), "w").close()
    code, log = task(shell, "task hello.js", box)  # no node on this PATH, as on a router
    assert code == 127 and log == "qlshadow: task: node is not installed; it runs hello.js"


@pytest.mark.parametrize("command, said", [
    ("task hello.sh conc JD_COOKIE", "'task FILE conc'"),
    ("task hello.sh desi JD_COOKIE 1", "'task FILE desi'"),
    ("task -m 300 hello.sh", "option -m"),
    ("task -l hello.sh", "option -l"),
    ("task", "no script named"),
])
def test_forms_we_do_not_run_stop_with_a_clear_line(shell, box, command, said):
    code, log = task(shell, command, box)
    assert code == 2 and said in log and "hello from" not in log


CONFIG_SH = """\
## QingLong's config.sh: settings for its shell, exports for the scripts
CommandTimeoutTime="1h"
export GREETING="from config"
export QUOTED="a \\"b\\" \\$HOME \\\\ c"
export SINGLE='it $is literal'
  export BARE=plain tail
export MULTI="one
two"
export ql_file=hijack.sh
export PWNED=$(touch {marker})
$(touch {marker})
export
export 1BAD=x
"""


def test_config_sh_and_env_sh_exports_reach_the_script_read_never_sourced(shell, box, tmp_path):
    marker = tmp_path / "sourced"
    config = tmp_path / "config.sh"
    config.write_text(CONFIG_SH.format(marker=marker))
    env_sh = tmp_path / "env.sh"
    env_sh.write_text("export GREETING='from env.sh'\nexport COOKIE='pt_key=1&pt_key=2'\n")
    (tmp_path / "data" / "scripts" / "show.sh").write_text(
        'for k in GREETING QUOTED SINGLE BARE MULTI CommandTimeoutTime PWNED COOKIE; do\n'
        '  eval "printf \'%s=[%s]\\n\' $k \\"\\${$k-unset}\\""\ndone\n')
    code, log = task(shell, "task show.sh", {**box, "QL_NOTIFY_FILE": str(config),
                                             "QL_ENV_FILE": str(env_sh)})
    assert code == 0, log
    assert log.splitlines() == [
        "GREETING=[from env.sh]", 'QUOTED=[a "b" $HOME \\ c]', "SINGLE=[it $is literal]",
        "BARE=[plain]", "MULTI=[one", "two]", "CommandTimeoutTime=[unset]",
        "PWNED=[$(touch]", "COOKIE=[pt_key=1&pt_key=2]"]
    assert not marker.exists()
    code, log = task(shell, "task show.sh", {**box, "QL_NOTIFY_FILE": str(config)})
    assert "GREETING=[from config]" in log


def test_an_unreadable_env_file_is_noted_and_the_script_still_runs(shell, box, tmp_path):
    code, log = task(shell, "task hello.sh", {**box, "QL_ENV_FILE": str(tmp_path / "none.sh")})
    assert code == 0 and f"cannot read {tmp_path / 'none.sh'}" in log and "hello from sh" in log


def test_runner_env_names_the_scripts_folder(shell, box, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hello.sh").write_text('echo "elsewhere $GREETING"\n')
    (tmp_path / "env.sh").write_text("export GREETING=hi\n")
    with open(os.path.join(box["QL_DATA_DIR"], "runner.env"), "w") as fh:
        fh.write(f"ql_base_url=http://127.0.0.1:9\nql_scripts_dir={elsewhere}\n"
                 f"ql_env_file={tmp_path / 'env.sh'}\n")
    assert task(shell, "task hello.sh", box) == (0, "elsewhere hi")
    other = tmp_path / "data" / "scripts"
    # The environment wins over runner.env, as for task.sh's own settings.
    assert task(shell, "task hello.sh", {**box, "QL_SCRIPTS_DIR": str(other)})[1].startswith(
        "hello from sh")


def test_prepare_runner_writes_the_task_runner_s_paths_and_a_run_with_no_environment_finds_them(
        shell, box, app, make_settings, tmp_path, monkeypatch):
    elsewhere = tmp_path / "my scripts"
    elsewhere.mkdir()
    (elsewhere / "hello.sh").write_text('echo "elsewhere [$PWD] $GREETING $FROM_CONFIG"\n')
    os.symlink(elsewhere, tmp_path / "link")
    (tmp_path / "env.sh").write_text("export GREETING=from-env-sh\n")
    (tmp_path / "config.sh").write_text("export FROM_CONFIG=from-config-sh\n")
    monkeypatch.chdir(tmp_path)  # QL_NOTIFY_FILE may be relative: runner.env names it absolute
    settings = make_settings(QL_SCRIPTS_DIR=str(tmp_path / "link"), QL_NOTIFY_FILE="config.sh",
                             QL_ENV_FILE=str(tmp_path / "env.sh"))

    crontab.prepare_runner(settings)

    with open(os.path.join(box["QL_DATA_DIR"], "runner.env"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert lines[3:] == [f"ql_scripts_dir={elsewhere}", f"ql_notify_file={tmp_path}/config.sh",
                         f"ql_env_file={tmp_path}/env.sh"]
    assert task(shell, "task hello.sh", box) == (
        0, f"elsewhere [{elsewhere}] from-env-sh from-config-sh")


def test_runner_env_names_no_task_runner_path_that_is_not_set(app, make_settings, box):
    crontab.prepare_runner(make_settings())
    with open(os.path.join(box["QL_DATA_DIR"], "runner.env"), encoding="utf-8") as fh:
        assert [line.split("=")[0] for line in fh] == ["ql_base_url", "ql_cli", "ql_timeout"]


def test_a_cli_change_keeps_the_server_s_task_runner_paths(make_settings, tmp_path):
    server = make_settings(QL_SCRIPTS_DIR=str(tmp_path), QL_ENV_FILE=str(tmp_path / "env.sh"))
    crontab.record_settings(server)

    adopted = crontab.settings_to_adopt(make_settings())

    assert (adopted["QL_SCRIPTS_DIR"], adopted["QL_ENV_FILE"]) == (
        str(tmp_path), str(tmp_path / "env.sh"))


def test_ql_task_sh_runs_alone_under_each_shell(shell, box):
    """The script itself, not only through task.sh's /bin/sh."""
    result = subprocess.run([*shell_argv(shell), QL_TASK, "hello.sh", "now", "z"],
                            env=box, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "[hello.sh] [z]" in result.stdout


def test_only_a_first_word_task_is_qinglong_s(shell, box):
    code, log = task(shell, "echo task hello.sh", box)
    assert (code, log) == (0, "task hello.sh")
    assert task(shell, "  task hello.sh", box)[1].startswith("hello from sh")


def test_task_sh_finds_ql_task_sh_under_any_folder_name(shell, box, tmp_path):
    """The function names ql-task.sh by absolute path, quoted: a quote or a space in the
    folder, and a work_dir elsewhere, still reach it."""
    import shutil
    folder = tmp_path / "it's here"
    shutil.copytree(SHELL_DIR, folder)
    result = subprocess.run(
        [which("env"), "-i", *(f"{k}={v}" for k, v in box.items()), "QL_WORK_DIR=/",
         *shell_argv(shell),
         "./task.sh", "task hello.sh"], cwd=folder, capture_output=True, text=True,
        timeout=30)
    assert result.returncode == 0, result.stderr
    assert "hello from sh [hello.sh]" in read_logs(box["QL_DATA_DIR"])


# --- a real crond minute --------------------------------------------------------------------

def _import_hello(tmp_path, backend: str, bb: str, tmp_path_factory) -> tuple:
    """A server of backend whose crontab (BusyBox's, in its own spool) holds the imported
    QingLong cron 41 `task hello.sh`, every minute; returns (server, cleanup, spool)."""
    spool = str(tmp_path / f"spool-{backend}")
    os.makedirs(spool)
    install = f"{bb} crontab -c {spool} {{file}}"
    server, cleanup = start_module_server(tmp_path_factory, backend, QL_SCHEDULER="system",
                                          QL_CRONTAB_INSTALL=install)
    try:
        os.makedirs(os.path.join(server.data_dir, "scripts"))
        with open(os.path.join(server.data_dir, "scripts", "hello.sh"), "w") as fh:
            fh.write('echo "hello from crond in $PWD"\n')
        source = qinglong_sqlite(tmp_path / f"ql-{backend}", [
            qinglong_row(41, "hello", "task hello.sh", "* * * * *")])
        env = {"QL_DATA_DIR": server.data_dir, "QL_DB_URL": server.db_url,
               "QL_SCHEDULER": "system", "QL_CRONTAB_INSTALL": install,
               "QL3_SHADOW_ORIGINS": "scheduled_system"}
        imported = run_cli(env, "import", "qinglong", source)
        assert "imported 1, kept 0, refused 0" in imported.stdout
        listed = subprocess.run([bb, "crontab", "-c", spool, "-l"], capture_output=True, text=True)
        assert " ID=41 QL_EXECUTION_ORIGIN=scheduled_system " in listed.stdout
    except BaseException:
        cleanup()
        raise
    return server, cleanup, spool


@pytest.mark.slow
def test_crond_runs_an_imported_task_cron_as_one_run(tmp_path_factory, tmp_path):
    """Both backends share one crond minute."""
    bb = busybox_static()
    setups, cleanups, daemons = {}, [], []
    try:
        for backend in BACKENDS:
            server, cleanup, spool = _import_hello(tmp_path, backend, bb, tmp_path_factory)
            cleanups.append(cleanup)
            setups[backend] = (server, spool)
        if time.time() % 60 > 57:  # both crond processes start within one minute
            time.sleep(60 - time.time() % 60 + 0.5)
        for backend, (_, spool) in setups.items():
            log = str(tmp_path / f"crond-{backend}.log")
            daemons.append(subprocess.Popen(
                [bb, "crond", "-f", "-c", spool, "-L", log, "-l", "5"],
                env={"PATH": SYSTEM_PATH, "SHELL": "/bin/sh"}, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for backend, (server, _) in setups.items():
            def exited(server=server):
                runs = runs_of(server, 41)
                return runs if runs and runs[0]["state"] == "exited" else None

            runs = wait_for(exited, timeout=75, interval=0.5)
            crond_log = (tmp_path / f"crond-{backend}.log").read_text(errors="replace")
            assert runs, f"{backend}: no exited run; crond log:\n{crond_log}"
            assert len(runs) == 1 and runs[0]["exit_code"] == 0
            scripts = os.path.join(server.data_dir, "scripts")
            assert f"hello from crond in {scripts}" in read_logs(server.data_dir)
    finally:
        for crond in daemons:
            if crond.poll() is None:
                crond.send_signal(signal.SIGTERM)
                crond.wait(10)
        for cleanup in cleanups:
            cleanup()


def test_node_runs_a_js_script_where_node_is_installed(shell, box, tmp_path):
    node = which_optional("node")
    tools = ToolDir(str(tmp_path / "bin-node"), BASE_TOOLS + ("sh",))
    tools.link("node", node)
    (tmp_path / "data" / "scripts" / "hello.js").write_text(
        "console.log('hello from node', process.argv.slice(2).join(','), process.cwd())\n")
    code, log = task(shell, "task hello.js now a b", {**box, "PATH": tools.path})
    assert (code, log) == (0, f"hello from node a,b {tmp_path / 'data' / 'scripts'}")
