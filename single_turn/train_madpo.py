"""Train the travel team with MADPO: python single_turn/train_madpo.py [--config configs/travel/madpo.yaml] [--override
mapl.k=v] [--dry-run]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c3_plugin.tools.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(algorithm="madpo", default_config=Path(__file__).resolve().parents[1] / "configs" / "travel"
                  / "madpo.yaml"))
