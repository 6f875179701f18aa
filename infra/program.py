"""The Pulumi program: read the stack config once, then build the stack's cloud."""

from __future__ import annotations

from infra.config import ConfigError, StackConfig, from_pulumi


def load_config() -> StackConfig:
    """Validated stack config; a bad value stops the program before any resource is registered."""
    import pulumi

    try:
        return from_pulumi()
    except ConfigError as exc:
        # RunError prints one line without a Python traceback in `pulumi up`.
        raise pulumi.RunError(f"invalid stack config: {exc}") from None


def main() -> None:
    cfg = load_config()
    if cfg.role == "hub":
        from infra.k8s.hub import build_hub

        build_hub(cfg)
    elif cfg.cloud == "aws":
        from infra.aws import build

        build(cfg)
    else:
        from infra.gcp import build

        build(cfg)
