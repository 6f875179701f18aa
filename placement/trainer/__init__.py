"""The reference trainer: the trainer contract (docs/trainer-contract.md) kept by running code.

``python -m placement.trainer --steps N [--seed S]`` trains a small model (NumPy by default, PyTorch with
``--backend torch``) and keeps the contract that ``placement submit`` renders: it reads the ``GPUFLEET_*``
variables, checkpoints atomically and asynchronously through fsspec (a path, ``s3://`` or ``gs://``), resumes
from the newest complete checkpoint, turns ``SIGTERM`` into an emergency checkpoint and the retry exit code,
and exits 0 only after its final step. ``python -m placement.trainer.launch -- COMMAND`` is the image's
entrypoint around any trainer.

Nothing here is imported by the ``placement`` CLI; NumPy, fsspec, prometheus-client and PyTorch are imported
inside the functions that need them (the ``trainer`` and ``torch`` extras).
"""
