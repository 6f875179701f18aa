"""``placement dispatch``: the MultiKueue External dispatcher.

* :mod:`placement.dispatch.model`: the snapshots and decisions (frozen dataclasses);
* :mod:`placement.dispatch.decide`: the pure decision function (cost + price of waiting per worker);
* :mod:`placement.dispatch.snapshot`: Kueue objects -> snapshots, and the nomination to apply (pure);
* :mod:`placement.dispatch.memory`: what it remembers of a Workload, carried on its Events (pure);
* :mod:`placement.dispatch.controller`: the Kubernetes controller (watches, leader election, writes);
* :mod:`placement.dispatch.telemetry`: Prometheus metrics, ``/healthz``, JSON logs;
* :mod:`placement.commands.dispatch`: the ``placement dispatch`` command.
"""
