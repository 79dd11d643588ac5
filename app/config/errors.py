"""The one error a bad setting raises."""


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""
