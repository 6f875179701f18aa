"""The thin Kubernetes adapter shared by ``placement submit`` and ``placement dispatch``.

Everything goes through the official ``kubernetes`` client (imported on first use): an ``ApiClient`` per
cluster built from a kubeconfig (a stack output, a file, or the pod's in-cluster service account) without
touching the process-wide default; object creation; Workload status server-side apply; Events; and
:class:`Informer`, a list + watch cache on ``kubernetes.watch.Watch`` that resumes from the last
resourceVersion, re-lists on 410 Gone and survives dropped connections and 5xx answers.

A kubeconfig someone else wrote (a worker's Secret) is loaded as data only (:func:`static_kubeconfig`); list
answers are read within a deadline, headers and body together, and as hostile data (:func:`parse_list`).

Why one module: it is the only place the ``kubernetes`` client is touched; kubeconfig loading, bounded reads, writes
and the Informer share one error handling and one deadline discipline.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.fleet.errors import EXIT_BAD_INPUT, EXIT_FAILED, FleetError
from placement.fleet.manifests import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

API_TIMEOUT_S = 30.0
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
APPLY_PATCH = "application/apply-patch+yaml"

log = logging.getLogger("gpufleet.kube")


def kubeconfig_doc(value: Any, what: str) -> dict[str, Any]:
    """A kubeconfig given as YAML/JSON text or a mapping (a stack output); a masked or broken one is refused."""
    from placement.errors import UsageError
    from placement.model.text import parse_yaml

    if isinstance(value, str):
        if value == "[secret]":
            raise FleetError(f"{what} is masked: export the outputs with --show-secrets", EXIT_BAD_INPUT)
        try:
            value = parse_yaml(value, what)
        except UsageError as exc:
            if "given twice" in str(exc):  # a kubeconfig, but ambiguous: name the key (never a value)
                raise FleetError(f"{exc}: a kubeconfig names each field once", EXIT_BAD_INPUT) from None
            value = None
    if not isinstance(value, Mapping) or not value.get("clusters"):
        raise FleetError(f"{what} is not a kubeconfig (YAML/JSON with clusters, users, contexts)", EXIT_BAD_INPUT)
    return dict(value)


# What a kubeconfig read as data (a worker's Secret) may hold: a server with its CA as data, and a static
# bearer token or a client certificate and key as data. Everything else is refused by name: ``exec`` and
# ``auth-provider`` run code or call out, ``tokenFile`` and the path forms read this process's files (the
# pod's own service-account token, say) and would send them to the server the Secret names.
CLUSTER_KEYS = ("server", "certificate-authority-data", "tls-server-name")
USER_KEYS = ("token", "client-certificate-data", "client-key-data")
CONTEXT_KEYS = ("cluster", "user", "namespace")
REFUSED = {
    "exec": "runs a command in the dispatcher",
    "auth-provider": "calls an authentication plugin",
    "tokenFile": "reads a file of the dispatcher's",
    "client-certificate": "is a file path",
    "client-key": "is a file path",
    "certificate-authority": "is a file path",
    "username": "is basic authentication",
    "password": "is basic authentication",
    "as": "impersonates another user",
    "as-groups": "impersonates another user",
    "as-user-extra": "impersonates another user",
    "insecure-skip-tls-verify": "turns off server verification",
    "proxy-url": "sends the credentials through a proxy",
}
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _named(doc: Mapping[str, Any], kind: str, name: Any, what: str) -> Mapping[str, Any]:
    entries = doc.get(kind + "s")
    if not isinstance(entries, list):
        raise FleetError(f"{what}: {kind}s must be a list", EXIT_BAD_INPUT)
    found = [e for e in entries if isinstance(e, Mapping) and e.get("name") == name]
    body = found[0].get(kind) if found else None
    if not isinstance(body, Mapping):
        raise FleetError(f"{what}: no {kind} named {str(name)[:63]!r}", EXIT_BAD_INPUT)
    return body


def _only(section: Mapping[str, Any], allowed: Sequence[str], where: str, what: str) -> None:
    for key in section:
        if key in REFUSED:
            raise FleetError(f"{what}: {where}.{key} {REFUSED[key]}: refused (a kubeconfig read from a Secret is data: "
                             f"server, certificate-authority-data, and token or client-certificate-data + "
                             f"client-key-data)", EXIT_BAD_INPUT)
        if key not in allowed and key != "extensions":
            raise FleetError(f"{what}: {where}.{str(key)[:40]} is not accepted (allowed: {', '.join(allowed)})",
                             EXIT_BAD_INPUT)


def static_kubeconfig(value: Any, what: str) -> dict[str, Any]:
    """The one context of a kubeconfig that uses only data: ``server`` (https, or http on loopback),
    ``certificate-authority-data``, and a static ``token`` or ``client-certificate-data`` +
    ``client-key-data``. Returned as a minimal kubeconfig; anything else is a one-line :class:`FleetError`
    naming the field (``exec``, ``auth-provider``, ``tokenFile`` and file paths above all)."""
    doc = kubeconfig_doc(value, what)
    contexts = doc.get("contexts")
    current = doc.get("current-context")
    if not current and isinstance(contexts, list) and len(contexts) == 1 and isinstance(contexts[0], Mapping):
        current = contexts[0].get("name")
    if not isinstance(current, str) or not current:
        raise FleetError(f"{what}: no current-context", EXIT_BAD_INPUT)
    context = _named(doc, "context", current, what)
    _only(context, CONTEXT_KEYS, f"contexts[{current}]", what)
    cluster = _named(doc, "cluster", context.get("cluster"), what)
    user = _named(doc, "user", context.get("user"), what)
    _only(cluster, CLUSTER_KEYS, "cluster", what)
    _only(user, USER_KEYS, "user", what)
    for section, keys in ((cluster, CLUSTER_KEYS), (user, USER_KEYS)):
        for key in keys:
            if key in section and (not isinstance(section[key], str) or not section[key]):
                raise FleetError(f"{what}: {key} must be a non-empty string", EXIT_BAD_INPUT)
    server = cluster.get("server")
    if not isinstance(server, str):
        raise FleetError(f"{what}: cluster.server is required", EXIT_BAD_INPUT)
    from urllib.parse import urlsplit

    parts = urlsplit(server)
    host = (parts.hostname or "").lower()
    if parts.scheme != "https" and not (parts.scheme == "http" and (host in LOOPBACK or host == "::1")):
        raise FleetError(f"{what}: cluster.server must be an https:// URL (http only on loopback)", EXIT_BAD_INPUT)
    if parts.scheme == "https" and "certificate-authority-data" not in cluster:
        raise FleetError(f"{what}: cluster.certificate-authority-data is required with an https server (the CA "
                         "as data, never a file)", EXIT_BAD_INPUT)
    for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        if key in cluster or key in user:
            try:
                base64.b64decode(str(cluster.get(key) or user.get(key) or ""), validate=True)
            except (ValueError, TypeError):
                raise FleetError(f"{what}: {key} is not base64", EXIT_BAD_INPUT) from None
    has_cert = "client-certificate-data" in user, "client-key-data" in user
    if any(has_cert) and not all(has_cert):
        raise FleetError(f"{what}: client-certificate-data and client-key-data go together", EXIT_BAD_INPUT)
    if "token" not in user and not all(has_cert):
        raise FleetError(f"{what}: the user has no credential (token, or client-certificate-data + "
                         "client-key-data)", EXIT_BAD_INPUT)
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {k: cluster[k] for k in CLUSTER_KEYS if k in cluster}}],
            "users": [{"name": "u", "user": {k: user[k] for k in USER_KEYS if k in user}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


class _QuietLoader(logging.Filter):
    """Drops the ``kubernetes`` kubeconfig loader's own root-logger lines (a failed exec plugin is logged there and
    then ignored): the one-line error of :func:`api_client` says it instead, without a second stderr line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "/kubernetes/config/" not in record.pathname.replace("\\", "/")


_QUIET = _QuietLoader()


def api_client(kubeconfig: Any = None, path: str | None = None, what: str = "kubeconfig", *,
               in_cluster: bool = False, default: bool = False, static: bool = False) -> Any:
    """A Kubernetes ``ApiClient`` for a kubeconfig (stack output or Secret), a kubeconfig file, the pod's
    service account (``in_cluster``) or the default kubeconfig (``default``: ``$KUBECONFIG``,
    ``~/.kube/config``), without touching the process-wide default configuration. ``static``: the
    kubeconfig is data from someone else (a worker's Secret): only :func:`static_kubeconfig`'s form is
    loaded. Every credential loaded is registered with the redaction layer (:mod:`placement.fleet.redact`)."""
    from placement.console import require_extra

    require_extra("submit", ("kubernetes",), "talking to a Kubernetes API server")  # a command checks first
    from kubernetes import client, config

    from placement.fleet.redact import redact, remember, remember_kubeconfig

    conf = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=conf)
        elif path or default:
            config.load_kube_config(config_file=path, client_configuration=conf)
        else:
            doc = static_kubeconfig(kubeconfig, what) if static else kubeconfig_doc(kubeconfig, what)
            remember_kubeconfig(doc)
            root = logging.getLogger()
            root.addFilter(_QUIET)
            try:
                config.load_kube_config_from_dict(doc, client_configuration=conf)
            finally:
                root.removeFilter(_QUIET)
            if not conf.api_key and not conf.cert_file:
                # The client logs a failed exec plugin and goes on without credentials: every request would
                # then be refused, after the first objects were created elsewhere.
                raise FleetError(f"{what}: gives no credential (its exec plugin failed, or the user has none)",
                                 EXIT_BAD_INPUT)
    except FleetError as exc:
        raise FleetError(redact(str(exc)), exc.code) from None
    except Exception as exc:  # ConfigException, missing exec plugin, unreadable file: one line, not a traceback
        where = "in-cluster config" if in_cluster else path or what
        why = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise FleetError(redact(f"{where}: cannot load the kubeconfig: {why}"), EXIT_BAD_INPUT) from None
    for value in (conf.api_key or {}).values():
        if isinstance(value, str):
            remember(value, value.split()[-1] if value.split() else value)
    return client.ApiClient(conf)


def api_message(exc: Any) -> str:
    """The API server's one-line message of an ``ApiException`` (its Status ``message``), else the reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError, RecursionError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    from placement.errors import printable, redact_url
    from placement.fleet.redact import redact

    # The server's text: its first line, no escape sequences or control characters (placement.errors.printable).
    return printable(redact_url(redact((str(message or exc.reason or "error").splitlines() or ["error"])[0])), 500)


def is_unreachable(exc: BaseException) -> bool:
    """A transport failure (refused, reset, timed out, TLS) rather than an answer from the API server."""
    from urllib3.exceptions import HTTPError

    return isinstance(exc, (HTTPError, OSError))


# ----------------------------------------------------------------------------- creating objects

# k8s.io/apimachinery pkg/api/validation/objectmeta.go: TotalAnnotationSizeLimitB = 256 * (1 << 10); the API
# server sums len(key) + len(value) in bytes over one object's annotations and refuses the object above it.
ANNOTATIONS_LIMIT_B = 256 * 2**10


def annotation_problems(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each object (or pod template inside it) whose annotations the API server would refuse for size, named
    with its total: checked before any request, so nothing is created half-way."""
    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, Mapping):
            meta = value.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, Mapping) else None
            if isinstance(ann, Mapping):
                size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in ann.items())
                if size > ANNOTATIONS_LIMIT_B:
                    problems.append(f"{where}: annotations total {size:,} bytes, above the API server's limit of "
                                    f"{ANNOTATIONS_LIMIT_B:,} (256 KiB)")
            for k, v in value.items():
                if k != "metadata":
                    walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    for doc in docs:
        meta = doc.get("metadata") or {}
        walk(doc, f"{doc.get('kind', 'object')} {meta.get('name', '?')}")
    return problems



def create(api: Any, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Create one object rendered by :mod:`placement.fleet.manifests`; returns it as the server stored it.

    The API server's status code is what counts: a 2xx answer whose body is not a JSON object (a proxy's
    page, a cut connection) still means the object was created, so it is returned as the manifest's kind,
    namespace and name with ``"unreadable"`` saying why (its uid is unknown) - never an exception that would
    make the user retry and hit 409.
    """
    from kubernetes import client

    kind, ns = doc["kind"], doc["metadata"].get("namespace")
    body = dict(doc)

    def model(cls: Any) -> Any:
        # The typed client takes models; quantities are strings in manifests, so the round trip is exact.
        return cls.from_dict(body)

    # Raw answers (_preload_content=False): the client would otherwise try to build a model from any body.
    raw: dict[str, Any] = {"_request_timeout": API_TIMEOUT_S, "_preload_content": False}
    resp: Any
    if kind == "JobSet":
        resp = client.CustomObjectsApi(api).create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, body, **raw)
    elif kind == "Job":
        resp = client.BatchV1Api(api).create_namespaced_job(ns, model(client.V1Job), **raw)
    elif kind == "PersistentVolume":
        resp = client.CoreV1Api(api).create_persistent_volume(model(client.V1PersistentVolume), **raw)
    elif kind == "PersistentVolumeClaim":
        resp = client.CoreV1Api(api).create_namespaced_persistent_volume_claim(
            ns, model(client.V1PersistentVolumeClaim), **raw)
    elif kind == "ConfigMap":
        resp = client.CoreV1Api(api).create_namespaced_config_map(ns, model(client.V1ConfigMap), **raw)
    else:  # pragma: no cover - manifests render only the kinds above
        raise ValueError(kind)
    status = getattr(resp, "status", 201)
    try:
        stored = json.loads(resp.data or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        stored = None
    if isinstance(stored, dict) and isinstance(stored.get("metadata"), dict):
        return stored
    meta = {k: v for k, v in (("name", doc["metadata"]["name"]), ("namespace", ns)) if v}
    return {"kind": kind, "metadata": meta, "unreadable": f"HTTP {status} with a body that is not a JSON object"}


@dataclass(frozen=True)
class Created:
    kind: str
    namespace: str
    name: str
    uid: str
    reused: tuple[str, ...]  # storage objects that already existed


def _so_far(done: Sequence[str]) -> str:
    return f" (already created, kept and reused by a retry: {', '.join(done)})" if done else ""


def create_all(docs: Sequence[Mapping[str, Any]], api: Any, *, reuse: bool = True,
               done: list[str] | None = None) -> tuple[dict[str, Any], ...]:
    """Create ``docs`` in order on one cluster. With ``reuse``, an object that already exists (409) is kept
    and reported as ``{"reused": "<Kind> <name>"}`` (so a retry after a partial submit goes through);
    without it (the job itself) a 409 means a job of that name was already submitted: exit 2, naming it.
    API errors become one-line :class:`FleetError`\\ s - exit 2 for 400/409/422 (the request is wrong), 1
    otherwise - that name the objects created so far (``done``, shared across calls, is appended to)."""
    from kubernetes.client.exceptions import ApiException

    done = [] if done is None else done
    out: list[dict[str, Any]] = []
    for doc in docs:
        meta = doc["metadata"]
        what = f"{doc['kind']} {meta.get('namespace', '-')}/{meta['name']}" if meta.get("namespace") else \
            f"{doc['kind']} {meta['name']}"
        try:
            out.append(create(api, doc))
            done.append(what)
        except ApiException as exc:
            if exc.status == 409 and reuse:
                out.append({"reused": f"{doc['kind']} {meta['name']}"})
                continue
            code = EXIT_BAD_INPUT if exc.status in (400, 409, 422) else EXIT_FAILED
            hint = (f"; it exists already (submitted before?): `kubectl get {doc['kind'].lower()} -n "
                    f"{meta.get('namespace', '')} {meta['name']}`, or rename the job") if exc.status == 409 else ""
            raise FleetError(f"creating {what}: HTTP {exc.status}: {api_message(exc)}{hint}{_so_far(done)}",
                             code) from None
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            raise FleetError(f"creating {what}: cannot reach the API server ({exc.__class__.__name__})"
                             f"{_so_far(done)}") from None
    return tuple(out)


# ----------------------------------------------------------------------------- Kueue Workloads


def apply_workload_status(api: Any, namespace: str, name: str, body: Mapping[str, Any], *, field_manager: str,
                          force: bool = True) -> dict[str, Any]:
    """Server-side apply ``body`` to ``workloads/<name>/status`` as ``field_manager``.

    The client's default content type for this call is a JSON merge patch; ``_content_type`` selects
    ``application/apply-patch+yaml`` (the JSON body is valid YAML)."""
    from kubernetes import client

    resp: Any = client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, dict(body), field_manager=field_manager,
        force=force, _content_type=APPLY_PATCH, _request_timeout=API_TIMEOUT_S)
    return dict(resp)


def create_event(api: Any, namespace: str, body: Mapping[str, Any]) -> None:
    """Create a core/v1 Event (``kubectl describe`` shows it on the involved object)."""
    from kubernetes import client

    event = client.CoreV1Event.from_dict(dict(body))
    assert event is not None
    client.CoreV1Api(api).create_namespaced_event(namespace, event, _request_timeout=API_TIMEOUT_S)


EVENT_PAGE = 500  # Events per LIST page (a busy cluster holds many; the API server pages them)


def list_events(api: Any, field_selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """core/v1 Events matching ``field_selector`` (e.g. ``source=<component>``, ``involvedObject.uid=<uid>``),
    in ``namespace`` or in all namespaces, page by page, as plain dicts (the raw JSON: no model round trip)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"field_selector": field_selector, "limit": EVENT_PAGE,
                                  "_preload_content": False, "_request_timeout": API_TIMEOUT_S}
        if token:
            kwargs["_continue"] = token
        resp: Any = (core.list_namespaced_event(namespace, **kwargs) if namespace
                     else core.list_event_for_all_namespaces(**kwargs))
        doc = json.loads(resp.data or b"{}")
        items += list(doc.get("items") or [])
        token = (doc.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def read_secret_key(api: Any, namespace: str, name: str, key: str) -> str | None:
    """``data[key]`` of a Secret, decoded; None when the Secret or the key does not exist (404)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    data = secret.data or {}
    if key not in data:
        return None
    return base64.b64decode(data[key]).decode()


# ----------------------------------------------------------------------------- list + watch


@dataclass(frozen=True)
class Resource:
    """A listable collection: ``group``/``version``/``plural`` (``group`` may be ``batch``: the custom-objects
    paths ``/apis/<group>/<version>/<plural>`` serve built-in groups too), optional label selector."""

    group: str
    version: str
    plural: str
    label_selector: str | None = None

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}"


class Unreadable(Exception):
    """An answer that is not a Kubernetes list (a login proxy's HTML page, a truncated or nested-to-death body)
    or that took longer than its deadline: the message says which, without the body."""


MAX_LIST_BYTES = 256 * 2**20  # a list answer larger than this is refused rather than held in memory


def read_body(resp: Any, deadline: float) -> bytes:
    """The body of a raw (``_preload_content=False``) answer, read in chunks until ``deadline``
    (``time.monotonic()``): a server that trickles is cut off there, never waited on."""
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            if time.monotonic() > deadline:
                raise Unreadable("no complete answer within the read deadline")
            chunk = resp.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_LIST_BYTES:
                raise Unreadable(f"answer larger than {MAX_LIST_BYTES // 2**20} MiB")
    finally:
        with contextlib.suppress(Exception):
            resp.release_conn()
    return b"".join(chunks)


def parse_list(data: bytes, content_type: str = "") -> tuple[list[dict[str, Any]], str, int]:
    """A list answer as (items that are objects, resourceVersion, number of items dropped for not being
    objects); :class:`Unreadable` when it is no JSON list at all."""
    if content_type and "json" not in content_type.lower():
        raise Unreadable(f"answer of type {content_type.split(';')[0][:60]}, not JSON (a proxy's login page?)")
    try:
        doc = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Unreadable("answer is not JSON (a proxy's page, or cut short?)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items", []), (list, type(None))):
        raise Unreadable("answer is not a Kubernetes list")
    raw = doc.get("items") or []
    items = [o for o in raw if isinstance(o, dict) and isinstance(o.get("metadata"), dict)
             and isinstance(o["metadata"].get("name", ""), str) and isinstance(o["metadata"].get("namespace", ""), str)]
    meta = doc.get("metadata")
    rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
    return items, rv, len(raw) - len(items)


def list_call(api: Any, res: Resource) -> tuple[Callable[..., Any], tuple[str, ...]]:
    """The client call (and its positional arguments) that lists ``res`` cluster-wide: the custom-objects path
    ``/apis/<group>/<version>/<plural>`` for a named group, ``/api/v1/nodes`` for the core group's nodes (the
    one core collection read cluster-wide here)."""
    from kubernetes import client

    if not res.group:
        if (res.version, res.plural) != ("v1", "nodes"):
            raise ValueError(f"core resource {res.plural} is not listed cluster-wide")
        return client.CoreV1Api(api).list_node, ()
    return client.CustomObjectsApi(api).list_cluster_custom_object, (res.group, res.version, res.plural)


def list_objects(api: Any, res: Resource, timeout_s: float = API_TIMEOUT_S) -> tuple[list[dict[str, Any]], str]:
    """Every object of ``res`` in all namespaces and the list's resourceVersion, within ``timeout_s`` in all
    (connect, headers and body); items that are not objects are dropped (and logged), an answer that is no
    list raises :class:`Unreadable`."""

    deadline = time.monotonic() + timeout_s
    kwargs: dict[str, Any] = {"_request_timeout": (min(timeout_s, 10.0), timeout_s), "_preload_content": False}
    if res.label_selector:
        kwargs["label_selector"] = res.label_selector
    call, args = list_call(api, res)
    resp: Any = call(*args, **kwargs)
    headers = getattr(resp, "headers", None) or {}
    ctype = str(headers.get("Content-Type") or headers.get("content-type") or "")
    items, rv, dropped = parse_list(read_body(resp, deadline), ctype)
    if dropped:
        log.warning("list items that are not objects dropped", extra={"resource": str(res), "dropped": dropped})
    return items, rv


class Informer:
    """A cache of one resource kept current with list + watch.

    :meth:`relist` lists and replaces the cache; :meth:`run` (in a thread) watches from the last
    resourceVersion with server-side timeouts, applies ADDED/MODIFIED/DELETED events, re-lists after
    410 Gone, and after a dropped connection or an error answer waits (exponential backoff with jitter,
    at most ``max_backoff_s``) and resumes. ``on_change`` is called after every change."""

    def __init__(self, api: Any, res: Resource, *, on_change: Callable[[], None] | None = None,
                 watch_timeout_s: int = 60, max_backoff_s: float = 10.0, name: str = "",
                 list_timeout_s: float = API_TIMEOUT_S,
                 on_delete: Callable[[Mapping[str, Any]], None] | None = None) -> None:
        self.api = api
        self.res = res
        self.on_change = on_change
        self.on_delete = on_delete  # called with each object a watch reports DELETED, as it was last
        self.watch_timeout_s = watch_timeout_s
        self.list_timeout_s = list_timeout_s
        self.max_backoff_s = max_backoff_s
        self.name = name or str(res)
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], dict[str, Any]] = {}
        self._written: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        self._seen: dict[tuple[str, str], collections.deque[str]] = {}  # recent resourceVersions per object
        self._rv = ""
        self._watch: Any = None
        self.synced = False
        self.last_ok = 0.0  # time.monotonic() of the last answer from the API server
        self.last_error: str | None = None
        self.relists = 0

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            if not self._written:
                return list(self._items.values())
            out = dict(self._items)
            for key, (_, obj) in self._written.items():
                if key in out:
                    out[key] = obj
            return list(out.values())

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Show an object this process just wrote until the watch delivers that very version (resourceVersions
        are compared for equality only): events still in flight are older and must not hide the write."""
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        key = self._key(obj)
        with self._lock:
            if rv not in self._seen.get(key, ()):  # else the watch was quicker than the API's answer
                self._written[key] = (rv, dict(obj))

    def relist(self, timeout_s: float | None = None) -> None:
        """List and replace the cache, within ``timeout_s`` (default: the informer's list timeout)."""
        items, rv = list_objects(self.api, self.res, self.list_timeout_s if timeout_s is None else timeout_s)
        with self._lock:
            self._items = {self._key(o): o for o in items}
            self._seen = {k: collections.deque([str((o.get("metadata") or {}).get("resourceVersion"))], maxlen=8)
                          for k, o in self._items.items()}
            self._written.clear()  # a fresh list already holds every write that preceded it
            self._rv = rv
        self.synced = True
        self.last_ok = time.monotonic()
        self.last_error = None
        self.relists += 1
        if self.on_change:
            self.on_change()

    def _apply(self, event: Mapping[str, Any]) -> None:
        obj = event.get("raw_object") or event.get("object")
        if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
            return  # not an object: nothing to cache (a hostile or broken answer never stops the watch)
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        key = self._key(obj)
        with self._lock:
            written = self._written.get(key)
            if written is not None and (written[0] == rv or event["type"] == "DELETED"):
                del self._written[key]
            if event["type"] != "BOOKMARK":
                self._seen.setdefault(key, collections.deque(maxlen=8)).append(rv)
            if event["type"] == "DELETED":
                self._items.pop(key, None)
                if self.on_delete is not None:
                    self.on_delete(obj)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._items[key] = dict(obj)
            if rv:
                self._rv = rv
        if event["type"] != "BOOKMARK" and self.on_change:
            self.on_change()

    def stop(self) -> None:
        w = self._watch
        if w is not None:
            w.stop()

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set; never raises."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        call, args = list_call(self.api, self.res)
        backoff = 0.2
        while not stop.is_set():
            received = 0
            try:
                if not self.synced or not self._rv:
                    self.relist()
                kwargs: dict[str, Any] = {"resource_version": self._rv, "timeout_seconds": self.watch_timeout_s,
                                          "allow_watch_bookmarks": True,
                                          "_request_timeout": (API_TIMEOUT_S, self.watch_timeout_s + API_TIMEOUT_S)}
                if self.res.label_selector:
                    kwargs["label_selector"] = self.res.label_selector
                self._watch = w = watch.Watch()
                for event in w.stream(call, *args, **kwargs):
                    # An ERROR event (410 Gone above all) is raised by the client as ApiException.
                    self._apply(event)
                    self.last_ok = time.monotonic()
                    received += 1
                    if stop.is_set():
                        break
                self.last_ok = time.monotonic()
                backoff = 0.2
            except ApiException as exc:
                if exc.status == 410:  # our resourceVersion is too old: start over from a fresh list
                    log.info("watch expired, re-listing", extra={"resource": self.name})
                    self.synced = False
                    continue
                self.last_error = f"HTTP {exc.status}: {api_message(exc)}"
                log.warning("watch failed", extra={"resource": self.name, "error": self.last_error})
                stop.wait(backoff * (1 + random.random()))
                backoff = min(backoff * 2, self.max_backoff_s)
            except Exception as exc:  # dropped connection, timeout, refused: resume from the last resourceVersion
                if stop.is_set():
                    break
                from placement.fleet.redact import redact

                self.last_error = redact(f"{exc.__class__.__name__}: {str(exc)[:200]}")
                log.warning("watch interrupted", extra={"resource": self.name, "error": self.last_error})
                if received:  # the stream was delivering: resume at once, only failures in a row back off
                    backoff = 0.2
                    continue
                stop.wait(backoff * (1 + random.random()))
                backoff = min(backoff * 2, self.max_backoff_s)
            finally:
                self._watch = None
