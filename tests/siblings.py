"""Load a test module beside the caller by its file name: the test folders are not packages, and a few test
modules reuse another's small builders (test_decide.py's fleet, test_submit.py's fakes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def sibling(test_file: str, filename: str) -> Any:
    """The module ``filename`` in the folder of ``test_file`` (pass ``__file__``), loaded under a private name."""
    path = Path(test_file).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"_{path.stem}_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
