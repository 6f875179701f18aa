"""The GKE GPUDirect table (placement/data/gpudirect.yaml): pinned installers, paired sidecars, NCCL env."""

from __future__ import annotations

import copy
import re
from importlib import resources
from typing import Any

import pytest
import yaml

from placement.errors import InputError
from placement.fleet.manifests import nccl_command
from placement.model.gpudirect import GPUDIRECT_FABRICS, fabric, gpudirect_book, parse_gpudirect
from placement.model.shapes import shape_book


def _doc() -> dict[str, Any]:
    return yaml.safe_load(resources.files("placement.data").joinpath("gpudirect.yaml").read_text())  # type: ignore[no-any-return]


def test_every_gke_gpudirect_shape_has_a_row_with_pinned_installers() -> None:
    kinds = {s.fabric for s in shape_book().for_cloud("gcp") if s.fabric != "none"}
    assert kinds == set(GPUDIRECT_FABRICS) == set(gpudirect_book().fabrics)
    for kind in kinds:
        row = fabric(kind)
        assert row.installers
        for inst in row.installers:
            assert re.fullmatch(r"[0-9a-f]{40}", inst.commit)
            assert f"/{inst.commit}/{inst.path}" in inst.url and "/master/" not in inst.url


def test_sidecar_and_plugin_come_from_the_same_fabric_family() -> None:
    # A TCPX daemon beside a TCPXO plugin (or the reverse) does not start: the image families must match.
    for kind in ("tcpx", "tcpxo"):
        row = fabric(kind)
        assert row.rxdm_image is not None
        family = f"/gpudirect-{kind}/"
        assert family in row.rxdm_image and family in row.nccl_plugin
        assert not row.rxdm_image.endswith(":latest")
    assert fabric("rdma").rxdm_image is None  # gIB needs no receive-datapath daemon


def test_env_scripts_are_googles_paths() -> None:
    assert fabric("tcpxo").env_script == f"{fabric('tcpxo').nccl_lib_dir}/nccl-env-profile.sh"
    assert fabric("rdma").env_script == "/usr/local/gib/scripts/set_nccl_env.sh"
    tcpx = fabric("tcpx")
    assert tcpx.env_script is None and tcpx.nccl_env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "eth0"


def test_nccl_command_sources_the_script_then_execs_the_user_command() -> None:
    argv = ["python", "-m", "train", "--lr", "3e-4 $HOME"]
    cmd = nccl_command("rdma", argv)
    assert cmd[:2] == ["/bin/bash", "-c"] and cmd[4:] == argv  # arguments passed through, never re-parsed
    assert cmd[2] == 'source "/usr/local/gib/scripts/set_nccl_env.sh" && exec "$@"'
    assert nccl_command("tcpx", argv) == argv  # TCPX: settings in env, nothing to source
    assert nccl_command("tcpxo", []) == []  # no command: the image's entrypoint runs (with a warning)


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["installers"]["nccl-tcpxo-installer"].update(commit="master"),
     "installers.nccl-tcpxo-installer.commit"),
    (lambda d: d["fabrics"]["tcpxo"].update(rxdm_image="us-docker.pkg.dev/x/tcpgpudmarxd-dev:latest"),
     "fabrics.tcpxo.rxdm_image"),
    (lambda d: d["fabrics"]["rdma"].update(installers=["nope"]), "fabrics.rdma.installers"),
    (lambda d: d["fabrics"].pop("tcpx"), "fabrics.tcpx"),
    (lambda d: d["fabrics"]["tcpx"].update(nccl_env={"NCCL_BUFFSIZE": 4194304}), "fabrics.tcpx.nccl_env"),
])
def test_a_broken_table_names_the_field(edit: Any, field: str) -> None:
    doc = copy.deepcopy(_doc())
    edit(doc)
    with pytest.raises(InputError) as err:
        parse_gpudirect(doc)
    assert err.value.field == field
