"""The project's error types that every layer may raise (imports nothing of the project)."""


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the fix."""


class DatasetError(ValueError):
    """A dataset that cannot be loaded or used; the message says which and how to fix it."""
