"""One redaction layer for everything the dispatcher and ``submit`` show: log lines, Event messages, metric
labels, errors. Pure (a process-wide registry of secrets, no I/O).

Two rules, applied together by :func:`redact`:

* **known secrets**: every credential the process loads (a kubeconfig's token, client key and certificate
  data, the hub's own token) is registered with :func:`remember` when it is read, and each occurrence is
  replaced by ``[redacted]`` wherever it turns up (an API server or proxy may echo a request's headers
  back in an error body);
* **shapes of credentials**: ``Authorization:`` headers and ``Bearer``/``Basic`` values, PEM blocks,
  JSON/YAML fields named like credentials (``token``, ``password``, ``client-key-data``...), JWTs and
  long base64 runs (40+ characters: certificate or key data) are replaced too, known or not.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

MASK = "[redacted]"
MIN_SECRET = 6  # shorter strings are not registered: replacing them would mangle ordinary words

_lock = threading.Lock()
_known: set[str] = set()
_known_re: re.Pattern[str] | None = None

_SHAPES = (
    re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(-----END [A-Z0-9 ]+-----|$)", re.S),
    re.compile(r"(?i)(authorization|proxy-authorization|x-auth-token|cookie|set-cookie)(\"?\s*[:=]\s*\"?)"
               r"(bearer\s+|basic\s+)?[^\s\"',}]+"),
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"(?i)([\"']?(?:[a-z-]*token|password|passwd|secret|client-key-data|client-certificate-data|"
               r"certificate-authority-data|api[_-]?key|private[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),  # a JWT (service-account tokens)
    re.compile(r"[A-Za-z0-9+/]{40,}={0,2}"),  # base64 runs: certificate, key or token data
)


def remember(*secrets: Any) -> None:
    """Register credentials to hide wherever they appear (strings of at least :data:`MIN_SECRET` characters)."""
    global _known_re
    new = {s.strip() for s in secrets if isinstance(s, str) and len(s.strip()) >= MIN_SECRET}
    with _lock:
        if new <= _known:
            return
        _known.update(new)
        ordered = sorted(_known, key=len, reverse=True)
        _known_re = re.compile("|".join(re.escape(s) for s in ordered))


def remember_kubeconfig(doc: Any) -> None:
    """Register every credential a kubeconfig mapping holds (users' tokens, passwords, key and cert data)."""
    if not isinstance(doc, Mapping):
        return
    for u in doc.get("users") or []:
        user = u.get("user") if isinstance(u, Mapping) else None
        if isinstance(user, Mapping):
            remember(*(user.get(k) for k in ("token", "password", "client-key-data", "client-certificate-data")))


# What each of _SHAPES cannot match without: one of these strings, in the text as it is (the PEM block and the JWT,
# case-sensitive) or lower-cased (the (?i) shapes); None: no such string (the base64 run), always applied. A prefilter
# only, exact for ASCII text: ASCII letters fold to ASCII letters alone, so a (?i) shape matches ASCII text only where
# its lower-cased text holds the literal. Text with any other character (where (?i) folds 'ſ' to 's', 'K' to 'k')
# goes through every shape. Each shape's literals: PEM "-----BEGIN "; the headers (proxy-authorization holds
# authorization, set-cookie cookie); bearer/basic; the fields ([a-z-]*token; password and passwd; secret;
# client-key-data, api key and private key hold "key"; the two certificate fields "data"); a JWT's "eyJ".
_NEEDS: tuple[tuple[tuple[str, ...], bool] | None, ...] = (
    (("-----BEGIN ",), False),
    (("authorization", "x-auth-token", "cookie"), True),
    (("bearer", "basic"), True),
    (("token", "pass", "secret", "key", "data"), True),
    (("eyJ",), False),
    None,
)


def _may_match(i: int, out: str, low: str) -> bool:
    """Whether shape ``i`` of :data:`_SHAPES` may match ``out`` (ASCII; ``low`` is ``out.lower()``)."""
    needs = _NEEDS[i]
    if needs is None:
        return True
    literals, folded = needs
    hay = low if folded else out
    return any(lit in hay for lit in literals)


def redact(text: Any) -> str:
    """``text`` (any value, as ``str``) with known secrets and anything shaped like a credential masked."""
    out = text if isinstance(text, str) else str(text)
    pattern = _known_re
    if pattern is not None:
        out = pattern.sub(MASK, out)
    # A shape that cannot match (:data:`_NEEDS`, checked on the text as the shapes before it left it) is skipped: an
    # error text names none of them, and the (?i) ones cost tens of microseconds each.
    ascii_text = out.isascii()
    low = out.lower() if ascii_text else ""
    for i, shape in enumerate(_SHAPES):
        if ascii_text and not _may_match(i, out, low):
            continue
        before = out
        if i == 1:
            out = shape.sub(lambda m: m.group(1) + m.group(2) + MASK, out)
        elif i == 3:
            out = shape.sub(lambda m: m.group(1) + MASK, out)
        else:
            out = shape.sub(MASK, out)
        if ascii_text and out is not before:
            ascii_text = out.isascii()  # the mask is ASCII: it stays so
            low = out.lower()
    return out


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string in it redacted (mappings and lists rebuilt)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v) for v in value]
    return value
