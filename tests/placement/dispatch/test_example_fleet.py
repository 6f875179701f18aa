"""The shipped example fleet file: what the hub stack would mount for the example stacks, and what the README's
`placement dispatch --once --dry-run` example reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement.commands.main import main
from placement.fleet.outputs import load_fleet

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "placement" / "examples"


def test_the_example_fleet_is_the_example_hub_workers_outputs_without_secrets():
    from infra.k8s.dispatcher import fleet_document

    outputs = json.loads((EXAMPLES / "stacks-outputs.json").read_text())
    workers = sorted(outputs["hub"]["workers"])
    text = (EXAMPLES / "fleet.json").read_text()
    assert text == fleet_document({k: outputs[k] for k in workers}) + "\n"  # scripts/example_outputs.py wrote it
    assert "kubeconfig" not in text
    assert sorted(c.stack for c in load_fleet(str(EXAMPLES / "fleet.json"))) == workers


def test_the_readme_dispatch_example_runs_against_a_hub_with_the_example_fleet(fleet, capsys):
    fleet.submit("llama-ft")
    code = main(["dispatch", "--fleet", str(EXAMPLES / "fleet.json"), "--kubeconfig", str(fleet.hub_kubeconfig),
                 "--once", "--dry-run", "--metrics-port", "0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "llama-ft" in out and "nothing written (--dry-run)" in err
    assert not any(fleet.nominated().values())  # nothing nominated


def test_without_a_hub_the_example_is_one_line_and_exit_1(tmp_path, capsys):
    kubeconfig = tmp_path / "hub.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n"
                          "clusters: [{name: h, cluster: {server: 'https://127.0.0.1:9'}}]\n"
                          "users: [{name: u, user: {token: x}}]\n"
                          "contexts: [{name: c, context: {cluster: h, user: u}}]\ncurrent-context: c\n")
    code = main(["dispatch", "--fleet", str(EXAMPLES / "fleet.json"), "--kubeconfig", str(kubeconfig), "--once",
                 "--dry-run", "--metrics-port", "0"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "cannot reach the hub's API server" in err


def test_dispatch_help_says_what_it_is(capsys):
    with pytest.raises(SystemExit):
        main(["dispatch", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "runs on the hub" in out and "placement/examples/fleet.json" in out and "writes nothing" in out
