"""The one channel that is not HTTP: SMTP, its settings (SMTP_SERVER, SMTP_SSL, ...) and its
send, a mail from the account to itself."""
from __future__ import annotations

from dataclasses import dataclass, field

from qlshadow.watch.notify.model import ChannelError, Result
from qlshadow.watch.notify.request import first_line, need
from qlshadow.watch.notify.transport import network_reason


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    use_ssl: bool
    email: str
    password: str = field(repr=False)
    name: str


def smtp_settings(values, title, content) -> SmtpSettings:
    server = need(values, "SMTP_SERVER", " (host:port)")
    ssl_text = values.get("SMTP_SSL", "").strip().lower() or "false"
    if ssl_text not in ("true", "false"):
        raise ChannelError(f"SMTP_SSL={values['SMTP_SSL']!r} must be true or false")
    use_ssl = ssl_text == "true"
    email = need(values, "SMTP_EMAIL")
    host, sep, port = server.rpartition(":")
    if not sep:
        host, port = server, ("465" if use_ssl else "25")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ChannelError(f"SMTP_SERVER={server!r} must be host:port")
    return SmtpSettings(host.strip("[]"), int(port), use_ssl, email,
                         values.get("SMTP_PASSWORD", ""), values.get("SMTP_NAME", "").strip())


def send_smtp(settings: SmtpSettings, title: str, content: str, timeout: float) -> Result:
    import smtplib  # only this channel needs the mail modules
    from email.message import EmailMessage
    from email.utils import formataddr

    message = EmailMessage()
    message["Subject"] = title
    # As in QingLong: from the account to itself.
    message["From"] = message["To"] = formataddr((settings.name, settings.email))
    message.set_content(content)
    connect = smtplib.SMTP_SSL if settings.use_ssl else smtplib.SMTP
    try:
        with connect(settings.host, settings.port, timeout=timeout) as server:
            if settings.password:
                server.login(settings.email, settings.password)
            server.send_message(message)
    except smtplib.SMTPRecipientsRefused as exc:
        code, text = next(iter(exc.recipients.values()))
        return Result(False, f"SMTP {code}: {first_line(text)}")
    except smtplib.SMTPResponseException as exc:
        return Result(False, f"SMTP {exc.smtp_code}: {first_line(exc.smtp_error)}")
    except smtplib.SMTPException as exc:
        return Result(False, f"SMTP error: {first_line(str(exc).encode())}")
    except OSError as exc:
        return Result(False, network_reason(exc, timeout))
    return Result(True, "SMTP accepted")
