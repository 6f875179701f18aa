"""gpufleet placement: rank where a GPU job can run, with compute and egress cost."""

__version__ = "0.1.0"
