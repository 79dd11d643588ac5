"""The HTTP send: one attempt with a timeout, through the channel's proxy if it sets one,
following a redirect only within the same origin, then a follow-up request if the channel
makes one (a token fetched, then the message sent with it)."""
from __future__ import annotations

import urllib.parse

from qlshadow.watch.notify.model import Result
from qlshadow.watch.notify.request import HttpRequest, first_line
from qlshadow.watch.notify.scrub import MASK

# A channel's reply is read only to judge success and quote its first line.
REPLY_MAX_BYTES = 65536
# A same-origin redirect is followed this many times at most; one to another origin never.
MAX_REDIRECTS = 3


def network_reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"network error: {detail}"


def send_http(request: HttpRequest, timeout: float) -> Result:
    # Imported here: the notify tick runs every minute and mostly sends nothing, and these
    # (with ssl and email) are a good part of its start-up.
    import http.client
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        # Replaces the default handler, which would follow any redirect anywhere with the
        # headers (Authorization among them) and turn a POST into a GET without its body.
        # Declining leaves every 3xx to the default error handler: an HTTPError, below.
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            return None

    # A proxy set for the channel replaces the environment's (http_proxy and the like),
    # which build_opener's default ProxyHandler reads otherwise.
    handlers = [NoRedirect()]
    if request.proxy:
        handlers.append(urllib.request.ProxyHandler({"http": request.proxy,
                                                     "https": request.proxy}))
    opener = urllib.request.build_opener(*handlers)
    url = request.url
    for _ in range(MAX_REDIRECTS + 1):
        outgoing = urllib.request.Request(url, data=request.body, headers=request.headers,
                                          method=request.method)
        try:
            with opener.open(outgoing, timeout=timeout) as reply:
                status, body = reply.status, reply.read(REPLY_MAX_BYTES)
            break
        except urllib.error.HTTPError as exc:
            with exc:
                if not 300 <= exc.code < 400:
                    return Result(False, f"HTTP {exc.code}: "
                                         f"{first_line(exc.read(REPLY_MAX_BYTES))}")
                url, refused = _redirect(url, exc.headers.get("Location"), exc.code)
            if refused:
                return Result(False, refused)
        except urllib.error.URLError as exc:
            reason = exc.reason if isinstance(exc.reason, BaseException) else OSError(exc.reason)
            return Result(False, network_reason(reason, timeout))
        except (OSError, http.client.HTTPException) as exc:
            return Result(False, network_reason(exc, timeout))
    else:
        return Result(False, f"redirected more than {MAX_REDIRECTS} times")
    problem = request.judge(body)
    if problem is not None:
        return Result(False, f"HTTP {status}: {problem}")
    following = request.follow(body) if request.follow else None
    if following is not None:
        result = send_http(following, timeout)
        reason = result.reason
        for text in following.hidden:
            if text:
                reason = reason.replace(text, MASK)
        return Result(result.ok, reason)
    return Result(True, f"HTTP {status}")


def _origin(url: str) -> tuple[tuple, str]:
    """(scheme, host, port) with the scheme's default port, and the origin as text."""
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port  # ValueError for a port that is not a number
    shown = f"[{host}]" if ":" in host else host
    text = f"{scheme}://{shown}" + (f":{port}" if port is not None else "")
    return (scheme, host, port or {"http": 80, "https": 443}.get(scheme)), text


def _redirect(url: str, location: str | None, code: int) -> tuple[str, str | None]:
    """Where a 3xx reply sends the same request next, or why it is not followed.

    Every 3xx is "repeat this request at the new address" (307/308 semantics, also for
    301/302/303): a receiver that moved keeps getting the method, body and headers.
    """
    if not location:
        return url, f"HTTP {code}: a redirect without a Location"
    target = urllib.parse.urljoin(url, location.strip())
    try:
        (here, _), (there, shown) = _origin(url), _origin(target)
    except ValueError:
        return url, f"HTTP {code}: a redirect to a malformed Location refused"
    if there != here:
        return url, f"redirect to another origin refused: {shown}"
    return target, None
