"""Kubernetes layer shared by every cluster: Kueue objects, cluster add-ons and the MultiKueue hub."""
