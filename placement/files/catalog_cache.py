"""A parsed-and-validated ``--catalog`` CSV, kept in the user's cache directory so the next plan skips the checks.

Keyed by the CSV's content (SHA-256), its cloud and path, and a fingerprint of everything that decides what a
parse returns (the parsing and checking code, the shape and region data, the package version): any change to
one of them is a different entry, never a stale answer. The entry holds plain data only as JSON (strings,
numbers, lists; the per-offer columns as base64 of packed ints and doubles, read with :mod:`array`), with the
SHA-256 of its body in its first line; it is never a pickle. A missing, truncated, corrupt or foreign entry
(another user's file), or an unreadable or unwritable cache directory, means the file is parsed as if there
were no cache: the cache can make a plan faster, never different, never fail.

The digest only catches damage, not a rewrite: an entry's rows pass the checks a CSV row gets (the shape's GPU
count, the region and zone belong to the cloud) before they are used. Only what the cache itself wrote is read or
pruned: a regular file (never a FIFO, device or symlink: opened non-blocking, without following links, and
checked before a byte is read), owned by this user, named ``<SHA-256>.json`` and starting with the cache's marker
(:data:`MARKER`); a user's own ``*.json`` beside the entries is never touched.

Where: ``$GPUFLEET_CACHE_DIR/catalogs``, else ``platformdirs.user_cache_dir("gpufleet")/catalogs``; entries are
written atomically (a temporary file renamed into place) and the :data:`KEEP` newest are kept.
"""

from __future__ import annotations

import array
import base64
import contextlib
import dataclasses
import functools
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from placement.errors import InputError
from placement.model.catalog import (
    Catalog,
    CatalogOrigin,
    Offer,
    RowChecks,
    adhoc_shape,
    parse_skypilot_csv,
    paused_gc,
    reject_json_constant,
    with_counts,
    with_origins,
)
from placement.model.numbers import MAX_PRICE_USD
from placement.model.shapes import shape_book

CACHE_DIR_ENV = "GPUFLEET_CACHE_DIR"  # overrides platformdirs.user_cache_dir("gpufleet"); shared with the live cache
FORMAT = "gpufleet.catalog-cache/v2"
MIN_BYTES = 256 * 2**10  # smaller CSVs (a few thousand rows) parse faster than an entry is written
KEEP = 16  # entries kept (the newest by modification time); a 50,000-row catalog's entry is about 3 MB
# Every entry starts with these bytes (its head line, json.dumps of a dict whose first key is "format"): with the
# name pattern, the mark of a file this cache wrote (any version of the format, so old entries are pruned too).
MARKER = b'{"format": "gpufleet.catalog-cache/'
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.json")
# What a parse depends on besides the CSV itself: a change to any of these files is a new cache key.
# Paths under placement/.
_CODE = ("model/catalog.py", "files/catalog_cache.py", "model/numbers.py", "model/text.py", "model/shapes.py",
         "model/zones.py", "errors.py")
_DATA = ("shapes.yaml", "regions.yaml")


def cache_dir() -> Path:
    """The directory of catalog entries (not created here)."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env) / "catalogs"
    import platformdirs

    return Path(platformdirs.user_cache_dir("gpufleet")) / "catalogs"


@functools.cache
def fingerprint() -> str:
    """SHA-256 over the cache format, the package version, and the code and data files a parse depends on."""
    from importlib import resources

    from placement import __version__

    # Columns are packed in this machine's byte order and int size: another machine's entry is another key.
    digest = _sha256(f"{FORMAT}\0{__version__}\0{sys.byteorder}\0{array.array('I').itemsize}\0".encode())
    here = Path(__file__).resolve().parents[1]
    for name in _CODE:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    data = resources.files("placement.data")
    for name in _DATA:
        digest.update(name.encode() + b"\0" + data.joinpath(name).read_bytes() + b"\0")
    return digest.hexdigest()


def _sha256(data: bytes = b"") -> Any:
    """``hashlib.sha256``, imported on first use: a CSV under :data:`MIN_BYTES` (every plan over a small catalog)
    never loads OpenSSL's hashes."""
    import hashlib

    return hashlib.sha256(data)


def cache_key(text: str, cloud: str, source: str) -> str:
    """The entry's name: SHA-256 of the fingerprint, the cloud, the path and the CSV text."""
    digest = _sha256(f"{fingerprint()}\0{cloud}\0{source}\0".encode())
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def parse_cached(text: str, cloud: str, source: str, modified: str | None = None) -> Catalog:
    """:func:`~placement.model.catalog.parse_skypilot_csv`, answered from the cache when this exact CSV was parsed
    before with this code and data (else parsed, and stored when at least :data:`MIN_BYTES`)."""
    if len(text) < MIN_BYTES:
        return parse_skypilot_csv(text, cloud, source, modified)
    try:
        key = cache_key(text, cloud, source)
        path = cache_dir() / f"{key}.json"
    except (OSError, ValueError, ImportError):  # no source files to fingerprint (a zipped install), no home dir
        return parse_skypilot_csv(text, cloud, source, modified)
    stored = _load(path, key, cloud, limit=2 * len(text) + 2**20)
    if stored is not None:
        offers, warnings = stored
        counts = {cloud: len(offers)}  # every offer of an entry is of its cloud (checked by _offers)
        catalog = with_origins(offers, (CatalogOrigin(cloud=cloud, source="csv", path=source, modified=modified),),
                               counts)
        return with_counts(dataclasses.replace(catalog, warnings=warnings), counts)
    catalog = parse_skypilot_csv(text, cloud, source, modified)
    _store(path, key, catalog)
    return catalog


def _load(path: Path, key: str, cloud: str, limit: int) -> tuple[tuple[Any, ...], tuple[str, ...]] | None:
    """The offers and warnings of the entry at ``path``, or None when it is absent or not exactly what
    :func:`_store` wrote for ``key`` (any error reading or checking it; more than ``limit`` bytes)."""
    try:
        raw = _read_own(path, limit + 1)
        if raw is None or len(raw) > limit:
            return None
        head, _, body = raw.partition(b"\n")
        meta = json.loads(head)
        if (not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("key") != key
                or meta.get("sha256") != _sha256(body).hexdigest()):
            return None
        with paused_gc():
            doc = json.loads(body, parse_constant=reject_json_constant)
            return _offers(doc, cloud), tuple(str(w) for w in doc["warnings"])
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return None  # InputError is a ValueError: a row the CSV parser would refuse


def _read_own(path: Path, size: int) -> bytes | None:
    """Up to ``size`` bytes of ``path`` when it is a regular file of this user that starts with :data:`MARKER`,
    else None. Checked before it is opened (lstat) and again on the open descriptor (fstat): the open neither
    follows a symbolic link nor blocks on a FIFO a hostile or confused neighbour left at an entry's name."""
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        return None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            return None
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return None  # another user's file in a shared GPUFLEET_CACHE_DIR: not ours to trust
        raw = fh.read(size)
    return raw if raw.startswith(MARKER) else None


def _indexes(text: str, n: int, size: int) -> list[int]:
    """An index column: ``n`` unsigned ints below ``size``, packed (base64 of the machine's 4-byte ints)."""
    column = array.array("I")
    column.frombytes(base64.b64decode(text, validate=True))
    if len(column) != n or (n and max(column) >= size):
        raise ValueError("an index out of its table")
    return column.tolist()


def _prices(text: str, n: int) -> list[float | None]:
    """A price column: ``n`` doubles, packed like :func:`_indexes`; NaN stands for no price, every other value
    within [0, MAX_PRICE_USD]."""
    column = array.array("d")
    column.frombytes(base64.b64decode(text, validate=True))
    if len(column) != n:
        raise ValueError("a price column of another length")
    prices = [None if p != p else p for p in column.tolist()]  # p != p: NaN
    present = list(filter(None, prices))  # without None (and 0.0, which is in range): at C speed
    if present and not (min(present) >= 0 and max(present) <= MAX_PRICE_USD):
        raise ValueError("a price out of range")
    return prices


def _packed(values: list[Any], code: str) -> str:
    return base64.b64encode(array.array(code, values).tobytes()).decode("ascii")


def _offers(doc: dict[str, Any], cloud: str) -> tuple[Offer, ...]:
    """The offers of an entry's body: ``n`` rows as packed columns (shape and place indexes, prices), shapes by
    name from the shape data or the entry's own machine types. Anything unexpected raises (and the CSV is
    parsed instead)."""
    book = shape_book()
    adhoc = {name: adhoc_shape(cloud, str(name), str(a), int(g), int(v), float(m))
             for name, (a, g, v, m) in doc["adhoc"].items()}
    shapes = [adhoc.get(name) or book.shapes[name] for name in doc["shapes"]]
    places = [(region, zone) for region, zone in doc["places"]]
    if any(s.cloud != cloud for s in shapes) or any(type(r) is not str or type(z) is not str for r, z in places):
        raise ValueError("an offer of another cloud")
    n = doc["n"]
    if type(n) is not int or n < 1:
        raise ValueError("no offers")
    shape_at, place_at = _indexes(doc["shape"], n, len(shapes)), _indexes(doc["place"], n, len(places))
    # Each (shape, place) pair as one int, shape-major: sets and sorts as the pairs would, several times faster.
    width = len(places)
    pairs = {i * width + j for i, j in zip(shape_at, place_at, strict=True)}
    if len(pairs) != n:
        raise ValueError("an offer listed twice")  # the parser keeps one offer per (type, region, zone)
    # Every shape and every place checked once, each on one pair of its own (the checks are per machine and per
    # place: a pair adds nothing to them); dict(zip(...)) keeps one partner per key at C speed.
    cover = {i * width + j for i, j in dict(zip(shape_at, place_at, strict=True)).items()}
    cover.update(i * width + j for j, i in dict(zip(place_at, shape_at, strict=True)).items())
    shapes, places = _checked(shapes, places, cover, cloud)
    regions, zones = [r for r, _ in places], [z for _, z in places]
    return _build(cloud, list(map(shapes.__getitem__, shape_at)), list(map(regions.__getitem__, place_at)),
                  list(map(zones.__getitem__, place_at)), _prices(doc["price"], n), _prices(doc["spot"], n))


def _build(cloud: str, shapes: list[Any], regions: list[str], zones: list[str], prices: list[float | None],
           spots: list[float | None]) -> tuple[Offer, ...]:
    """The offers of equal-length columns: ``placement.model.catalog.new_offer`` of each row, inline (tens of
    thousands of rows; the same six-key ``__dict__``, tests/placement/files/test_catalog_cache.py compares them)."""
    make, put = object.__new__, object.__setattr__
    out: list[Offer] = []
    add = out.append
    for shape, region, zone, price, spot in zip(shapes, regions, zones, prices, spots, strict=True):
        o = make(Offer)
        put(o, "__dict__", {"cloud": cloud, "region": region, "zone": zone, "shape": shape, "price": price,
                            "spot_price": spot})
        add(o)
    return tuple(out)


def _checked(shapes: list[Any], places: list[tuple[str, str]], pairs: set[int], cloud: str
             ) -> tuple[list[Any], list[tuple[str, str]]]:
    """The entry's shapes and places after the checks a CSV row gets (:class:`~placement.model.catalog.RowChecks`),
    each (shape, place) pair of ``pairs`` (every shape and every place on at least one of them) used once as a
    row of its own: a shape with no GPU or a count the shape data disagrees with, a region of the other cloud, a
    zone of another region raise :class:`InputError` as they do in a CSV. The shapes and places are those the
    checks return (an ad hoc shape rebuilt from its cells). ``pairs``: each pair as ``shape index × len(places) +
    place index``."""
    checks = RowChecks(cloud, "catalog cache")
    cells_of = [(s.name, s.accelerator, str(s.gpus), str(s.vcpus), str(s.memory_gib)) for s in shapes]
    out_shapes, out_places = list(shapes), list(places)
    width = len(places)
    for line, pair in enumerate(sorted(pairs), start=2):
        i, j = divmod(pair, width)
        if cells_of[i] in checks.machines and places[j] in checks.places:
            continue  # both checked in full on an earlier pair, as the parser skips a repeated machine and place
        s = shapes[i]
        shape, region, zone = checks.check(line, cells_of[i], places[j])
        if (region, zone) != places[j] or shape.gpus != s.gpus:
            raise InputError("catalog cache", "an entry's row differs from what its checks return")
        out_shapes[i], out_places[j] = shape, (region, zone)
    return out_shapes, out_places


def _store(path: Path, key: str, catalog: Catalog) -> None:
    """Write ``catalog``'s entry atomically; any OSError (read-only or full disk) leaves no entry."""
    book = shape_book()
    offers = catalog.offers
    by_name = {o.shape.name: o.shape for o in offers}
    shapes = {name: i for i, name in enumerate(by_name)}
    places: dict[tuple[str, str], int] = {}
    adhoc = {name: [s.accelerator, s.gpus, s.vcpus, s.memory_gib] for name, s in by_name.items()
             if book.shapes.get(name) is not s}
    nan = float("nan")
    body = json.dumps({"n": len(offers), "shapes": list(shapes), "adhoc": adhoc,
                       "shape": _packed([shapes[o.shape.name] for o in offers], "I"),
                       "place": _packed([places.setdefault((o.region, o.zone), len(places)) for o in offers], "I"),
                       "places": list(places),
                       "price": _packed([nan if o.price is None else o.price for o in offers], "d"),
                       "spot": _packed([nan if o.spot_price is None else o.spot_price for o in offers], "d"),
                       "warnings": list(catalog.warnings)}, separators=(",", ":"), allow_nan=False).encode()
    head = json.dumps({"format": FORMAT, "key": key, "sha256": _sha256(body).hexdigest()}).encode()
    tmp = None
    try:
        if not _replaceable(path):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # only here: a warm cache (every plan but the first) never loads it

        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False) as fh:
            tmp = fh.name
            fh.write(head + b"\n" + body)
        os.replace(tmp, path)
        tmp = None
        _prune(path.parent)
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _replaceable(path: Path) -> bool:
    """Whether an entry may be written at ``path``: nothing is there, or a regular file of this user (a damaged
    entry). A FIFO, link or another user's file at an entry's name is left alone, and nothing is cached."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    return stat.S_ISREG(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid())


def _prune(directory: Path) -> None:
    """Keep the :data:`KEEP` newest entries; only files this cache wrote count (:func:`_read_own`): a user's own
    ``*.json``, a link or a FIFO in the directory is left alone."""
    entries = []
    for entry in directory.iterdir():
        if not _ENTRY_NAME.fullmatch(entry.name):
            continue
        with contextlib.suppress(OSError):
            if _read_own(entry, len(MARKER)) is not None:
                entries.append((entry.lstat().st_mtime, entry))
    for _, entry in sorted(entries, reverse=True)[KEEP:]:
        with contextlib.suppress(OSError):
            entry.unlink()
