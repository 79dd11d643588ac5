"""Chinese (zh_CN) beside English: QL_LANG, the catalog and its compiler, the page's choice
of language, health and gate reasons, and notifications sent to a real loopback receiver."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest

from qlshadow import config, i18n, msgfmt
from qlshadow.host import crontab
from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from qlshadow.web.views import create_app
from helpers import ONE_BACKEND, ROOT, run_cli
from test_alerts import run, tick_process

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import po_extract  # noqa: E402  (scripts/ is not a package)

PO = po_extract.PO
BROWSER = "text/html,application/xhtml+xml"


@pytest.fixture(autouse=True)
def english_again():
    """A zh_CN app or tick sets the process's language: later tests get English back."""
    yield
    i18n.set_default("en")


def catalog() -> dict:
    with open(PO, encoding="utf-8") as fh:
        return msgfmt.parse(fh.read(), PO)


# --- the catalog ---------------------------------------------------------------------------

def test_every_marked_sentence_has_a_translation_and_the_catalog_holds_nothing_else():
    marked = set(po_extract.marked())
    translated = set(catalog()) - {""}
    assert len(marked) > 200  # the page, reasons and notifications are all marked
    assert sorted(marked - translated, key=str) == []
    assert sorted(translated - marked, key=str) == []


def test_the_extractor_finds_python_calls_and_template_trans_blocks(tmp_path):
    source = tmp_path / "x.py"
    source.write_text('from .i18n import N_, _\nA = N_("one")\nprint(_("two {n}").format(n=1))\n'
                      'print(_(A), ngettext("a file", "{n} files", 2))\n')
    template = tmp_path / "x.html"
    template.write_text("{{ _('three') }}{% trans n=x %}four {{ n }}{% endtrans %}"
                        "{% trans %}\n  five\n  lines{% endtrans %}")
    assert set(po_extract.python_messages(str(source))) == {"one", "two {n}",
                                                            ("a file", "{n} files")}
    assert set(po_extract.template_messages(str(template))) == {"three", "four %(n)s",
                                                                "five lines"}


def _placeholders(text: str) -> list:
    return sorted(re.findall(r"\{[a-z_]*\}|%\([a-z_]+\)s|%%|</?[a-z]+>", text))


def test_translations_keep_every_placeholder_and_tag_and_are_chinese():
    for msgid, msgstr in catalog().items():
        if msgid == "":
            continue
        assert _placeholders(msgstr) == _placeholders(msgid), msgid
        assert re.search("[\u4e00-\u9fff]", msgstr) or msgstr in (
            "Crontab", "Client ID", "Client Secret"), msgid


def test_the_catalog_uses_qinglongs_words():
    zh = catalog()
    assert zh["Crons"] == "定时任务" and zh["Running"] == "运行中" and zh["Failed"] == "失败"
    assert zh["Log"] == "日志" and zh["missed"] == "错过"


# --- the compiler ----------------------------------------------------------------------------

SAMPLE_PO = r'''# a comment
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: a.py:1
msgid "Hello"
msgstr "你好"

msgid "two "
"lines\n"
msgstr "两"
"行\n"

msgid "say \"hi\"\tnow\\"
msgstr "说 \"嗨\"\t现在\\"

#, fuzzy
msgid "unsure"
msgstr "不确定"

msgid "untranslated"
msgstr ""

msgctxt "menu"
msgid "Open"
msgstr "打开"

msgid "{n} file"
msgid_plural "{n} files"
msgstr[0] "{n} 个文件"
msgstr[1] "{n} 个文件们"
'''


def test_the_compiler_writes_the_same_bytes_as_gnu_msgfmt(tmp_path):
    po = tmp_path / "sample.po"
    po.write_text(SAMPLE_PO, encoding="utf-8")
    ours = msgfmt.compile_mo(msgfmt.parse(SAMPLE_PO))
    theirs = tmp_path / "gnu.mo"
    subprocess.run(["msgfmt", "--no-hash", "-o", str(theirs), str(po)], check=True,
                   capture_output=True, timeout=60)
    assert ours == theirs.read_bytes()


def test_the_compiled_catalog_is_gnu_msgfmts_too(tmp_path):
    theirs = tmp_path / "gnu.mo"
    subprocess.run(["msgfmt", "--check-format", "--no-hash", "-o", str(theirs), PO], check=True,
                   capture_output=True, timeout=60)
    assert msgfmt.compile_mo(catalog()) == theirs.read_bytes()


def test_gettext_reads_what_the_compiler_writes(tmp_path):
    import gettext
    import io
    found = gettext.GNUTranslations(io.BytesIO(msgfmt.compile_mo(msgfmt.parse(SAMPLE_PO))))
    assert found.gettext("Hello") == "你好"
    assert found.gettext("two lines\n") == "两行\n"
    assert found.gettext('say "hi"\tnow\\') == '说 "嗨"\t现在\\'
    assert found.gettext("unsure") == "unsure" and found.gettext("untranslated") == "untranslated"
    assert found.pgettext("menu", "Open") == "打开"
    assert found.ngettext("{n} file", "{n} files", 2) == "{n} 个文件们"
    assert struct.unpack("<I", msgfmt.compile_mo({})[:4])[0] == msgfmt.MAGIC


@pytest.mark.parametrize("text,where", [
    ('msgid "a"\nmsgstr "b\n', ":2"), ('msgid "a"\nmsgtxt "b"\n', ":2"),
    ('"orphan"\n', ":1"), ('msgid "a"\nmsgstr "\\q"\n', ":2")])
def test_a_malformed_po_line_is_refused_with_its_line_number(text, where):
    with pytest.raises(msgfmt.PoError, match=re.escape("x.po" + where)):
        msgfmt.parse(text, "x.po")


def test_the_wheel_carries_the_compiled_catalog_and_not_its_source(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path), ROOT], check=True, capture_output=True, timeout=300)
    import zipfile
    (wheel,) = glob.glob(str(tmp_path / "qlshadow-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        mo = zf.read("qlshadow/locale/zh_CN/LC_MESSAGES/qlshadow.mo")
    assert not [n for n in names if n.endswith(".po")]
    assert mo == msgfmt.compile_mo(catalog())


def test_the_package_staging_carries_the_compiled_catalog(tmp_path):
    from pkgbuild import stage
    lib = tmp_path / "lib"
    shutil.copytree(os.path.join(ROOT, "app", "locale"), lib / "qlshadow" / "locale")
    stage.compile_catalogs(str(lib))
    folder = lib / "qlshadow" / "locale" / "zh_CN" / "LC_MESSAGES"
    assert sorted(os.listdir(folder)) == ["qlshadow.mo"]
    assert (folder / "qlshadow.mo").read_bytes() == msgfmt.compile_mo(catalog())


def test_a_source_tree_without_a_mo_compiles_the_po_on_first_use(monkeypatch):
    assert not glob.glob(os.path.join(ROOT, "app", "locale", "*", "LC_MESSAGES", "*.mo"))
    monkeypatch.setattr(i18n, "_catalogs", {})
    assert i18n.translate("zh_CN", "Crons") == "定时任务"
    assert i18n.translate("en", "Crons") == "Crons" and "en" not in i18n._catalogs


# --- QL_LANG ---------------------------------------------------------------------------------

def test_ql_lang_is_english_by_default_and_takes_zh_cn():
    assert config.load(environ={}).lang == "en"
    assert config.load(environ={"QL_LANG": "zh_CN"}).lang == "zh_CN"


@pytest.mark.parametrize("value", ["zh", "zh-CN", "ZH_CN", "fr", ""])
def test_a_bad_ql_lang_is_a_start_up_error_naming_it(value):
    with pytest.raises(config.ConfigError, match=r"QL_LANG=.* must be one of en, zh_CN"):
        config.load(environ={"QL_LANG": value})


def test_qlshadow_serve_refuses_to_start_with_a_bad_ql_lang(tmp_path):
    result = run_cli({"QL_DATA_DIR": str(tmp_path / "data"), "QL_LANG": "cn"}, "serve",
                     check=False)
    assert result.returncode != 0 and "QL_LANG='cn' must be one of en, zh_CN" in result.stderr


def test_ql_lang_is_read_from_the_config_file_too(tmp_path):
    conf = tmp_path / "q.conf"
    conf.write_text("QL_LANG=zh_CN\n")
    assert config.load(environ={}, config_file=str(conf)).lang == "zh_CN"
    assert config.language(environ={}, config_file=str(conf)) == "zh_CN"
    assert config.language(environ={"QL_LANG": "en"}, config_file=str(conf)) == "en"


# --- the page --------------------------------------------------------------------------------

@pytest.fixture
def signed_in(app, client, make_cron):
    make_cron(name="backup", schedule="@once")
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("viewer", ["crons", "runs"])
    response = client.post("/page/login", data={"client_id": client_id, "client_secret": secret})
    assert response.status_code == 303
    return client


def html(client, path: str, **headers) -> str:
    response = client.get(path, headers=headers)
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_the_page_is_english_by_default(signed_in):
    text = html(signed_in, "/page/")
    assert '<html lang="en">' in text and "<h1>Crons" in text and "New, never ran" in text
    assert "It has never run" in text and "定时任务" not in text
    assert 'href="/page/?lang=zh_CN"' in text  # the footer's way to Chinese


@ONE_BACKEND
def test_lang_zh_cn_shows_the_page_in_chinese_and_a_cookie_keeps_it(signed_in):
    response = signed_in.get("/page/?lang=zh_CN")
    text = response.get_data(as_text=True)
    assert '<html lang="zh-CN">' in text and "<h1>定时任务" in text
    assert "新建，从未运行" in text and "从未运行过，且不会按计划触发" in text
    cookie = response.headers["Set-Cookie"]
    assert "qlshadow_lang=zh_CN" in cookie and "Path=/page" in cookie
    # The links that follow carry no ?lang=, and stay Chinese.
    assert "<h1>健康状态</h1>" in html(signed_in, "/page/health")
    assert "对账门禁" in html(signed_in, "/page/gate")
    assert "Crons" not in html(signed_in, "/page/").split("<main>")[1].split("</main>")[0]
    # Back to English the same way.
    assert "<h1>Crons" in html(signed_in, "/page/?lang=en")
    assert "<h1>Health</h1>" in html(signed_in, "/page/health")


@ONE_BACKEND
@pytest.mark.parametrize("header", ["zh-CN,zh;q=0.9,en;q=0.8", "zh", "zh-TW", "zh-Hans-CN"])
def test_a_browser_that_asks_for_chinese_gets_it(signed_in, header):
    text = html(signed_in, "/page/", **{"Accept-Language": header})
    assert "<h1>定时任务" in text


@ONE_BACKEND
def test_a_browser_that_prefers_english_gets_english(signed_in):
    text = html(signed_in, "/page/", **{"Accept-Language": "en-US,en;q=0.9,zh-CN;q=0.5"})
    assert "<h1>Crons" in text


@pytest.fixture
def zh_app(make_settings):
    application = create_app(make_settings(QL_LANG="zh_CN"))
    yield application
    db.discard_connection()


@ONE_BACKEND
def test_ql_lang_is_the_pages_language_when_the_browser_names_neither(zh_app):
    client = zh_app.test_client()
    assert "<h1>登录</h1>" in html(client, "/page/login")
    assert "<h1>Sign in</h1>" in html(client, "/page/login", **{"Accept-Language": "en"})
    assert "<h1>Sign in</h1>" in html(client, "/page/login?lang=en")


@ONE_BACKEND
def test_the_sign_in_errors_follow_the_pages_language(client, app):
    response = client.post("/page/login?lang=zh_CN", data={"client_id": "x", "client_secret": "y"})
    assert response.status_code == 401
    assert "凭据错误，或其应用缺少 &#39;crons&#39; 权限。" in response.get_data(as_text=True)


@ONE_BACKEND
def test_a_chinese_page_leaves_no_language_behind_for_the_api(signed_in, auth):
    html(signed_in, "/page/?lang=zh_CN")
    reasons = signed_in.get("/open/crons/health", headers=auth).get_json()["data"]
    assert reasons[0]["reason"].startswith("It has never run")


@ONE_BACKEND
def test_a_failed_cron_reads_in_chinese_on_its_page(signed_in, auth, make_cron):
    cron = make_cron(name="sync", schedule="0 3 * * 1")["id"]
    run(signed_in, auth, cron, 2)
    text = html(signed_in, f"/page/crons/{cron}?lang=zh_CN")
    assert "最近一次执行于" in text and "以退出码 2 结束" in text
    assert "每周一 03:00" in text and "<dt>定时规则</dt>" in text and "失败" in text
    # Filters run while the page streams: the duration's units are Chinese too.
    assert "<dt>上次运行时长</dt><dd>1 秒</dd>" in text


# --- health and gate reasons in the API ---------------------------------------------------------

def test_with_ql_lang_zh_cn_reasons_are_chinese_and_machine_words_english(zh_app, make_settings):
    client = zh_app.test_client()
    from qlshadow.core.auth import system_token
    with db.database.connection_context(), db.write_transaction():
        token = system_token(zh_app.extensions["qlshadow"].token_file)["value"]
    auth = {"Authorization": f"Bearer {token}"}
    cron = client.post("/open/crons", headers=auth, json={
        "name": "sync", "command": "true", "schedule": "@once"}).get_json()["data"]["id"]
    run(client, auth, cron, 3)
    (found,) = client.get("/open/crons/health", headers=auth).get_json()["data"]
    assert found["state"] == "failed"
    assert found["reason"].startswith("最近一次执行于") and "以退出码 3 结束" in found["reason"]
    gate = client.get("/open/reconcile", headers=auth).get_json()["data"]
    assert gate["gate"]["verdict"] == "insufficient"
    assert gate["gate"]["reasons"] == [
        "system 模式下没有生效的定时任务：至少需要一个已启用、5 段表达式且没有额外定时规则的定时任务"]
    cron_gate = client.get(f"/open/reconcile?cron_id={cron}", headers=auth).get_json()["data"]
    (report,) = cron_gate["crons"]
    assert report["verdict"] == "insufficient"
    assert report["reasons"][0].startswith("在 system 模式下未生效")


def test_the_gates_reasons_in_chinese_name_the_same_figures():
    from qlshadow.watch.reconcile.gate import _gate
    reports = [{"cron_id": 7, "name": "a", "verdict": "fail", "reasons": ["x"]}]
    token = i18n.use("zh_CN")
    try:
        assert _gate(reports, {}, None)["reasons"] == ["定时任务 7（a）：x"]
        assert _gate([], {}, None)["reasons"] == [
            "system 模式下没有生效的定时任务：至少需要一个已启用、5 段表达式且没有额外定时规则的定时任务"]
    finally:
        i18n.reset(token)
    assert _gate(reports, {}, None)["reasons"] == ["cron 7 (a): x"]


def test_health_reasons_follow_the_language_in_effect():
    from qlshadow.watch import health
    cron = {"id": 1, "name": "a", "schedule": "@once", "is_disabled": 1, "created_at": 0,
            "updated_at": 100, "grace": None}
    assert health.evaluate(cron, [], health.NO_FIRINGS, 200)["reason"] == \
        "It is disabled, so crond does not start it."
    i18n.set_default("zh_CN")
    assert health.evaluate(cron, [], health.NO_FIRINGS, 200)["reason"] == "已禁用，crond 不会启动它。"


# --- notifications ---------------------------------------------------------------------------

def webhook(receiver) -> dict:
    return {"WEBHOOK_URL": receiver.url, "WEBHOOK_METHOD": "POST",
            "WEBHOOK_CONTENT_TYPE": "application/json",
            "WEBHOOK_BODY": "title: $title\ncontent: $content"}


def test_the_tick_sends_a_chinese_notification_with_ql_lang_zh_cn(make_settings, receiver):
    settings = make_settings(QL_LANG="zh_CN")
    application = create_app(settings)
    try:
        client = application.test_client()
        from qlshadow.core.auth import system_token
        with db.database.connection_context(), db.write_transaction():
            token = system_token(settings.token_file)["value"]
        auth = {"Authorization": f"Bearer {token}"}
        cron = client.post("/open/crons", headers=auth, json={
            "name": "备份", "command": "true", "schedule": "@once"}).get_json()["data"]["id"]
        run(client, auth, cron, 4, start=int(time.time()))
        crontab.write_notify_conf(settings, environ=webhook(receiver))
    finally:
        db.discard_connection()
    i18n.set_default("en")  # the tick's own process must find zh_CN in notify.conf
    conf = os.path.join(settings.data_dir, crontab.NOTIFY_CONF)
    process = tick_process(conf)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    (sent,) = [json.loads(r["body"]) for r in receiver.requests]
    assert sent["title"] == "qlshadow: 备份 运行失败"
    assert sent["content"].startswith(f"定时任务 {cron}「备份」于 ")
    assert "运行失败，主机 " in sent["content"] and "退出码：4。" in sent["content"]
    assert "日志末尾几行" not in sent["content"]  # its log file does not exist


def test_notify_test_sends_its_message_in_chinese(tmp_path, receiver):
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_LANG": "zh_CN", **webhook(receiver)}
    result = run_cli(env, "notify", "--test")
    assert result.stdout.startswith("webhook: ok")
    (sent,) = [json.loads(r["body"]) for r in receiver.requests]
    assert sent["title"] == "qlshadow: 测试通知"
    assert sent["content"].startswith("这是 qlshadow 于 ") and "此通知渠道工作正常。" in sent["content"]


def test_notify_test_is_english_by_default(tmp_path, receiver):
    result = run_cli({"QL_DATA_DIR": str(tmp_path / "data"), **webhook(receiver)},
                     "notify", "--test")
    assert result.stdout.startswith("webhook: ok")
    assert json.loads(receiver.requests[0]["body"])["title"] == "qlshadow: test notification"


@ONE_BACKEND
def test_a_served_chinese_page_leaves_no_language_on_its_thread(live_server):
    from helpers import http
    server = live_server(QL_THREADS="1")  # one thread answers every request in turn
    status, _ = http("POST", server.url + "/open/crons", {
        "name": "a", "command": "true", "schedule": "@once"},
        {**server.headers, "Content-Type": "application/json"})
    assert status == 200
    for _ in range(3):
        status, page = http("GET", server.url + "/page/login?lang=zh_CN", headers={"Host": "localhost"})
        assert status == 200 and "<h1>登录</h1>" in page.decode()
        status, found = http("GET", server.url + "/open/crons/health", headers=server.headers)
        assert found["data"][0]["reason"].startswith("It has never run")


def test_notify_test_refuses_a_bad_ql_lang_naming_it(tmp_path, receiver):
    env = {"QL_DATA_DIR": str(tmp_path / "data"), "QL_LANG": "cn", **webhook(receiver)}
    result = run_cli(env, "notify", "--test", check=False)
    assert result.returncode != 0 and "QL_LANG='cn' must be one of en, zh_CN" in result.stderr
    assert receiver.requests == []
