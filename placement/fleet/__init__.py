"""Fleet state shared by ``placement submit`` and ``placement dispatch``.

* :mod:`placement.fleet.stacks`: the clusters and the hub from their Pulumi stack outputs (pure);
* :mod:`placement.fleet.outputs`: reading those outputs from a file or the ``pulumi`` CLI;
* :mod:`placement.fleet.choose`: which existing pools can run a job, and the portable group of a job
  sent through the MultiKueue hub (pure);
* :mod:`placement.fleet.manifests`: the Job/JobSet and storage objects (pure dicts);
* :mod:`placement.fleet.kube`: the thin Kubernetes adapter (the official ``kubernetes`` client).

Nothing here imports ``infra/`` or ``placement.commands.main``; the Kubernetes client is imported lazily.
"""
