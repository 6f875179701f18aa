"""Issue 38: a Prometheus server is untrusted. A loopback fake answers ``calibrate --prometheus`` and ``report
--prometheus`` with hostile answers, one table row per case: nothing crashes (one line, the exit code the command
documents), no credential of the URL reaches a message, a server's own text never reaches the terminal raw, and
a server that trickles is cut off at the deadline, measured as wall time."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from factories import run

from placement.prometheus.client import PromError, query

SECRET = "s3cr3t-pa55"
LABELS = {"cloud": "aws", "region": "us-east-1", "zone": "use1-az6", "instance_type": "p5.48xlarge"}


def _vector(samples: list[Any]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": samples}}).encode()


class Fake:
    """A loopback HTTP server whose every answer is ``answer(handler)``; it records the Authorization headers."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.auth: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server interface
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.auth.append(self.headers.get("Authorization"))
                with contextlib.suppress(OSError):  # the client gave up (the deadline): nothing to answer
                    answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def body(status: int, data: bytes, ctype: str = "application/json") -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer


def trickle(headers_too: bool) -> Callable[[BaseHTTPRequestHandler], None]:
    """A byte every 0.2 s, of the headers or of a body that would take minutes."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        data = _vector([])
        if headers_too:
            for ch in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 600:
                h.wfile.write(bytes([ch]))
                h.wfile.flush()
                time.sleep(0.2)
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data) + 600))
        h.end_headers()
        for ch in data + b" " * 600:
            h.wfile.write(bytes([ch]))
            h.wfile.flush()
            time.sleep(0.2)
    return answer


@pytest.fixture
def fake() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], Fake]]:
    made: list[Fake] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> Fake:
        made.append(Fake(answer))
        return made[-1]

    yield start
    for f in made:
        f.close()


ANSI = "line one\n\x1b[2J\x1b[31mred\x1b[0m\r\n\x07\u202eevil"

# (case, the server's answer, calibrate's exit code, what its stderr holds)
CASES = [
    ("a JSON list answer", body(200, b"[1, 2]"), 1, "not a Prometheus answer object"),
    ("HTML from a proxy", body(200, b"<html>login</html>", "text/html"), 1, "not JSON"),
    ("not JSON", body(200, b"{nope"), 1, "not JSON"),
    ("no data object", body(200, b'{"status": "success"}'), 1, "no data object"),
    ("a matrix, not a vector", body(200, json.dumps({"status": "success", "data": {
        "resultType": "matrix", "result": []}}).encode()), 1, "expected a vector"),
    ("an error with escapes and newlines", body(400, json.dumps({"status": "error", "errorType": "bad_data",
                                                                 "error": ANSI}).encode()), 1, "bad_data: line one"),
    ("a redirect", body(302, b""), 1, "redirect, refused"),
    ("500 three times", body(500, b"oops"), 1, "HTTP 500"),
    ("samples without a metric, values not numbers", body(200, _vector([
        {"value": [1, "3600"]}, {"metric": LABELS, "value": [1, "lots"]}, {"metric": LABELS, "value": [1, {}]},
        {"metric": {"cloud": 5}, "value": [1, "1"]}])), 1, "left out"),
    ("an absurd measurement", body(200, _vector([{"metric": LABELS, "value": [1, "1e300"]}])), 1,
     "left out spot row"),
]


@pytest.mark.parametrize("case, answer, code, said", CASES, ids=[c[0] for c in CASES])
def test_calibrate_on_a_hostile_answer_says_one_thing_and_never_leaks(
        case: str, answer: Callable[[BaseHTTPRequestHandler], None], code: int, said: str,
        fake: Callable[..., Fake], tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    server = fake(answer)
    out = tmp_path / "cal.json"
    got, stdout, err = run(capsys, "calibrate", "--prometheus", server.url(f"alice:{SECRET}@"), "-o", str(out),
                           "--timeout", "2")
    assert got == code, err
    assert said in err, err
    assert SECRET not in err + stdout and "Traceback" not in err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    errors = [line for line in err.splitlines() if line.startswith("placement: error")]
    assert len(errors) == 1 and not out.exists()
    assert server.auth and all(a == "Basic YWxpY2U6czNjcjN0LXBhNTU=" for a in server.auth)  # alice:s3cr3t-pa55


def test_report_on_non_numeric_answers_warns_per_query_and_never_leaks(
        fake: Callable[..., Fake], tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from placement.commands.report import _progress

    server = fake(body(200, _vector([{"metric": {"job": "a"}, "value": [1, "many"]},
                                     {"metric": {"job": "b"}, "value": [1, "NaN"]},
                                     {"metric": {"job": "c"}, "value": [1, "12"]}])))
    warnings: list[str] = []
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    got = _progress(server.url(f"u:{SECRET}@"), now - dt.timedelta(hours=1), now, 2.0, warnings)
    assert got == {"c": {"tokens": 12.0, "samples": 12.0, "steps": 12.0}}
    assert len(warnings) == 3 and all("left out" in w and SECRET not in w for w in warnings)


def test_report_with_a_password_in_the_url_never_prints_it(fake: Callable[..., Fake], tmp_path: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import yaml
    from kubefake import FakeApi

    server = fake(body(503, b"down"))
    api = FakeApi("hub")
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
        code, out, err = run(capsys, "report", "--kubeconfig", str(kubeconfig), "--prometheus",
                             server.url(f"bob:{SECRET}@"), "--no-calibration", "--timeout", "1")
    finally:
        api.close()
    assert code == 1 and SECRET not in err + out and "from http://127.0.0.1:" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--prometheus", "--prometheus="])
@pytest.mark.parametrize("url", [f"ftp://u:{SECRET}@host", f"http://u:{SECRET}@host:port", "http://", "localhost:9090",
                                 f"http://u:{SECRET}@host/?q=1"])
def test_a_malformed_url_is_named_without_its_credentials(flag: str, url: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", f"{flag}{url}"] if flag.endswith("=") else ["calibrate", flag, url]
    code, _, err = run(capsys, *argv)
    assert code == 2 and SECRET not in err and len(err.strip().splitlines()) == 1 and "--prometheus" in err


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_server_answering_a_byte_at_a_time_is_cut_off_at_the_deadline(
        headers_too: bool, fake: Callable[..., Fake]) -> None:
    import datetime as dt

    server = fake(trickle(headers_too))
    start = time.monotonic()
    with pytest.raises(PromError) as got:
        query(server.url(), "up", dt.datetime.now(dt.UTC), timeout_s=30.0, deadline_s=1.5)
    took = time.monotonic() - start
    assert took < 4.0, took  # before: each read's socket timeout restarted with every byte (minutes)
    assert "within" in str(got.value)


def test_calibrate_against_a_trickling_server_ends_within_its_timeouts(fake: Callable[..., Fake], tmp_path: Any,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    server = fake(trickle(False))
    start = time.monotonic()
    code, _, err = run(capsys, "calibrate", "--prometheus", server.url(), "--timeout", "0.5", "-o",
                       str(tmp_path / "c.json"))
    # 3 attempts of 0.5 s of wall time and the back-off between them: not the minutes the body would take
    assert code == 1 and time.monotonic() - start < 5.0 and len(err.strip().splitlines()) == 1


def test_an_answer_over_the_cap_is_refused(fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    from placement.prometheus import client

    monkeypatch.setattr(client, "MAX_ANSWER_BYTES", 1000)
    server = fake(body(200, _vector([{"metric": {"a": "x" * 50}, "value": [1, "1"]}] * 100)))
    with pytest.raises(PromError, match="larger than"):
        query(server.url(), "up", dt.datetime.now(dt.UTC))


@pytest.mark.parametrize("timeout", ["nan", "-1", "0", "1e300", "inf", "soon"])
@pytest.mark.parametrize("command", ["calibrate", "report"])
def test_timeout_flags_are_bounded(command: str, timeout: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, "--timeout", timeout] + (["--prometheus", "http://127.0.0.1:9"] if command == "calibrate" else [])
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--timeout" in err and len(err.strip().splitlines()) == 1


def test_an_unreachable_server_is_named_without_credentials(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run(capsys, "calibrate", "--prometheus", f"http://carol:{SECRET}@127.0.0.1:{port}", "--timeout",
                       "0.5", "-o", str(tmp_path / "c.json"))
    assert code == 1 and SECRET not in err and f"from http://127.0.0.1:{port}/" in err


def test_printable_and_redact_url() -> None:
    from placement.errors import printable, redact_url

    assert printable(ANSI) == "line one red \\x07\\u202eevil"
    assert printable("x" * 500, 20) == "x" * 17 + "..."
    assert redact_url(f"see http://u:{SECRET}@h:1/p?token=abc&x=1 and https://a@b") == \
        "see http://***@h:1/p?token=***&x=1 and https://***@b"
    assert redact_url("http://host:9090/api") == "http://host:9090/api"
