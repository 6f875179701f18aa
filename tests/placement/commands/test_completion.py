"""``placement completion bash``: a script bash runs, completing commands, each command's flags and choices."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from placement.commands.completion import bash_script
from placement.commands.main import build_parser


def complete(*words: str) -> list[str]:
    """What bash offers for the last of ``words`` (``placement`` first), with the generated script."""
    script = bash_script(build_parser())
    array = " ".join(f"'{w}'" for w in words)
    code = (f"{script}\nCOMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _placement; "
            "printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True).stdout
    return [w for w in out.splitlines() if w]


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_commands_complete():
    assert complete("placement", "pl") == ["plan", "plan-batch"]


def test_flags_of_the_command_complete():
    assert complete("placement", "plan", "--all-") == ["--all-candidates"]
    assert complete("placement", "offers", "--acc") == ["--accelerator"]
    assert "--time-limit" in complete("placement", "plan-batch", "--")
    assert "--time-limit" not in complete("placement", "plan", "--")


def test_choices_of_a_flag_complete():
    assert complete("placement", "offers", "--cloud", "") == ["aws", "gcp"]


def test_every_command_is_in_the_script():
    script = bash_script(build_parser())
    for name in ("plan", "plan-batch", "offers", "refresh", "submit", "dispatch", "completion"):
        assert f"    {name}) opts=" in script
