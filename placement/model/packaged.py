"""The package's own data files (``placement/data/``), read as text by the model's loaders (each once a process).

Read straight from the installed files: ``importlib.resources`` loads ``zipfile``, ``tempfile`` and ``threading``
on its first use, a few milliseconds of every ``placement`` process for files that are plain files in every
install. A package that is not plain files (imported from a zip) is read through ``importlib.resources``.
"""

from __future__ import annotations

import os

_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def packaged_text(name: str) -> str:
    """The text of ``placement/data/<name>`` (UTF-8)."""
    try:
        with open(os.path.join(_DATA, name), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        from importlib import resources

        return resources.files("placement.data").joinpath(name).read_text(encoding="utf-8")
