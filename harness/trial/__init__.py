"""One trial: the training loop and its parts (staleness sources, backends, metrics, the float path, workers),
and the lifecycle that runs a trial wherever it is scheduled.

Importing this package imports nothing: `harness.trial.numerics` must be importable before torch."""
