"""scripts/preview output: a failure shown once on a terminal, and "no change" not bolded in the PR comment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("pulumi")

from infra import preview as pv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def broken_stack(root: Path) -> None:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.aws-usw2-p4d.yaml").read_text())
    doc["config"]["gpufleet:nodePools"][0]["instanceType"] = "no-such-shape"
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / "Pulumi.broken.yaml").write_text(yaml.safe_dump(doc))


def test_a_failed_stack_is_shown_once_on_a_terminal(tmp_path, capsys, monkeypatch):
    broken_stack(tmp_path)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert pv.main(["--root", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert (out + err).count("no-such-shape") == 1
    assert "1 stack(s) failed" in err and err.count("\n") == 1


def test_a_failed_stack_goes_to_stderr_when_stdout_is_not_a_terminal(tmp_path, capsys):
    broken_stack(tmp_path)
    assert pv.main(["--root", str(tmp_path), "--format", "markdown"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("preview: stack broken failed:") and "no-such-shape" in err


def test_markdown_bolds_a_change_but_not_zero():
    new = pv.preview(pv.select_stacks(ROOT, ["aws-usw2-p4d"]))
    same = pv.render_markdown(new, {**new, "ref": "main", "commit": "0" * 40})
    assert "| $0.00 |" in same and "**$0.00**" not in same
    cheaper = {**new, "ref": "main", "commit": "0" * 40,
               "stacks": {n: {**d, "cost": {s: {k: v + 1.0 for k, v in per.items()} if isinstance(per, dict) else per
                                            for s, per in d["cost"].items()}}
                          for n, d in new["stacks"].items()}}
    assert "**-$1.00**" in pv.render_markdown(new, cheaper)
