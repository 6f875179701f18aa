"""Pure data and physics of placement: frozen dataclasses and functions, no I/O (issue 33's layout)."""
