"""The user's files (an adapter). :mod:`~placement.files.safe`: bounded, regular-file-only reads, writes that
never follow a link left in their place, and deletes of our own regular files only (standard library only).
"""
