"""Turn SDK exceptions into a source status and a short, scrubbed detail line.

Works on class names and attributes so neither SDK has to be imported to classify its errors.
Nothing that looks like a credential, token or signature survives :func:`scrub`.
"""

from __future__ import annotations

import re
from typing import Any

_SECRETS = [
    (re.compile(r"\b(?:AKIA|ASIA|AROA|AIDA)[A-Z0-9]{12,}\b"), "<aws-key-id>"),
    (re.compile(r"(?i)(x-amz-security-token|x-amz-signature|x-amz-credential|signature|credential|"
                r"access_token|refresh_token|id_token|client_secret|password|token|key)(\s*[=:]\s*)[^\s&,;\"']+"),
     r"\1\2<redacted>"),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"), "Bearer <redacted>"),
    (re.compile(r"\bya29\.[A-Za-z0-9._-]+"), "<gcp-token>"),
    (re.compile(r"\b[A-Za-z0-9/+]{40}\b"), "<redacted>"),  # AWS secret-key shaped
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S), "<private-key>"),
]
MAX_DETAIL = 160

_THROTTLE_CODES = {"Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
                   "TooManyRequestsException", "RequestThrottled", "RequestThrottledException", "SlowDown",
                   "LimitExceededException"}
_DENIED_CODES = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure", "OptInRequired",
                 "InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "ExpiredToken",
                 "ExpiredTokenException", "InvalidAccessKeyId", "Blocked"}
_TIMEOUT_NAMES = {"ConnectTimeoutError", "ReadTimeoutError", "ReadTimeout", "ConnectTimeout", "Timeout",
                  "DeadlineExceeded", "TimeoutError", "socket.timeout", "TimeoutExpired"}
_NOCRED_NAMES = {"MissingCredentials", "NoCredentialsError", "PartialCredentialsError", "ProfileNotFound",
                 "NoRegionError",
                 "DefaultCredentialsError", "CredentialRetrievalError", "UnauthorizedSSOTokenError",
                 "SSOTokenLoadError", "TokenRetrievalError"}


def scrub(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` on one line, shortened, with anything credential-like replaced."""
    out = " ".join(str(text).split())
    for pattern, repl in _SECRETS:
        out = pattern.sub(repl, out)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes (google's RetryError wraps the last attempt's error)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 6:
        seen.append(cur)
        nxt = getattr(cur, "cause", None) or cur.__cause__ or cur.__context__
        cur = nxt if isinstance(nxt, BaseException) else None
    return seen


def _http_status(exc: BaseException) -> int | None:
    resp: Any = getattr(exc, "response", None)
    if isinstance(resp, dict):  # botocore ClientError
        code = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return int(code) if isinstance(code, int) else None
    code = getattr(exc, "code", None)  # google.api_core GoogleAPICallError: HTTP status
    return code if isinstance(code, int) and 100 <= code < 600 else None


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, detail) for an exception raised by a cloud call."""
    chain = _chain(exc)
    for e in chain:
        name = type(e).__name__
        if name == "RetryError":
            continue  # google's retry gave up: classify by the last attempt's error (its cause)
        if name in _NOCRED_NAMES:
            return "no-credentials", scrub(f"{name}: {e}")
        resp: Any = getattr(e, "response", None)
        if isinstance(resp, dict) and "Error" in resp:
            code = str(resp["Error"].get("Code", ""))
            msg = str(resp["Error"].get("Message", ""))
            http = _http_status(e)
            detail = scrub(f"{code} (HTTP {http}): {msg}" if http else f"{code}: {msg}")
            if code in _THROTTLE_CODES or http == 429:
                return "throttled", detail
            if code in _DENIED_CODES or http in (401, 403):
                return "denied", detail
            return "error", detail
        if name in _TIMEOUT_NAMES or "Timeout" in name:
            return "timeout", scrub(f"{name}: {e}")
        http = _http_status(e)
        if http is not None:
            detail = scrub(f"HTTP {http}: {getattr(e, 'message', '') or e}")
            if http == 429:
                return "throttled", detail
            if http in (401, 403):
                return "denied", detail
            if http == 504:
                return "timeout", detail
            return "error", detail
    if any(type(e).__name__ == "RetryError" for e in chain):
        return "timeout", scrub(f"gave up after retries: {exc}")
    if isinstance(exc, ModuleNotFoundError):
        from placement.console import extra_command

        return "error", f"{exc.name} is not installed: add the 'live' extra with {extra_command('live')}"
    return "error", scrub(f"{type(exc).__name__}: {exc}")
