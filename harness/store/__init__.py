"""Storage: the trial directory's files (their one reader and writer), raw-trial archives, provenance, and the
tracking mirrors (MLflow, W&B)."""
