"""The model: pure data and physics. Job specs, machine shapes, zones, offer catalogs, training physics, egress,
the bill's lines, quotas, reservations, commitments, calibration, the Kubernetes naming rules the stacks share,
and the contract of what ``placement submit`` writes on a job and its readers read (:mod:`.contract`, standard
library only).

Owns: frozen dataclasses and functions that take data and return data. No I/O beyond reading the data files
packaged in :mod:`placement.data` (and the refreshed catalog in the user data directory, :func:`default_catalog`).
May import: the standard library, PyYAML, :mod:`placement.errors`, :mod:`placement.console` and itself. Never the
solvers (:mod:`placement.plan`), the commands or an adapter (``files``, ``prometheus``, ``live``, ``fleet``,
``dispatch``, ``trainer``).
"""
