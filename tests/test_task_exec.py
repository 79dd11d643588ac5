"""task.sh runs the command as crond runs a crontab line, `/bin/sh -c COMMAND`: $0, $# and $1
are that shell's, not task.sh's, with and without hooks; none of task.sh's variables reach
it. Run for real under BusyBox sh, dash and bash (no server: no ID, no callbacks)."""
from __future__ import annotations

import subprocess

import pytest

from shellenv import SHELLS, ToolDir, read_logs, run_task

PROBE = 'echo "[$0][$#][$1]"'


@pytest.fixture(params=list(SHELLS))
def shell(request) -> str:
    return request.param


def crond_would(command: str) -> str:
    """What crond's `/bin/sh -c COMMAND` prints."""
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                          check=True).stdout


def task_output(shell: str, tmp_path, command: str, **env) -> str:
    data = str(tmp_path / "data")
    tools = ToolDir(str(tmp_path / "bin"))
    result = run_task(shell, command, {"PATH": tools.path, "QL_DATA_DIR": data, **env})
    assert result.returncode == 0, result.stderr
    return "".join(line + "\n" for line in read_logs(data).splitlines()
                   if not line.startswith("qlshadow: "))


def test_dollar_0_and_the_positional_parameters_are_those_of_sh_c(shell, tmp_path):
    assert task_output(shell, tmp_path, PROBE) == crond_would(PROBE) == "[/bin/sh][0][]\n"


@pytest.mark.parametrize("hooks", [{"QL_TASK_BEFORE": "greeting=hi"},
                                   {"QL_TASK_AFTER": "true"},
                                   {"QL_TASK_BEFORE": "true", "QL_TASK_AFTER": "true"}],
                         ids=["before", "after", "both"])
def test_with_hooks_too(shell, tmp_path, hooks):
    assert task_output(shell, tmp_path, PROBE, **hooks) == crond_would(PROBE)


def test_task_before_still_sets_what_the_command_sees(shell, tmp_path):
    output = task_output(shell, tmp_path, 'echo "$greeting $#"', QL_TASK_BEFORE="greeting=hi")
    assert output == "hi 0\n"


def test_none_of_task_sh_s_variables_reach_the_command(shell, tmp_path):
    command = 'echo "${ql_cmd-unset} ${ql_token-unset} ${QL_RUN_COMMAND-unset}"'
    assert task_output(shell, tmp_path, command) == "unset unset unset\n"
    hooked = task_output(shell, tmp_path / "hooked", 'echo "${QL_RUN_COMMAND-unset} '
                         '${QL_RUN_LOG-unset}"', QL_TASK_AFTER="true")
    assert hooked == "unset unset\n"


def test_an_exit_code_and_quoting_survive_as_with_sh_c(shell, tmp_path):
    data = str(tmp_path / "data")
    tools = ToolDir(str(tmp_path / "bin"))
    result = run_task(shell, "printf '%s|' \"a b\" 'c'; exit 7",
                      {"PATH": tools.path, "QL_DATA_DIR": data})
    assert result.returncode == 7
    assert "a b|c|" in read_logs(data)
