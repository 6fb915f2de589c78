"""The project's error types that every layer may raise (imports nothing of the project)."""


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the fix."""


class DatasetError(ValueError):
    """A dataset that cannot be loaded or used; the message says which and how to fix it."""


class DomainHookError(RuntimeError):
    """A domain's hook (its reward, eval logger, outcome) raised during a run; the message names the domain, the hook,
    the rows and the fix."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message says at which env step and how the same command resumes."""
