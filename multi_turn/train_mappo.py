"""Train a multi-turn team with MAPPO: python multi_turn/train_mappo.py [--config configs/code/multi_turn_mappo.yaml]
[--override k=v] [--dry-run]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c3_plugin.tools.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(algorithm="mappo", default_config=Path(__file__).resolve().parents[1] / "configs" / "code"
                  / "multi_turn_mappo.yaml"))
