"""The Prometheus reader (an adapter): the HTTP API with deadlines (:mod:`~placement.prometheus.client`) and the
fleet's measurements turned into calibration rows, from a server or an export
(:mod:`~placement.prometheus.measurements`).

May import :mod:`placement.model`, :mod:`placement.errors`; never the solvers or the commands.
"""
