"""Run under torchrun with 2 ranks: the equal-steps setting (``minibatches_per_ppo_epoch: 3``) on ranks holding 1
and 2 messages; rank 0 writes every step's message count over both ranks and each rank's own as JSON.

    torchrun --nproc_per_node 2 tests/distributed/minibatch_split.py OUT.json
"""

import json
import sys
from types import SimpleNamespace

import numpy as np
import torch.distributed as dist

from c3_plugin.scale import distributed as dp
from c3_plugin.trainers.update import PolicySample, plan_minibatches


def main() -> None:
    dist.init_process_group("gloo")  # a plain group: dp.init joins it without loading DeepSpeed
    ctx = dp.init("gloo")
    samples = [PolicySample([1], [2], [0.0], float(i)) for i in range(ctx.rank + 1)]
    args = SimpleNamespace(minibatches_per_ppo_epoch=3, minibatch_size=None, ppo_epochs=1, micro_batch_size=1)
    steps = plan_minibatches(samples, args, np.random.default_rng(0), ctx.world)
    mine = dp.gather([len(batch) for batch, *_ in steps])
    if ctx.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump({"global": [n_seqs for _, _, n_seqs, _ in steps], "per_rank": mine}, fh)


if __name__ == "__main__":
    main()
