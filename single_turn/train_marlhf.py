"""Train the travel team with MARLHF: python single_turn/train_marlhf.py [--config configs/travel/marlhf.yaml]
[--override mapl.k=v] [--dry-run]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c3_plugin.tools.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(algorithm="marlhf", default_config=Path(__file__).resolve().parents[1] / "configs" / "travel"
                  / "marlhf.yaml"))
