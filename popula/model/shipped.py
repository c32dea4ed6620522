"""The tiny base that ships with Popula, so that a first run starts in seconds.

Building the tiny base (`popula pretrain`) takes half an hour or more on 2 cores. The
project carries one build of the default recipe (`popula/model/shipped/tiny/`, about 4 MB)
and a manifest, `tiny.json`: the recipe digest it was built from and every file's SHA-256.
When `base_model: tiny` finds the cache empty, the shipped build is installed into the cache,
but only when its digest is the digest of the recipe asked for (any change to the recipe,
the program generator, the prompt formats or the task kinds changes it) and every file
matches its hash; otherwise the base is built from the recipe as before. `popula pretrain`
always builds from the recipe. `python3 scripts/ship_tiny_base.py` replaces the shipped
build with the cache's build of the current recipe.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from popula.errors import PopulaError
from popula.model.recipe import MARKER, TinyRecipe
from popula.permissions import follow_umask

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
SHIPPED_MODEL = SHIPPED_DIR / "tiny"
SHIPPED_MANIFEST = SHIPPED_DIR / "tiny.json"


def shipped_digest() -> str | None:
    """The recipe digest of the shipped build (None when the project ships none)."""
    try:
        return json.loads(SHIPPED_MANIFEST.read_text())["digest"]
    except (OSError, ValueError, KeyError):
        return None


def install_shipped(dest: Path, recipe: TinyRecipe) -> bool:
    """Copy the shipped build into `dest` (atomically) when it was built from `recipe`; False
    when it was not (the caller builds). A shipped file that fails its hash is an error: the
    installation is damaged, and a silent half-hour build would hide it."""
    if shipped_digest() != recipe.digest():
        return False
    files: dict[str, str] = json.loads(SHIPPED_MANIFEST.read_text())["files"]
    for name, expected in files.items():
        path = SHIPPED_MODEL / name
        if not path.is_file() or _sha256(path) != expected:
            raise PopulaError(f"{path}: the shipped tiny base is damaged (missing or not the file it was shipped "
                              "as); reinstall Popula, or build the base with `popula pretrain`")
    tmp = dest.with_name(f".{dest.name}.shipped.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for name in files:
            shutil.copyfile(SHIPPED_MODEL / name, tmp / name)
        follow_umask(tmp)
        tmp.replace(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def ship(built: Path) -> dict[str, str]:
    """Make `built` (a finished build of the default recipe) the shipped build; returns the manifest."""
    summary = json.loads((built / MARKER).read_text())
    if summary.get("stopped_early"):
        raise PopulaError(f"{built}: a build cut short by --minutes is weaker than its recipe; ship a whole one")
    if summary["digest"] != TinyRecipe().digest():
        raise PopulaError(f"{built}: built from recipe {summary['digest']}, not the current default "
                          f"{TinyRecipe().digest()}; build it with `popula pretrain` first")
    shutil.rmtree(SHIPPED_MODEL, ignore_errors=True)
    shutil.copytree(built, SHIPPED_MODEL)
    follow_umask(SHIPPED_MODEL)
    manifest = {"digest": summary["digest"],
                "files": {p.name: _sha256(p) for p in sorted(SHIPPED_MODEL.iterdir()) if p.is_file()}}
    SHIPPED_MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
