"""Task logs over HTTP: GET /open/runs/<run_id>/log and
/open/crons/<id>/instances/<instance_id>/log: the `runs` scope, the size bound, and paths
that leave the log directory refused (the stored path is client data)."""
from __future__ import annotations

import os

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from helpers import ONE_BACKEND, STATUS_PATH

pytestmark = pytest.mark.shadow_on

SECONDS = 1764460800


def execution_id(n: int = 0) -> str:
    return f"legacy-system:{SECONDS}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


def start(client, auth, cron_id: int, log_path: str, n: int = 0) -> tuple:
    """A running callback of a crond execution naming log_path; returns (run, instance)."""
    body = {"ids": [cron_id], "status": 0, "pid": 4000 + n, "log_path": log_path,
            "last_execution_time": SECONDS, "execution_id": execution_id(n)}
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    run = client.get(f"/open/runs?cron_id={cron_id}&limit=1", headers=auth).get_json()["data"][0]
    instance = client.get(f"/open/crons/{cron_id}/instances?limit=1",
                          headers=auth).get_json()["data"][0]
    return run, instance


def write_log(settings, relative: str, data: bytes) -> str:
    path = os.path.join(settings.log_dir, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def get(client, auth, path: str) -> tuple:
    response = client.get(path, headers=auth)
    return response.status_code, response.get_json()


def test_a_runs_log_is_its_tail_with_its_size_and_file_name(client, auth, make_cron, settings):
    cron_id = make_cron()["id"]
    write_log(settings, f"cron_{cron_id}/2026-11-30-04-00-00-4000.log", b"one\ntwo\n")
    run, instance = start(client, auth, cron_id, f"cron_{cron_id}/2026-11-30-04-00-00-4000.log")

    expected = {"code": 200, "data": {"text": "one\ntwo\n", "truncated": False, "size": 8,
                                      "path_name": "2026-11-30-04-00-00-4000.log"}}
    assert get(client, auth, f"/open/runs/{run['id']}/log") == (200, expected)
    assert get(client, auth, f"/open/crons/{cron_id}/instances/{instance['id']}/log") == (
        200, expected)


def test_bytes_keeps_the_last_bytes_and_says_it_cut(client, auth, make_cron, settings):
    cron_id = make_cron()["id"]
    write_log(settings, "c/a.log", b"x" * 100 + "\n末尾\n".encode())
    run, _ = start(client, auth, cron_id, "c/a.log")

    status, body = get(client, auth, f"/open/runs/{run['id']}/log?bytes=8")
    # The cut falls inside the first character; the partial bytes are dropped, not mangled.
    assert (status, body["data"]) == (200, {"text": "\n末尾\n", "truncated": True, "size": 108,
                                            "path_name": "a.log"})


def test_the_default_bound_is_64_kib(client, auth, make_cron, settings):
    cron_id = make_cron()["id"]
    write_log(settings, "c/big.log", b"a" * 70000)
    run, _ = start(client, auth, cron_id, "c/big.log")

    status, body = get(client, auth, f"/open/runs/{run['id']}/log")
    assert (status, len(body["data"]["text"]), body["data"]["truncated"]) == (200, 65536, True)


@ONE_BACKEND
@pytest.mark.parametrize("query", ["bytes=0", "bytes=1048577", "bytes=x", "bytes=-1"])
def test_bytes_out_of_bounds_is_a_400_naming_it(client, auth, make_cron, settings, query):
    cron_id = make_cron()["id"]
    write_log(settings, "c/a.log", b"a\n")
    run, _ = start(client, auth, cron_id, "c/a.log")

    status, body = get(client, auth, f"/open/runs/{run['id']}/log?{query}")
    assert status == 400 and "'bytes'" in body["message"]


def test_a_pruned_log_is_a_404_saying_it_is_gone(client, auth, make_cron, settings):
    cron_id = make_cron()["id"]
    run, instance = start(client, auth, cron_id, "c/pruned.log")

    for path in (f"/open/runs/{run['id']}/log",
                 f"/open/crons/{cron_id}/instances/{instance['id']}/log"):
        status, body = get(client, auth, path)
        assert status == 404 and "gone (pruned or deleted)" in body["message"], body


def test_unknown_runs_and_instances_and_other_crons_instances_are_404(client, auth, make_cron,
                                                                     settings):
    first, second = make_cron(name="a")["id"], make_cron(name="b")["id"]
    write_log(settings, "c/a.log", b"a\n")
    _, instance = start(client, auth, first, "c/a.log")

    for path, words in (("/open/runs/019ad20f-2800-7b96-9e03-1ff0f2a0435b/log", "does not exist"),
                        ("/open/runs/nope/log", "does not exist"),
                        (f"/open/crons/{first}/instances/999999/log", "has no instance"),
                        (f"/open/crons/{first}/instances/{2**64}/log", "has no instance"),
                        (f"/open/crons/{2**64}/instances/{instance['id']}/log", "has no instance"),
                        (f"/open/crons/{second}/instances/{instance['id']}/log",
                         "has no instance")):
        status, body = get(client, auth, path)
        assert status == 404 and words in body["message"], (path, body)


def test_a_run_without_a_log_path_is_a_404(client, auth, make_cron):
    cron_id = make_cron()["id"]
    body = {"ids": [cron_id], "status": 0, "pid": 1, "last_execution_time": SECONDS,
            "execution_id": execution_id()}
    assert client.put(STATUS_PATH, json=body, headers=auth).status_code == 200
    run = client.get("/open/runs", headers=auth).get_json()["data"][0]

    status, answer = get(client, auth, f"/open/runs/{run['id']}/log")
    assert status == 404 and "has no log" in answer["message"]


def test_the_log_routes_need_the_runs_scope(app, client, auth, make_cron, settings):
    cron_id = make_cron()["id"]
    write_log(settings, "c/a.log", b"a\n")
    run, instance = start(client, auth, cron_id, "c/a.log")
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("crons-only", ["crons"])
    token = client.get(f"/open/auth/token?client_id={client_id}&client_secret={secret}"
                       ).get_json()["data"]["token"]

    for path in (f"/open/runs/{run['id']}/log",
                 f"/open/crons/{cron_id}/instances/{instance['id']}/log"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Authorization": f"Bearer {token}"}).status_code == 403
        assert client.get(path, headers=auth).status_code == 200


# --- paths that leave the log directory ----------------------------------------------------

@ONE_BACKEND
@pytest.mark.parametrize("stored", [
    "../secret.txt", "c/../../secret.txt", "c/../a.log", "..", "/etc/passwd", "SECRET_ABS",
    "LOG_DIR/../secret.txt",
])
def test_stored_paths_that_leave_the_log_directory_are_refused(client, auth, make_cron,
                                                              settings, stored):
    cron_id = make_cron()["id"]
    write_log(settings, "c/a.log", b"inside\n")
    secret = os.path.join(settings.data_dir, "secret.txt")
    with open(secret, "w") as fh:
        fh.write("token\n")
    stored = stored.replace("SECRET_ABS", secret).replace("LOG_DIR", settings.log_dir)
    run, instance = start(client, auth, cron_id, stored)

    for path in (f"/open/runs/{run['id']}/log",
                 f"/open/crons/{cron_id}/instances/{instance['id']}/log"):
        status, body = get(client, auth, path)
        assert status == 404, body
        assert "log directory" in body["message"] and "token" not in body["message"]


@ONE_BACKEND
def test_an_absolute_path_inside_the_log_directory_is_read(client, auth, make_cron, settings):
    cron_id = make_cron()["id"]
    path = write_log(settings, "c/a.log", b"inside\n")
    run, _ = start(client, auth, cron_id, path)

    status, body = get(client, auth, f"/open/runs/{run['id']}/log")
    assert (status, body["data"]["text"]) == (200, "inside\n")


@ONE_BACKEND
@pytest.mark.parametrize("link", ["c/out.log", "linked/a.log"])
def test_symlinks_are_not_followed_out_of_the_log_directory(client, auth, make_cron, settings,
                                                           link):
    cron_id = make_cron()["id"]
    outside = os.path.join(settings.data_dir, "outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "a.log"), "w") as fh:
        fh.write("token\n")
    write_log(settings, "c/a.log", b"inside\n")
    # A file link (c/out.log -> outside/a.log) or a folder link (linked -> outside).
    os.symlink(os.path.join(outside, "a.log"), os.path.join(settings.log_dir, "c", "out.log"))
    os.symlink(outside, os.path.join(settings.log_dir, "linked"))
    run, _ = start(client, auth, cron_id, link)

    status, body = get(client, auth, f"/open/runs/{run['id']}/log")
    assert status == 404 and "token" not in str(body)


@ONE_BACKEND
def test_a_fifo_or_a_folder_under_the_name_is_refused_without_blocking(client, auth, make_cron,
                                                                      settings):
    cron_id = make_cron()["id"]
    os.makedirs(os.path.join(settings.log_dir, "c", "folder.log"))
    os.mkfifo(os.path.join(settings.log_dir, "c", "fifo.log"))
    first, _ = start(client, auth, cron_id, "c/fifo.log", n=1)
    second, _ = start(client, auth, cron_id, "c/folder.log", n=2)

    for run in (first, second):
        status, body = get(client, auth, f"/open/runs/{run['id']}/log")
        assert status == 404 and "regular file" in body["message"], body


@ONE_BACKEND
def test_a_log_directory_that_is_itself_a_link_still_works(client, auth, make_cron, settings,
                                                           tmp_path):
    # Routers put data on USB storage and link it: the configured directory may be a link.
    real = tmp_path / "usb-log"
    (real / "c").mkdir(parents=True)
    (real / "c" / "a.log").write_bytes(b"on usb\n")
    os.makedirs(settings.data_dir, exist_ok=True)
    os.symlink(real, settings.log_dir)
    cron_id = make_cron()["id"]
    run, _ = start(client, auth, cron_id, "c/a.log")

    status, body = get(client, auth, f"/open/runs/{run['id']}/log")
    assert (status, body["data"]["text"]) == (200, "on usb\n")
