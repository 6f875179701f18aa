"""A Prometheus server's HTTP API: one instant query with a per-request timeout, retries and a deadline.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from placement.errors import shown


class PromError(Exception):
    """The Prometheus server could not answer (unreachable, an error status, a malformed answer)."""


def query(url: str, promql: str, at: dt.datetime, *, timeout_s: float = 10.0, retries: int = 2,
          deadline_s: float = 60.0, opener: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """One instant query (``/api/v1/query``) evaluated at ``at``: the vector's samples. Each request has
    ``timeout_s``; a failure is retried ``retries`` times with a short back-off, all within ``deadline_s``."""
    endpoint = url.rstrip("/") + "/api/v1/query"
    body = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.3f}"}).encode()
    start = time.monotonic()
    opener = opener or urllib.request.urlopen
    last = ""
    for attempt in range(retries + 1):
        left = deadline_s - (time.monotonic() - start)
        if left <= 0:
            break
        try:
            req = urllib.request.Request(endpoint, data=body, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
            with opener(req, timeout=min(timeout_s, left)) as resp:
                doc = json.loads(resp.read(64 * 1024 * 1024))
            if doc.get("status") != "success":
                raise PromError(f"{doc.get('errorType', 'error')}: {doc.get('error', '')}"[:200])
            data = doc.get("data") or {}
            if data.get("resultType") != "vector":
                raise PromError(f"expected a vector, got {shown(data.get('resultType'))}")
            return list(data.get("result") or [])
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
            if exc.code < 500 and exc.code != 429:
                try:
                    detail = json.loads(exc.read()).get("error", "")
                except (ValueError, OSError):
                    detail = ""
                raise PromError(f"HTTP {exc.code} {detail}"[:200]) from None
        except PromError:
            raise
        except (OSError, ValueError) as exc:
            last = exc.__class__.__name__
        if attempt < retries:
            time.sleep(min(0.2 * 2 ** attempt, max(0.0, deadline_s - (time.monotonic() - start))))
    raise PromError(f"no answer from {endpoint} ({last or 'deadline'})")
