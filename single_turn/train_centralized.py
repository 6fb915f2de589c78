"""Train one centralized joint actor on the travel task:
python single_turn/train_centralized.py --algorithm {magrpo,madpo,madpo_iter,marlhf,marlhf_iter} [--config ...]
[--override k=v] [--dry-run]

Each algorithm has its own default config, configs/travel/centralized_<algorithm>.yaml. One model sees
both roles' contexts and writes the whole joint action; the two role actions are split from it only
for the reward and the metrics. C3 is not defined here (one decision point). TRAVEL_COMLRL_ROOT=<checkout>
points this entry point alone at another CoMLRL; a core without the centralized APIs fails before
any model is loaded."""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if os.environ.get("TRAVEL_COMLRL_ROOT"):  # an isolated CoMLRL checkout for this entry point only
    _core = Path(os.environ["TRAVEL_COMLRL_ROOT"])
    if not (_core / "comlrl" / "__init__.py").exists():
        sys.exit(f"TRAVEL_COMLRL_ROOT={_core} holds no comlrl package; point it at a CoMLRL checkout's root")
    sys.path.insert(0, str(_core))

from c3_plugin.tools.cli import main  # noqa: E402

CHOICES = ("magrpo", "madpo", "madpo_iter", "marlhf", "marlhf_iter")

if __name__ == "__main__":
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--algorithm", choices=CHOICES, required=True, help="the centralized algorithm to train")
    known, rest = pre.parse_known_args()
    sys.exit(main(rest, algorithm=f"centralized_{known.algorithm}",
                  default_config=ROOT / "configs" / "travel" / f"centralized_{known.algorithm}.yaml"))
