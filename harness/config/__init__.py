"""Configuration: what a user writes (suite files, run configs, delay laws, traces), read safely and
checked into typed, frozen objects. Imports no torch."""
