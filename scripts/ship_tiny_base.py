"""Make the cache's build of the default tiny recipe the one Popula ships (popula/model/shipped/).

    popula pretrain                       # builds the current recipe into the cache
    python3 scripts/ship_tiny_base.py     # copies it, with every file's SHA-256, into the project

Run it whenever the recipe's digest changes (a change to the recipe, the program generator,
the prompt formats or the task kinds); tests/test_shipped_base.py says when that is due.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from popula.model.base import tiny_path
from popula.model.recipe import TinyRecipe
from popula.model.shipped import SHIPPED_MODEL, ship


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("built", nargs="?", type=Path, default=None,
                        help="a finished build of the default recipe (default: the cache's)")
    args = parser.parse_args()
    manifest = ship(args.built or tiny_path(TinyRecipe()))
    print(json.dumps(manifest, indent=1))
    print(f"shipped to {SHIPPED_MODEL}")


if __name__ == "__main__":
    main()
