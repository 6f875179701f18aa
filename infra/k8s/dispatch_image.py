"""The dispatcher's image, built and pushed by the hub stack: ``placement/dispatch/Dockerfile`` from this
checkout, pushed to a registry the stack creates in the hub's cloud and region, referenced by digest.

* AWS: an ECR repository ``<clusterName>/placement`` (tags mutable: the Deployment never uses a tag,
  scanned on push), pushed with a token from ``ecr:GetAuthorizationToken``;
* GCP: an Artifact Registry Docker repository ``<clusterName>-images`` in the hub's region and project,
  image ``placement``, pushed as ``oauth2accesstoken`` with the caller's access token.

The image is built with Pulumi's Docker Build provider (buildx/BuildKit, package ``pulumi-docker-build``)
for ``hub.dispatch.platform``, only on ``pulumi up`` (a preview never needs Docker). The Deployment pins
``<repository>@sha256:<digest>``, the digest the registry returned for this push: a rebuilt image rolls the
Deployment, and nothing moved behind a tag can change what runs.

The build context is the repository root narrowed by ``placement/dispatch/Dockerfile.dockerignore`` (which
BuildKit, and the provider when it hashes the context to decide on a rebuild, read before ``.dockerignore``:
pulumi-docker-build v0.0.22, ``provider/internal/context.go`` ``getIgnorePatterns``) to the ``placement``
package: a change elsewhere in the checkout rebuilds nothing. The Dockerfile installs the dependencies exported
from ``uv.lock`` with their hashes (``placement/dispatch/requirements.txt``) on a base image pinned by digest.

Pulling: on EKS the node role's ``AmazonEC2ContainerRegistryReadOnly`` (same account) and on GKE the node service
account's ``roles/artifactregistry.reader`` on the project let the nodes pull with their own identity. Any other
hub names a registry credential Secret in ``gpufleet:hub.dispatch.imagePullSecret``, which the Deployment lists
in ``imagePullSecrets`` (docs/kueue-hub.md says how to create and refresh it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
from pulumi import Output, ResourceOptions

from infra.config import StackConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "placement/dispatch/Dockerfile"
# The Dockerfile-specific ignore file that narrows the context to what the image copies.
DOCKERIGNORE = DOCKERFILE + ".dockerignore"
IMAGE_NAME = "placement"
# The tag pushed next to the digest (for people browsing the registry); the Deployment never uses it.
TAG = "dispatch"
GCP_REGISTRY_USER = "oauth2accesstoken"


def pinned(repository: str, digest: str) -> str:
    """``repository@digest``: what the Deployment runs. Raises ValueError unless ``digest`` is a sha256 digest
    (the provider leaves it empty when nothing was pushed, and an image by tag could change under the pod)."""
    algorithm, _, value = digest.partition(":")
    if algorithm != "sha256" or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"image {repository} was not pushed with a sha256 digest (got {digest!r})")
    return f"{repository}@{digest}"


def ecr_repository_name(cfg: StackConfig) -> str:
    """ECR repository of the hub's dispatcher image: ``<clusterName>/placement``."""
    return f"{cfg.cluster_name}/{IMAGE_NAME}"


def artifact_repository_id(cfg: StackConfig) -> str:
    """Artifact Registry repository ID: ``<clusterName>-images`` (a letter first, at most 63 characters)."""
    return f"{cfg.cluster_name}-images"


def _docker_build() -> Any:
    try:
        import pulumi_docker_build
    except ImportError:
        raise pulumi.RunError("the hub builds the dispatcher image with pulumi-docker-build, which is not installed: "
                              "pip install -e '.[infra]' (or set gpufleet:hub.dispatch.image to an image you built)"
                              ) from None
    return pulumi_docker_build


@dataclass(frozen=True)
class DispatcherImageArgs:
    """The hub stack config: ``cloud``, ``region``, ``project`` (GCP), ``cluster_name``, ``tags`` and
    ``hub.dispatch.platform``."""

    cfg: StackConfig


class DispatcherImage(pulumi.ComponentResource):
    """Registry plus pushed image. ``ref`` is ``<repository>@sha256:<digest>``; ``repository`` the image's
    repository (``<registry>/<path>``, no tag)."""

    def __init__(self, name: str, args: DispatcherImageArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:DispatcherImage", name, None, opts)
        cfg = args.cfg
        docker_build = _docker_build()
        if cfg.cloud == "aws":
            repository, registry = self._ecr(name, cfg)
        else:
            repository, registry = self._artifact_registry(name, cfg)
        self.repository: Output[str] = repository
        if not (REPO_ROOT / DOCKERIGNORE).is_file():
            raise pulumi.RunError(f"{DOCKERIGNORE} is missing: without it the whole checkout is the build context")
        self.image = docker_build.Image(
            f"{name}-image",
            context=docker_build.BuildContextArgs(location=str(REPO_ROOT)),
            dockerfile=docker_build.DockerfileArgs(location=str(REPO_ROOT / DOCKERFILE)),
            platforms=[cfg.hub.dispatch.platform],
            tags=[repository.apply(lambda r: f"{r}:{TAG}")],
            push=True,
            registries=[registry],
            # `pulumi preview` (CI included) needs no Docker daemon; the build runs on `pulumi up`.
            build_on_preview=False,
            opts=ResourceOptions(parent=self),
        )
        self.ref: Output[str] = Output.all(repository, self.image.digest).apply(lambda rd: pinned(rd[0], rd[1]))
        self.register_outputs({"repository": self.repository, "ref": self.ref})

    def _ecr(self, name: str, cfg: StackConfig) -> tuple[Output[str], Any]:
        import pulumi_aws as aws

        from infra.aws.layout import resource_tags

        docker_build = _docker_build()
        provider = aws.Provider(f"{name}-aws", region=cfg.region, opts=ResourceOptions(parent=self))
        repo = aws.ecr.Repository(
            f"{name}-repo", name=ecr_repository_name(cfg), image_tag_mutability="MUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
            tags=resource_tags(cfg, pulumi.get_stack(), f"{name}-repo"),
            opts=ResourceOptions(parent=self, provider=provider))
        token = aws.ecr.get_authorization_token_output(
            registry_id=repo.registry_id, opts=pulumi.InvokeOptions(provider=provider, parent=self))
        registry = docker_build.RegistryArgs(address=repo.repository_url, username=token.user_name,
                                             password=Output.secret(token.password))
        return repo.repository_url, registry

    def _artifact_registry(self, name: str, cfg: StackConfig) -> tuple[Output[str], Any]:
        import pulumi_gcp as gcp

        from infra.gcp.plan import gcp_labels

        docker_build = _docker_build()
        provider = gcp.Provider(f"{name}-gcp", project=cfg.project, region=cfg.region,
                                opts=ResourceOptions(parent=self))
        repo = gcp.artifactregistry.Repository(
            f"{name}-repo", repository_id=artifact_repository_id(cfg), format="DOCKER", location=cfg.region,
            description="gpufleet hub: the placement dispatch image", labels=gcp_labels(cfg, pulumi.get_stack()),
            opts=ResourceOptions(parent=self, provider=provider))
        token = gcp.organizations.get_client_config_output(opts=pulumi.InvokeOptions(provider=provider,
                                                                                            parent=self))
        registry = docker_build.RegistryArgs(address=f"{cfg.region}-docker.pkg.dev", username=GCP_REGISTRY_USER,
                                             password=Output.secret(token.access_token))
        return repo.registry_uri.apply(lambda uri: f"{uri}/{IMAGE_NAME}"), registry
