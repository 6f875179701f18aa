"""Kueue's WorkloadPriorityClasses of the platform: their names, values and descriptions.

Data only. :mod:`placement.model.kueue` re-exports them for the stacks (``infra/k8s`` creates the classes);
:mod:`placement.model.jobspec` reads them for a job's ``priority`` without loading the rest of the Kueue naming
scheme into every plan.
"""

from __future__ import annotations

# (name, value, description). Higher value wins; withinClusterQueue preemption evicts lower values.
# The serving class (workers only, for the inference queue) outranks every training class.
SERVING_PRIORITY_CLASS: tuple[str, int, str] = (
    "serving", 2000, "Inference serving on a worker's inference queue: outranks all training.")
PRIORITY_CLASSES: tuple[tuple[str, int, str], ...] = (
    ("production", 1000, "Production training: preempts burst and low work in its ClusterQueue."),
    ("burst", 500, "Short bursts: preempts low work, yields to production."),
    ("low", 100, "Best-effort work that runs on idle quota and is preempted first."),
)
