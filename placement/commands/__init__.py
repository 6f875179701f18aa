"""The commands: one module per ``placement`` subcommand. Each parses its flags (``add_arguments``), calls the
core (:mod:`placement.model`, :mod:`placement.plan`) and the adapters it needs, and renders a table, a versioned JSON
document or a chart. :mod:`~placement.commands.main` is the ``placement`` entry point.

Top level of the package: only the standard library is imported when a command module is imported, so
``placement --help`` stays fast; the core, YAML, HiGHS and the cloud SDKs load inside the command that runs.
May import anything in ``placement``; nothing in ``placement`` imports a command module except
:mod:`~placement.commands.main`.
"""
