"""The request handler the loopback JSON fakes share: silent, and one method that answers with a JSON document."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A fake server's handler base: no access log on stderr; ``_reply`` sends ``doc`` as JSON with its length."""

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, code: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
