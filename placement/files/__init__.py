"""The user's files (an adapter): bounded reads of the files a user names (:mod:`~placement.files.readers`), the
catalog, quota and reservation files built into the model's tables (:mod:`~placement.files.inputs`), the parsed
catalog cache (:mod:`~placement.files.catalog_cache`) and calibration files on disk
(:mod:`~placement.files.calibrations`).

May import :mod:`placement.model`, :mod:`placement.errors` and :mod:`placement.console`; never the solvers or
the commands.
"""
