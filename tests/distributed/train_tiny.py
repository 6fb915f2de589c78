"""A short training run of tiny random models on the template domain, through the run path
(``c3_plugin.run.train.train``), under torchrun or as one process.

    torchrun --nproc_per_node 2 tests/distributed/train_tiny.py '<config JSON>' [KILL_RANK:KILL_AT_UPDATE]

With the second argument, that rank SIGKILLs itself when it reaches that update (a crash mid-epoch).
``C3_TINY_HIDDEN`` sets the models' width (vLLM's CPU attention needs a head size of 32 or more: 64); with
``generation_backend: vllm`` each rank prints ``ENGINE <json>`` (its rank and engine seed) when its engine starts.
"""

import json
import os
import signal
import sys

from c3_plugin.core.config import load_config
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.run.train import train


def main() -> None:
    cfg = load_config(data=json.loads(sys.argv[1]))
    if len(sys.argv) > 2:
        from c3_plugin.trainers.base import WorkflowTrainer

        rank, at = (int(x) for x in sys.argv[2].split(":"))
        flush = WorkflowTrainer._flush

        def crashing_flush(self):
            if self.dist.rank == rank and self.update_step == at:
                os.kill(os.getpid(), signal.SIGKILL)
            flush(self)

        WorkflowTrainer._flush = crashing_flush
    if getattr(cfg.algo, "generation_backend", "hf") == "vllm":
        from c3_plugin.generation.vllm import VLLMBackend

        start = VLLMBackend._start

        def reporting_start(self, agent):
            start(self, agent)
            print("ENGINE " + json.dumps({"rank": self.rank, "world": self.world, "seed": self.engine_seed}),
                  flush=True)

        VLLMBackend._start = reporting_start
    tok = tiny_tokenizer()
    hidden = int(os.environ.get("C3_TINY_HIDDEN", "32"))
    models = [tiny_model(tok, seed=a, hidden=hidden) for a in range(2)]
    train(cfg, models=models, tokenizer=tok)


if __name__ == "__main__":
    main()
