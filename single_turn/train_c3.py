"""Train a team with C3: python single_turn/train_c3.py --config configs/math/c3.yaml [--override k=v] [--dry-run]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c3_plugin.tools.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(algorithm="c3", default_config=Path(__file__).resolve().parents[1] / "configs" / "math" / "c3.yaml"))
