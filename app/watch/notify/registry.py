"""The channel table: each channel's name, the variables that switch it on and the builder
that makes its request from the settings, in the order messages are sent."""
from __future__ import annotations

from qlshadow.watch.notify.chat_bots import (aibotk, chat, chronocat, dingtalk, feishu, gobot, qmsg,
                                             telegram, wecom, wecom_app, weplus)
from qlshadow.watch.notify.push_apps import (bark, gotify, igot, ntfy, pushdeer, pushme, pushplus,
                                             serverchan, wxpusher)
from qlshadow.watch.notify.smtp import smtp_settings
from qlshadow.watch.notify.webhook import webhook


# name -> (variables that switch the channel on, builder). The order is the send order.
CHANNELS: dict = {
    "webhook": (("WEBHOOK_URL", "WEBHOOK_METHOD"), webhook),
    "ntfy": (("NTFY_TOPIC",), ntfy),
    "gotify": (("GOTIFY_URL", "GOTIFY_TOKEN"), gotify),
    "bark": (("BARK_PUSH",), bark),
    "telegram": (("TG_BOT_TOKEN", "TG_USER_ID"), telegram),
    "serverchan": (("PUSH_KEY",), serverchan),
    "pushplus": (("PUSH_PLUS_TOKEN",), pushplus),
    "wecom": (("QYWX_KEY",), wecom),
    "dingtalk": (("DD_BOT_TOKEN", "DD_BOT_SECRET"), dingtalk),
    "feishu": (("FSKEY",), feishu),
    "smtp": (("SMTP_SERVER", "SMTP_EMAIL"), smtp_settings),
    "pushdeer": (("DEER_KEY",), pushdeer),
    "gobot": (("GOBOT_URL", "GOBOT_QQ"), gobot),
    "igot": (("IGOT_PUSH_KEY",), igot),
    "chat": (("CHAT_URL", "CHAT_TOKEN"), chat),
    "weplus": (("WE_PLUS_BOT_TOKEN",), weplus),
    "qmsg": (("QMSG_KEY",), qmsg),
    "wecom_app": (("QYWX_AM",), wecom_app),
    "aibotk": (("AIBOTK_KEY",), aibotk),
    "pushme": (("PUSHME_KEY",), pushme),
    "chronocat": (("CHRONOCAT_URL", "CHRONOCAT_TOKEN"), chronocat),
    "wxpusher": (("WXPUSHER_APP_TOKEN",), wxpusher),
}
CHANNEL_NAMES = tuple(CHANNELS)
