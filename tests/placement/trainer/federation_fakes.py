"""Loopback stand-ins for the two federation flows of issue 35: a signed Kubernetes service-account token (what
GKE projects into a pod), Google's STS token exchange, and a GCS JSON API bucket (what gcsfs reads and writes)."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GKE_ISSUER = "https://container.googleapis.com/v1/projects/proj/locations/us-central1/clusters/gke-a"
ACCESS_TOKEN = "ya29.federated-by-loopback"


def service_account_token(subject: str = "system:serviceaccount:team-a:trainer", audience: str = "sts.amazonaws.com",
                          issuer: str = GKE_ISSUER) -> str:
    """An RS256 JWT as the kubelet projects it (issuer, subject, audience, an hour's expiry), signed by a fresh key."""
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    now = int(time.time())
    key = RSAKey.generate_key(2048)
    claims = {"iss": issuer, "sub": subject, "aud": [audience], "iat": now, "nbf": now, "exp": now + 3600}
    return jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)


class _State:
    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []
        self.objects: dict[tuple[str, str], bytes] = {}
        self.sessions: dict[str, tuple[str, str, bytearray]] = {}
        self.unauthorised = 0
        self.lock = threading.Lock()


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def _send(self, code: int, body: Any = None, raw: bytes | None = None) -> None:
            data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if raw is None else "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
                state.unauthorised += 1
                self._send(401, {"error": {"code": 401, "message": "no federated token"}})
                return False
            return True

        def _meta(self, bucket: str, name: str) -> dict[str, Any]:
            data = state.objects[(bucket, name)]
            return {"kind": "storage#object", "bucket": bucket, "name": name, "size": str(len(data)),
                    "generation": "1", "updated": "2026-11-29T00:00:00Z", "contentType": "application/octet-stream"}

        def do_POST(self) -> None:  # noqa: N802
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/v1/token":  # Google STS: RFC 8693 token exchange
                form = dict(urllib.parse.parse_qsl(self._body().decode()))
                state.exchanges.append(form)
                subject = json.loads(urllib.parse.unquote(form.get("subject_token", "")) or "{}")
                signed = any(h.get("key", "").lower() == "authorization" and "AWS4-HMAC-SHA256" in h.get("value", "")
                             for h in subject.get("headers", []))
                if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" or not signed \
                        or "GetCallerIdentity" not in subject.get("url", ""):
                    self._send(400, {"error": "invalid_grant"})
                    return
                self._send(200, {"access_token": ACCESS_TOKEN, "issued_token_type":
                                 "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer",
                                 "expires_in": 3600})
                return
            if not self._authorised():
                return
            parts = url.path.split("/")
            if url.path.startswith("/upload/storage/v1/b/") and query.get("uploadType") == "resumable":
                self._resumable(parts[5], query)
                return
            if url.path.startswith("/upload/storage/v1/b/") and query.get("name"):  # a simple (media) upload
                bucket = parts[5]
                with state.lock:
                    state.objects[(bucket, query["name"])] = self._body()
                self._send(200, self._meta(bucket, query["name"]))
                return
            if url.path.startswith("/upload/storage/v1/b/") and query.get("uploadType") == "multipart":
                bucket = parts[5]
                body = self._body()
                boundary = self.headers.get_content_type() and self.headers.get_param("boundary")
                chunks = body.split(b"--" + str(boundary).encode())
                meta_part, data_part = chunks[1], chunks[2]
                meta = json.loads(meta_part.split(b"\r\n\r\n", 1)[1].strip())
                data = data_part.split(b"\r\n\r\n", 1)[1]
                data = data[:-2] if data.endswith(b"\r\n") else data
                with state.lock:
                    state.objects[(bucket, meta["name"])] = data
                self._send(200, self._meta(bucket, meta["name"]))
                return
            self._send(404, {"error": {"code": 404, "message": "not here"}})

        def _resumable(self, bucket: str, query: dict[str, str]) -> None:
            """A resumable upload: the session (its Location), then chunks POSTed to it (Content-Range)."""
            body = self._body()
            upload = query.get("upload_id")
            if upload is None:
                name = query.get("name") or json.loads(body or b"{}").get("name")
                with state.lock:
                    upload = f"u{len(state.sessions)}"
                    state.sessions[upload] = (bucket, str(name), bytearray())
                host = self.headers.get("Host")
                location = f"http://{host}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={upload}"
                self.send_response(200)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            bucket, name, buf = state.sessions[upload]
            buf += body
            total = self.headers.get("Content-Range", "").rpartition("/")[2]
            if total != "*" and total.isdigit() and len(buf) >= int(total):
                with state.lock:
                    state.objects[(bucket, name)] = bytes(buf)
                    del state.sessions[upload]
                self._send(200, self._meta(bucket, name))
                return
            self.send_response(308)
            if buf:
                self.send_header("Range", f"bytes=0-{len(buf) - 1}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            parts = [urllib.parse.unquote(p) for p in url.path.split("/")]
            if url.path.startswith("/download/storage/v1/b/") or (len(parts) > 6 and query.get("alt") == "media"):
                off = 1 if url.path.startswith("/download/") else 0
                bucket, name = parts[4 + off], "/".join(parts[6 + off:])
                data = state.objects.get((bucket, name))
                if data is None:
                    self._send(404, {"error": {"code": 404}})
                    return
                rng = self.headers.get("Range")
                if rng:
                    start, _, end = rng.removeprefix("bytes=").partition("-")
                    data = data[int(start): int(end) + 1 if end else None]
                self._send(200, raw=data)
                return
            if len(parts) >= 6 and parts[5] == "o" and len(parts) == 6:  # list
                bucket, prefix, delim = parts[4], query.get("prefix", ""), query.get("delimiter", "")
                items, prefixes = [], set()
                for (b, n) in sorted(state.objects):
                    if b != bucket or not n.startswith(prefix):
                        continue
                    rest = n[len(prefix):]
                    if delim and delim in rest:
                        prefixes.add(prefix + rest.split(delim)[0] + delim)
                    else:
                        items.append(self._meta(b, n))
                self._send(200, {"kind": "storage#objects", "items": items, "prefixes": sorted(prefixes)})
                return
            if len(parts) >= 7 and parts[5] == "o":  # object metadata
                bucket, name = parts[4], "/".join(parts[6:])
                if (bucket, name) not in state.objects:
                    self._send(404, {"error": {"code": 404}})
                    return
                self._send(200, self._meta(bucket, name))
                return
            if len(parts) == 5:  # the bucket
                self._send(200, {"kind": "storage#bucket", "name": parts[4]})
                return
            self._send(404, {"error": {"code": 404}})

        def do_DELETE(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(self.path).path.split("/")]
            with state.lock:
                found = state.objects.pop((parts[4], "/".join(parts[6:])), None)
            self._send(204 if found is not None else 404)

    return Handler


@contextmanager
def google_loopback() -> Iterator[tuple[str, _State]]:
    """One server on 127.0.0.1 that is both Google's STS (``/v1/token``) and a GCS bucket that only answers the
    token it issued; yields its base URL and what it saw."""
    state = _State()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
