"""The user-error type every layer raises (stdlib only, so anything may import it without cycles)."""


class ConfigError(ValueError):
    """A bad configuration value or input; the message is one line naming the key or file and the fix."""


class TrialDirError(ValueError):
    """A trial directory that cannot be trusted as it is (one line naming the file and the way out)."""
