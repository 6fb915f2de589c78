"""Test-wide settings: the tiny CPU models of these tests run fastest on one intra-op thread (thread
start-up dominates their matrix products, and two threads on two shared cores can be many times slower)."""

import torch

torch.set_num_threads(1)
