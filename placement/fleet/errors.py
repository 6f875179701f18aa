"""The one error type of the fleet adapters: printed as one line, with ``code`` as the exit code."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class FleetError(Exception):
    """A failure reading stack outputs or talking to a cluster (``code`` 1), or bad input found on the way
    (``code`` 2: a masked kubeconfig, a missing CLI, HTTP 400/409/422)."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
