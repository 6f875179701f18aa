"""gpufleet Pulumi program: GPU clusters, checkpoint storage and Kueue, one stack per cluster."""
