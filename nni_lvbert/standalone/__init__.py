"""Stand-alone pre-trainings as a shared resource: the model store (`store.py`) and its models' validation metrics
(`scoring.py`), used by the studies and by two-stage search."""
