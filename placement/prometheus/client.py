"""A Prometheus server's HTTP API: one instant query, its answer checked by shape before use.

Everything the server sends is untrusted:

- **Deadlines are wall time.** Each request (DNS, connect, headers and body) must be done within its timeout, and
  every request and retry of a query within the query's deadline: a server that answers a byte a second is cut
  off there (a socket timeout alone bounds each read, not their sum). The request runs in a daemon thread that the
  caller stops waiting for at the deadline (its socket is then shut down, so the thread ends too).
- **Answers are bounded and checked.** At most :data:`MAX_ANSWER_BYTES`; a JSON object of
  ``{"status": "success", "data": {"resultType": "vector", "result": [...]}}`` whose samples each have a
  ``metric`` mapping of strings and a ``value`` of ``[time, "number"]``. A malformed answer is an error; a
  malformed sample inside a good answer is dropped and counted (:attr:`Answer.dropped`) for the caller to warn.
- **Nothing secret or raw is printed.** Credentials in the URL (``http://user:pass@host``) are sent as HTTP basic
  authentication and cut from every message (:func:`placement.errors.redact_url`); the server's own error text is
  shown through :func:`placement.errors.printable` (no escape sequences, one line, cut short). Redirects are
  refused (they would carry the credentials to another host, and turn the POST into a GET).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import http.client
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from placement.errors import UsageError, printable, redact_url, shown

MAX_ANSWER_BYTES = 64 * 2**20  # an instant query's vector: thousands of series are a few MB
QUERY_DEADLINE_S = 60.0  # every request and retry of one query (docs/calibration.md)


class PromError(Exception):
    """The Prometheus server could not answer (unreachable, an error status, a malformed answer)."""


@dataclass(frozen=True)
class Answer:
    """An instant query's samples, ``(labels, value)``; ``value`` may be NaN or infinite (Prometheus writes
    ``"NaN"`` and ``"+Inf"``), the caller decides. ``dropped``: why samples were left out, and how many."""

    samples: list[tuple[dict[str, str], float]]
    dropped: dict[str, int] = field(default_factory=dict)

    def __iter__(self) -> Any:
        return iter(self.samples)

    def dropped_text(self) -> str:
        """``"2 without a metric mapping, 1 with a value that is not a number"``, or ``""``."""
        return ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items()))


def server_url(url: str, flag: str = "--prometheus") -> tuple[str, dict[str, str]]:
    """(the URL without credentials, the headers that carry them): ``http://user:pass@host:9090/prefix`` is
    ``http://host:9090/prefix`` with HTTP basic authentication. A URL that is not ``http(s)://HOST[:PORT][/PATH]``
    is a :class:`UsageError` naming ``flag`` (its credentials cut)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port, parts = None, None, None  # type: ignore[assignment]
    if parts is None or parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in url.strip()) \
            or parts.query or parts.fragment:
        raise UsageError(f"{flag}: {shown(redact_url(url))} is not an http(s) URL of a server, e.g. "
                         "http://localhost:9090 (credentials as http://user:password@host:9090)")
    headers: dict[str, str] = {}
    if parts.username is not None or parts.password is not None:
        pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), headers


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


class _Late(Exception):
    """The request did not finish within its wall-time limit."""


def _open_within(req: urllib.request.Request, wait_s: float) -> tuple[int, str, bytes]:
    """(status, content type, body) of ``req``, all of it (DNS, connect, headers, body) within ``wait_s`` seconds
    of wall time, else :class:`_Late`. Error statuses are returned, not raised; the body is at most
    :data:`MAX_ANSWER_BYTES`."""
    conns: list[Any] = []

    def tracked(cls: Any) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            conn = cls(*args, **kwargs)
            conns.append(conn)
            return conn
        return make

    class Http(urllib.request.HTTPHandler):
        def http_open(self, r: Any) -> Any:
            return self.do_open(tracked(http.client.HTTPConnection), r)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, r: Any) -> Any:
            return self.do_open(tracked(http.client.HTTPSConnection), r,
                                context=self._context)  # type: ignore[attr-defined]

    opener = urllib.request.build_opener(_NoRedirect(), Http(), Https())
    done = threading.Event()
    result: dict[str, Any] = {}

    def body(resp: Any) -> bytes:
        data = bytearray()
        while True:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)  # one read at a time
            if not chunk:
                return bytes(data)
            data += chunk
            if len(data) > MAX_ANSWER_BYTES:
                raise PromError(f"answer larger than {MAX_ANSWER_BYTES // 2**20} MiB")

    def work() -> None:
        try:
            try:
                with opener.open(req, timeout=wait_s) as resp:
                    result["ok"] = (resp.status, resp.headers.get("Content-Type", ""), body(resp))
            except urllib.error.HTTPError as exc:
                with exc:
                    result["ok"] = (exc.code, exc.headers.get("Content-Type", "") if exc.headers else "",
                                    body(exc) if exc.fp is not None else b"")
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            result["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="prometheus-request", daemon=True).start()
    if not done.wait(wait_s):
        for conn in conns:  # wake the thread from its read: it ends instead of trickling on
            with contextlib.suppress(Exception):
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
        raise _Late()
    if "error" in result:
        raise result["error"]
    status, ctype, data = result["ok"]
    return status, ctype, data


def query(url: str, promql: str, at: dt.datetime, *, timeout_s: float = 10.0, retries: int = 2,
          deadline_s: float = QUERY_DEADLINE_S) -> Answer:
    """One instant query (``/api/v1/query``) evaluated at ``at``: the vector's samples. Each request has
    ``timeout_s`` of wall time; a failure is retried ``retries`` times with a short back-off, all within
    ``deadline_s`` of wall time. :class:`PromError` (its message without credentials) when no good answer came."""
    if not (0 < timeout_s <= 86_400 and 0 < deadline_s <= 86_400):
        raise ValueError("timeout_s and deadline_s must be in (0, 86400] seconds")
    base, auth = server_url(url)
    endpoint = base + "/api/v1/query"
    shown_at = redact_url(endpoint)
    body = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.3f}"}).encode()
    start = time.monotonic()
    last = ""
    for attempt in range(retries + 1):
        left = deadline_s - (time.monotonic() - start)
        if left <= 0:
            break
        req = urllib.request.Request(endpoint, data=body, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded", **auth})
        try:
            status, ctype, data = _open_within(req, min(timeout_s, left))
        except _Late:
            last = f"no complete answer within {min(timeout_s, left):g} s"
        except PromError:
            raise
        except (OSError, ValueError, EOFError) as exc:  # refused, reset, TLS, a malformed status line ...
            last = exc.__class__.__name__
        else:
            if status == 200:
                return parse_answer(data, ctype)
            if 300 <= status < 400:
                raise PromError(f"HTTP {status} from {shown_at}: a redirect, refused; give the server's own URL")
            if status < 500 and status != 429:  # the query itself was refused: retrying cannot help
                raise PromError(f"HTTP {status} from {shown_at}: {_error_text(data)}".rstrip(": "))
            last = f"HTTP {status}"
        if attempt < retries:
            time.sleep(min(0.2 * 2 ** attempt, max(0.0, deadline_s - (time.monotonic() - start))))
    raise PromError(f"no answer from {shown_at} ({last or f'deadline of {deadline_s:g} s'})")


def _error_text(data: bytes) -> str:
    """The ``error`` of a Prometheus error answer, printable; or nothing when the body is not one."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    if not isinstance(doc, dict):
        return ""
    kind, text = doc.get("errorType"), doc.get("error")
    return printable(f"{kind}: {text}" if isinstance(kind, str) and isinstance(text, str) else
                     text if isinstance(text, str) else "")


def parse_answer(data: bytes, content_type: str = "") -> Answer:
    """An instant query's answer checked by shape (see the module docstring). :class:`PromError` names what is
    wrong with a malformed answer; malformed samples are dropped and counted."""
    if content_type and "json" not in content_type.lower():
        raise PromError(f"answer of type {printable(content_type.split(';')[0], 60)}, not JSON (a proxy's page?)")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise PromError("answer is not JSON (a proxy's page, or cut short?)") from None
    if not isinstance(doc, dict):
        raise PromError(f"answer is a JSON {type(doc).__name__}, not a Prometheus answer object")
    if doc.get("status") != "success":
        text = _error_text(data)
        raise PromError(f"the server answered status {printable(str(doc.get('status')), 40)}"
                        + (f": {text}" if text else ""))
    result_data = doc.get("data")
    if not isinstance(result_data, dict):
        raise PromError("answer has no data object")
    if result_data.get("resultType") != "vector":
        raise PromError(f"expected a vector, got {printable(repr(result_data.get('resultType')), 40)}")
    result = result_data.get("result")
    if not isinstance(result, list):
        raise PromError("answer's data.result is not a list")
    samples: list[tuple[dict[str, str], float]] = []
    dropped: Counter[str] = Counter()
    for s in result:
        metric = s.get("metric") if isinstance(s, dict) else None
        value = s.get("value") if isinstance(s, dict) else None
        if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in metric.items()):
            dropped["without a metric mapping of strings"] += 1
            continue
        if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
            dropped['without a [time, "number"] value'] += 1
            continue
        try:
            v = float(value[1])
        except ValueError:
            dropped["with a value that is not a number"] += 1
            continue
        samples.append((metric, v))
    return Answer(samples, dict(dropped))


def finite(answer: Answer) -> list[tuple[dict[str, str], float]]:
    """The samples of ``answer`` whose values are finite numbers (an ``increase`` over no data is NaN)."""
    return [(m, v) for m, v in answer.samples if math.isfinite(v)]
