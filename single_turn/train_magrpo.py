"""Train a team with MAGRPO: python single_turn/train_magrpo.py --config configs/math/magrpo.yaml [--override k=v]
[--dry-run]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c3_plugin.tools.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(algorithm="magrpo", default_config=Path(__file__).resolve().parents[1] / "configs" / "math"
                  / "magrpo.yaml"))
