"""The sandbox that runs model-written code: a pool of isolated boxes (``sandbox.Sandbox``), the in-box runner, the
system-call filter, the image, the limits and the host's judge. It imports nothing of ``c3_plugin`` or ``domains``;
the code domain (``domains/code``) calls it. Its guarantees are in ``c3_sandbox/README.md``."""

from c3_sandbox.sandbox import (
    UNSAFE,
    Limits,
    Sandbox,
    SandboxError,
    Test,
    TestResult,
    configure,
    default_sandbox,
    isolation_probe,
    namespaces_available,
)

__all__ = ["Limits", "Sandbox", "SandboxError", "Test", "TestResult", "UNSAFE", "configure", "default_sandbox",
           "isolation_probe", "namespaces_available"]
