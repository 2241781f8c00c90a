"""An example stalebench estimator plugin (see stalebench's docs/plugins.md)."""
