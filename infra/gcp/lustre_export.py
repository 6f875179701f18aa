"""One run of the Managed Lustre export CronJob (infra/gcp/lustre_sync.py): copy each job's newest *complete*
checkpoint from the file system to its home in the bucket. Standard library only: the CronJob runs this file's
source with ``python -c`` on a pinned ``python`` image, so nothing is installed at run time.

A checkpoint directory ``<job>/step-NNNNNNNNNN/`` is complete once its ``manifest.json`` exists, parses, and every
data file it lists has the size it records (the trainer writes the manifest last, under a temporary name renamed
into place: docs/trainer-contract.md). A directory still being written, or torn by a killed writer, is never
exported; exporting the whole file system (``/``) on a timer did copy those. Per run:

1. list the job directories under the mount (``/checkpoints``, the file system's root, read-only), and in each the
   newest complete checkpoint;
2. drop those already home: the bucket has ``<prefix>/<job>/<step>/manifest.json`` (a GCS metadata GET);
3. start ``exportData`` for the one that has waited longest (by its manifest's modification time), from
   ``/<job>/<step>/`` to ``gs://<bucket>/<prefix>/<job>/<step>/``. Managed Lustre runs one transfer at a time and
   copies only files missing or changed at the destination, so one export per run keeps every job moving: the next
   run takes the next one. An export refused because one is running (HTTP 409 or 429) waits for the next run.

Every call has a deadline; the token comes from the GKE metadata server (Workload Identity). The endpoints can be
pointed elsewhere (``METADATA_URL``, ``STORAGE_URL``, ``LUSTRE_URL``) for tests. Exit 0 when nothing failed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

STEP_DIR = re.compile(r"^step-\d{10}$")  # the trainer's checkpoint directories (placement/trainer/checkpoint.py)
MANIFEST = "manifest.json"
TIMEOUT_S = 30


def newest_complete(job_dir: str) -> tuple[str, float] | None:
    """``(step directory name, manifest mtime)`` of the newest complete checkpoint under ``job_dir``, or None."""
    try:
        steps = sorted((n for n in os.listdir(job_dir) if STEP_DIR.match(n)), reverse=True)
    except OSError:
        return None
    for step in steps:
        path = os.path.join(job_dir, step)
        try:
            with open(os.path.join(path, MANIFEST), encoding="utf-8") as fh:
                manifest = json.load(fh)
            files = manifest["files"]
            if not isinstance(files, dict) or not files:
                continue
            complete = all(os.path.getsize(os.path.join(path, name)) == int(meta["bytes"])
                           for name, meta in files.items()
                           if "/" not in name and name not in ("", ".", ".."))
            if complete:
                return step, os.path.getmtime(os.path.join(path, MANIFEST))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def _call(req: urllib.request.Request) -> Any:
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - fixed https endpoints
        return json.load(resp)


def token(metadata_url: str) -> str:
    meta = urllib.request.Request(metadata_url + "/computeMetadata/v1/instance/service-accounts/default/token",
                                  headers={"Metadata-Flavor": "Google"})
    return str(_call(meta)["access_token"])


def at_home(storage_url: str, bucket: str, obj: str, bearer: str) -> bool:
    """Whether object ``obj`` exists in ``bucket`` (its metadata, not its bytes)."""
    url = f"{storage_url}/storage/v1/b/{bucket}/o/{urllib.parse.quote(obj, safe='')}?fields=name"
    try:
        _call(urllib.request.Request(url, headers={"Authorization": "Bearer " + bearer}))
        return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise


def main(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    root, bucket, prefix = env.get("MOUNT", "/checkpoints"), env["BUCKET"], env["PREFIX"].strip("/")
    metadata_url = env.get("METADATA_URL", "http://metadata.google.internal")
    storage_url = env.get("STORAGE_URL", "https://storage.googleapis.com")
    lustre_url = env.get("LUSTRE_URL", "https://lustre.googleapis.com")
    bearer = token(metadata_url)
    pending = []
    for job in sorted(os.listdir(root)):
        if job.startswith(".") or not os.path.isdir(os.path.join(root, job)):
            continue
        found = newest_complete(os.path.join(root, job))
        if found is None:
            continue
        step, mtime = found
        home = "/".join(p for p in (prefix, job, step) if p)
        if not at_home(storage_url, bucket, f"{home}/{MANIFEST}", bearer):
            pending.append((mtime, job, step, home))
    if not pending:
        print("export: every job's newest complete checkpoint is home")
        return 0
    _, job, step, home = min(pending)
    body = json.dumps({"lustrePath": {"path": f"/{job}/{step}/"},
                       "gcsPath": {"uri": f"gs://{bucket}/{home}/"}}).encode()
    req = urllib.request.Request(f"{lustre_url}/v1/{env['INSTANCE']}:exportData", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + bearer, "Content-Type": "application/json"})
    try:
        op = _call(req)
    except urllib.error.HTTPError as exc:
        if exc.code in (409, 429):  # a transfer is running: this checkpoint goes next run
            print(f"export of {job}/{step} waits: a transfer is running (HTTP {exc.code})")
            return 0
        print(f"export of {job}/{step} failed: HTTP {exc.code} {exc.reason}", file=sys.stderr)
        return 1
    print(f"export of {job}/{step} started: {op.get('name')} ({len(pending) - 1} more waiting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
