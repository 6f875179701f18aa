"""The Managed Lustre export (issue 37, item 7): only complete checkpoints are exported, by manifest, one per run,
to the job's home; the CronJob runs a digest-pinned image with the export permission alone, and the Lustre
service agent's bucket access waits for the agent (a ServiceIdentity), not for the first instance.

The export run is exercised for real: infra/gcp/lustre_export.py against a checkpoint tree on disk and a loopback
HTTP server standing in for the metadata server, GCS's metadata endpoint and the Managed Lustre API.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from jsonhttp import JsonHandler

from infra.gcp import lustre_export, lustre_sync

ROOT = Path(__file__).resolve().parents[2]
INSTANCE = "projects/p/locations/us-central1-a/instances/ckpt"


class _Fake:
    """What the loopback server knows and saw: objects in the bucket, exports started, the reply to give."""

    def __init__(self) -> None:
        self.objects: set[str] = set()
        self.exports: list[dict[str, Any]] = []
        self.export_status = 200


@pytest.fixture
def fake() -> Iterator[tuple[_Fake, str]]:
    state = _Fake()

    class Handler(JsonHandler):

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.endswith("/token"):
                assert self.headers["Metadata-Flavor"] == "Google"
                return self._reply(200, {"access_token": "t", "expires_in": 3600})
            m = re.match(r"/storage/v1/b/([^/]+)/o/([^?]+)", self.path)
            assert m and self.headers["Authorization"] == "Bearer t"
            from urllib.parse import unquote

            name = unquote(m.group(2))
            return self._reply(200, {"name": name}) if name in state.objects else self._reply(404, {})

        def do_POST(self) -> None:  # noqa: N802
            assert self.path == f"/v1/{INSTANCE}:exportData"
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if state.export_status != 200:
                return self._reply(state.export_status, {"error": {"code": state.export_status}})
            state.exports.append(body)
            return self._reply(200, {"name": "operations/op-1"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _checkpoint(job_dir: Path, step: int, files: dict[str, bytes], manifest: bool = True,
                torn: str | None = None) -> None:
    d = job_dir / f"step-{step:010d}"
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data if name != torn else data[:-1])
    if manifest:
        (d / "manifest.json").write_text(json.dumps({"step": step, "files": {
            n: {"bytes": len(v), "sha256": "x"} for n, v in files.items()}, "state": {}}))


def _env(root: Path, url: str) -> dict[str, str]:
    return {"MOUNT": str(root), "BUCKET": "b", "PREFIX": "checkpoints", "INSTANCE": INSTANCE,
            "METADATA_URL": url, "STORAGE_URL": url, "LUSTRE_URL": url}


def test_only_the_newest_complete_checkpoint_is_exported(tmp_path: Path, fake: tuple[_Fake, str]) -> None:
    state, url = fake
    job = tmp_path / "job-a"
    _checkpoint(job, 100, {"state.npys": b"x" * 10})
    _checkpoint(job, 200, {"state.npys": b"y" * 10})
    _checkpoint(job, 300, {"state.npys": b"z" * 10}, manifest=False)  # still being written
    _checkpoint(job, 400, {"state.npys": b"w" * 10}, torn="state.npys")  # a killed writer's
    assert lustre_export.main(_env(tmp_path, url)) == 0
    assert state.exports == [{"lustrePath": {"path": "/job-a/step-0000000200/"},
                              "gcsPath": {"uri": "gs://b/checkpoints/job-a/step-0000000200/"}}]


def test_a_checkpoint_already_home_is_not_exported_again_and_jobs_take_turns(tmp_path: Path,
                                                                             fake: tuple[_Fake, str]) -> None:
    state, url = fake
    _checkpoint(tmp_path / "job-a", 1, {"state.npys": b"a"})
    _checkpoint(tmp_path / "job-b", 7, {"state.npys": b"b"})
    state.objects.add("checkpoints/job-a/step-0000000001/manifest.json")
    assert lustre_export.main(_env(tmp_path, url)) == 0
    assert [e["lustrePath"]["path"] for e in state.exports] == ["/job-b/step-0000000007/"]
    state.objects.add("checkpoints/job-b/step-0000000007/manifest.json")
    assert lustre_export.main(_env(tmp_path, url)) == 0
    assert len(state.exports) == 1  # everything home: nothing started


def test_a_running_transfer_defers_the_export_to_the_next_run(tmp_path: Path, fake: tuple[_Fake, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    state, url = fake
    _checkpoint(tmp_path / "job-a", 1, {"state.npys": b"a"})
    state.export_status = 409
    assert lustre_export.main(_env(tmp_path, url)) == 0
    assert "waits" in capsys.readouterr().out
    state.export_status = 403
    assert lustre_export.main(_env(tmp_path, url)) == 1


def test_the_cron_job_runs_the_export_on_a_pinned_image_as_written() -> None:
    # The image is the dispatcher's base, by digest: a tag cannot move under the job.
    dockerfile = (ROOT / "placement" / "dispatch" / "Dockerfile").read_text(encoding="utf-8")
    (base,) = re.findall(r"^FROM (\S+)", dockerfile, flags=re.M)
    assert base == lustre_sync.IMAGE and re.fullmatch(r"[^@:]+:[^@]+@sha256:[0-9a-f]{64}", base)
    assert (ROOT / "infra" / "gcp" / "lustre_export.py").read_text(encoding="utf-8") == lustre_sync.EXPORT_SCRIPT
    assert lustre_sync.EXPORT_PERMISSIONS == ("lustre.instances.exportData",)
    assert re.fullmatch(r"[A-Za-z0-9_.]{3,64}", lustre_sync.export_role_id("gpufleet-usc1-a3mega"))
