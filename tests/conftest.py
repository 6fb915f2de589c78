"""Test-wide settings: the tiny CPU models of these tests run fastest on one intra-op thread (thread
start-up dominates their matrix products, and two threads on two shared cores can be many times slower);
and no test reaches the Hugging Face Hub: ``HF_HUB_OFFLINE`` is set for every test (and the subprocesses it
starts), so a dry-run's hub checks give the same answer on any machine."""

import pytest
import torch

from c3_plugin.core.hub import offline_reason

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    """Every test runs as offline as CI's machine is, whatever the machine it runs on."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # and restored after the test, also when hub.offline_mode set it
    offline_reason.cache_clear()
    yield
    offline_reason.cache_clear()
