"""The user's files (an adapter): bounded reads of the files a user names (:mod:`~placement.files.readers`), the
catalog, quota and reservation files built into the model's tables (:mod:`~placement.files.inputs`), the parsed
catalog cache (:mod:`~placement.files.catalog_cache`), calibration files on disk
(:mod:`~placement.files.calibrations`), and files another process could have replaced
(:mod:`~placement.files.safe`: regular-file-only reads that never block on a FIFO nor follow a link, writes that
never write through a link left at the name, deletes of our own regular files only; standard library only, so
the trainer and its launcher use it in any image).

May import :mod:`placement.model`, :mod:`placement.errors` and :mod:`placement.console`; never the solvers or
the commands.
"""
