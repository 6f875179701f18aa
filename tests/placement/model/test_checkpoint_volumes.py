"""The checkpoint filesystem as a static PV + claim per namespace, for each driver's own static-provisioning form."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.model.checkpoint_volumes import CLAIM_NAME, sub_path, volume_objects

FSX = {"kind": "fsx", "id": "fs-0123", "dnsName": "fs-0123.fsx.us-east-1.amazonaws.com", "mountName": "x7abc",
       "path": "/ckpt", "capacityGb": 2400}
LUSTRE = {"kind": "lustre", "zone": "us-central1-a", "instance": "c1-ckpt", "filesystem": "ckpt",
          "mountPoint": "10.9.0.4@tcp:/ckpt", "capacityGb": 18000}
FILESTORE = {"kind": "filestore", "zone": "europe-west4-b", "instance": "c1-ckpt", "mountPoint": "10.9.0.8:/share1",
             "capacityGb": 1024}


def _bound(pv: dict, pvc: dict, ns: str) -> None:
    assert pvc["metadata"] == {"name": CLAIM_NAME, "namespace": ns, "labels": pvc["metadata"]["labels"]}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": ns, "name": CLAIM_NAME}
    # Static on both sides: no provisioner may create a second filesystem for the claim.
    assert pv["spec"]["storageClassName"] == "" and pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["capacity"] == pvc["spec"]["resources"]["requests"]


def test_fsx_volume_uses_the_file_system_id_dns_and_mount_name() -> None:
    pv, pvc = volume_objects("c1", "team-a", FSX)
    _bound(pv, pvc, "team-a")
    assert pv["metadata"]["name"] == "c1-ckpt-team-a"
    assert pv["spec"]["csi"] == {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-0123",
                                 "volumeAttributes": {"dnsname": FSX["dnsName"], "mountname": "x7abc"}}
    assert pv["spec"]["mountOptions"] == ["flock"]
    assert pv["spec"]["capacity"] == {"storage": "2400Gi"}
    assert sub_path(FSX) == "ckpt"  # the data-repository path, so files reach the bucket


def test_managed_lustre_volume_names_project_zone_instance_ip_and_fsname() -> None:
    pv, pvc = volume_objects("c1", "team-b", LUSTRE, project="proj-1")
    _bound(pv, pvc, "team-b")
    assert pv["spec"]["csi"] == {"driver": "lustre.csi.storage.gke.io", "volumeHandle": "proj-1/us-central1-a/c1-ckpt",
                                 "volumeAttributes": {"ip": "10.9.0.4", "filesystem": "ckpt"}}
    assert sub_path(LUSTRE) == ""
    with pytest.raises(InputError, match="project"):
        volume_objects("c1", "team-b", LUSTRE)


def test_filestore_volume_is_the_instance_share() -> None:
    pv, pvc = volume_objects("c1", "team-a", FILESTORE)
    _bound(pv, pvc, "team-a")
    assert pv["spec"]["csi"] == {"driver": "filestore.csi.storage.gke.io",
                                 "volumeHandle": "modeInstance/europe-west4-b/c1-ckpt/share1",
                                 "volumeAttributes": {"ip": "10.9.0.8", "volume": "share1"}}


@pytest.mark.parametrize(("fs", "field"), [
    ({**FSX, "dnsName": None}, "checkpointFilesystem.dnsName"),
    ({**FILESTORE, "mountPoint": "10.9.0.8"}, "checkpointFilesystem.mountPoint"),
    ({**FSX, "kind": "nfs"}, "checkpointFilesystem.kind"),
    ({**FSX, "capacityGb": -1}, "checkpointFilesystem.capacityGb"),
])
def test_incomplete_outputs_name_the_field(fs: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        volume_objects("c1", "team-a", fs, project="p")
    assert str(err.value).startswith(field + ":")
