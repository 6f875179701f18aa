"""The package's own data files (``placement/data/``), read by the model's loaders (each once a process).

Read straight from the installed files: ``importlib.resources`` loads ``zipfile``, ``tempfile`` and ``threading``
on its first use, a few milliseconds of every ``placement`` process for files that are plain files in every
install. A package that is not plain files (imported from a zip) is read through ``importlib.resources``.

The YAML data books (:data:`MIRRORED`) are the source, with a comment naming the source and date of every figure.
Each has a JSON mirror, ``placement/data/parsed/<stem>.json``, made from it by ``scripts/data_books.py``: the same
document, as PyYAML's safe loader builds it. :func:`packaged_book` reads the mirror (``json``'s C parser: a tenth of
a millisecond for the largest book) instead of parsing the YAML (PyYAML's constructor: 20 ms for the books a
``placement plan`` reads, plus importing PyYAML where the command has no YAML of its own to read). The mirror
records the length and CRC-32 of the YAML text it was made from, and is used only when both match the YAML beside
it: a book edited without regenerating its mirror is still read, from the YAML, never from a stale mirror (and
``tests/placement/model/test_packaged.py`` fails until the mirror is regenerated). CRC-32 because the check guards
against forgetting, not against an adversary: whoever can edit the YAML can edit the mirror beside it, and
``hashlib`` costs an OpenSSL load (~6 ms) that ``zlib`` does not.
"""

from __future__ import annotations

import os
from typing import Any

_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")

# The YAML books with a JSON mirror: every book whose document JSON holds as it is (strings, numbers, booleans,
# null, lists, mappings with string keys). commitments.yaml and eks_versions.yaml hold dates (YAML timestamps),
# which JSON cannot, and are read from the YAML (neither is on a plan's path).
MIRRORED = ("bill.yaml", "egress.yaml", "gpudirect.yaml", "regions.yaml", "shapes.yaml", "workloads.yaml")
MIRROR_FORMAT = 1  # of the mirror's own fields (source, bytes, crc32, doc); bumped if they change


def packaged_text(name: str) -> str:
    """The text of ``placement/data/<name>`` (UTF-8)."""
    try:
        with open(os.path.join(_DATA, name), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        from importlib import resources

        return resources.files("placement.data").joinpath(name).read_text(encoding="utf-8")


def mirror_name(name: str) -> str:
    """The mirror of book ``name`` (``shapes.yaml`` → ``parsed/shapes.json``), relative to ``placement/data/``."""
    return "parsed/" + name.rsplit(".", 1)[0] + ".json"


def fingerprint(text: str) -> tuple[int, int]:
    """(UTF-8 bytes, CRC-32) of a book's text: what its mirror records of the YAML it was made from."""
    import zlib

    data = text.encode("utf-8")
    return len(data), zlib.crc32(data)


def parse_yaml_book(text: str) -> Any:
    """A book's document as PyYAML's safe loader builds it (libyaml's C scanner where installed: the same data)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def packaged_book(name: str) -> Any:
    """The document of the YAML book ``placement/data/<name>``: from its JSON mirror when the mirror was made
    from this very text, else parsed from the YAML."""
    text = packaged_text(name)
    if name in MIRRORED:
        import json

        try:
            mirror = json.loads(packaged_text(mirror_name(name)))
        except (OSError, ValueError):  # no mirror (a trimmed install) or a broken one: the YAML is the source
            mirror = None
        if (isinstance(mirror, dict) and mirror.get("format") == MIRROR_FORMAT
                and (mirror.get("bytes"), mirror.get("crc32")) == fingerprint(text)):
            return mirror.get("doc")
    return parse_yaml_book(text)
