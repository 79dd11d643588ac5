"""Watching: health, the reconcile gate, alerts, notification channels and metrics."""
