"""The one error type of the fleet adapters: printed as one line, with ``code`` as the exit code."""

from __future__ import annotations

from placement.console import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "FleetError"]


class FleetError(Exception):
    """A failure reading stack outputs or talking to a cluster (``code`` 1), or bad input found on the way
    (``code`` 2: a masked kubeconfig, a missing CLI, HTTP 400/409/422)."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
