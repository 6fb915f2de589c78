"""Models on devices: loading policies, checking model paths, precision rules, data-parallel splits and the
process's peak memory."""

import logging


class _NoCpuAcceleratorNotice(logging.Filter):
    """DeepSpeed's ``Setting accelerator to CPU ...`` warning, which it logs on every import on a machine without a
    GPU (a CPU run is intended here), kept out of the user's output; its other messages pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Setting accelerator to CPU")


if not any(isinstance(f, _NoCpuAcceleratorNotice) for f in logging.getLogger("DeepSpeed").filters):
    logging.getLogger("DeepSpeed").addFilter(_NoCpuAcceleratorNotice())  # before any module here imports deepspeed
