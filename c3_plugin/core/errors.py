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


class RewardValueError(ValueError):
    """A reward returned something that is not one finite number per joint action: the run stops at once with it
    (never coerced: ``"1.0"`` would show as a reward of 1.0, None or NaN would poison every mean)."""
