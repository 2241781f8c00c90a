"""A suite: its trials' kinds, the preflight session, the Ray Tune runner, --dry-run plans, status, and the
learnability probe that accepts a new base."""
