"""`popula export`: one adapter of a run as a PEFT folder that another machine can load.

The folder holds what `PeftModel.from_pretrained(base, FOLDER)` reads (adapter_config.json,
adapter_model.safetensors) and a short model card (README.md): the base, the steps the run
trained, the member's rating and its held-out figures when the run measured them. Its config
names the base as a user knows it (`tiny-<recipe hash>`, a registry name, a hub id), never a
path of the machine that trained it, and its files follow the umask. With a step, the adapter
is taken as that kept checkpoint holds it (`popula.run.snapshot`), its card figures as of then.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from popula.adapters import CONFIG_FILE, WEIGHTS_FILE, base_identity, read_config
from popula.errors import PopulaError
from popula.league import League
from popula.run.metrics import latest_heldout
from popula.run.rundir import best_student, is_run_dir, run_adapter

CARD = "README.md"


@dataclass(frozen=True)
class Exported:
    """What `export_adapter` wrote: the folder, the member and adapter exported, and its base's name."""

    out: Path
    member: str
    adapter: str
    base: str


def check_export_target(out: Path) -> None:
    """Refuse, before anything is read, an OUT that cannot take the folder: an existing file or
    a folder that is not empty (it would mix two adapters), or a parent that does not exist."""
    if out.exists() and not out.is_dir():
        raise PopulaError(f"{out}: exists and is not a folder; give a new folder name for the adapter")
    if out.is_dir() and any(out.iterdir()):
        raise PopulaError(f"{out}: the folder is not empty; give a new or empty folder")
    if not out.absolute().parent.is_dir():
        raise PopulaError(f"{out}: the folder {out.absolute().parent} does not exist")


def export_adapter(run_dir: Path, out: Path, member: str | None = None, step: int | None = None) -> Exported:
    """Write league member (or adapter) `member` of `run_dir` (default: the best-rated live
    student) as a PEFT folder at `out` (see the module docstring): its latest weights, or with
    `step` the weights of that kept checkpoint."""
    check_export_target(out)
    if not is_run_dir(run_dir):
        raise PopulaError(f"{run_dir}: not a run directory (no config.yaml)")
    if step is None:
        member = member or best_student(run_dir)
        ref = run_adapter(run_dir, member)
        adapter, config_dir, league = ref.name, ref.path, League.load(run_dir / "league.json")

        def write_weights(path: Path) -> None:
            shutil.copyfile(ref.path / WEIGHTS_FILE, path)  # a new file: the umask applies
    else:
        from popula.run.snapshot import read_snapshot  # deferred: torch loads only for an export from a checkpoint

        snapshot = read_snapshot(run_dir, step, member)
        member, adapter, league = snapshot.member, snapshot.adapter, snapshot.league
        # every adapter of a run has one LoRA config; the stored ones hold it
        config_dir = run_adapter(run_dir, best_student(run_dir)).path

        def write_weights(path: Path) -> None:
            from safetensors.torch import save

            tensors = {k: v.contiguous() for k, v in snapshot.weights.items()}
            path.write_bytes(save(tensors, metadata={"format": "pt"}))  # open(): the umask applies
    config = read_config(config_dir, adapter)
    if not isinstance(config, dict):
        raise PopulaError(f"adapter {adapter!r} ({config_dir}): {CONFIG_FILE} is not a JSON object")
    base = base_identity(config.get("base_model_name_or_path") or "")
    config["base_model_name_or_path"] = base  # a run written before names were shareable named a path
    tmp = out.absolute().parent / f".{out.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_weights(tmp / WEIGHTS_FILE)
        (tmp / CARD).write_text(model_card(run_dir, league, member, adapter, base, step))
        if out.is_dir():
            out.rmdir()  # empty, checked above
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(out=out, member=member, adapter=adapter, base=base)


def model_card(run_dir: Path, league: League, member: str, adapter: str, base: str, step: int | None = None) -> str:
    """A short README.md: what the adapter is, how it was trained, how it scored (as of `step`
    when it comes from a checkpoint), how to load it."""
    who = league.members.get(member)
    role = who.role if who else "adapter"
    rating = f"{who.mu:.2f} +- {who.sigma:.2f} (conservative {who.conservative:.2f})" if who else "not rated"
    heldout = latest_heldout(run_dir, up_to=step).get(member)
    if heldout and heldout.get("pass1") is not None:
        scored = (f"held-out pass@1 {heldout['pass1']:.3f}, pass@{heldout['samples']} {heldout['passk']:.3f} on "
                  f"{heldout['tasks']} generated held-out tasks (step {heldout['step']})")
    else:
        scored = "not measured during the run (measure it with `popula eval RUN_DIR --adapter NAME --tasks FILE`)"
    return f"""---
library_name: peft
base_model: {base}
tags: [popula, lora, self-play, code]
---

# {adapter}

A LoRA adapter trained by Popula's population self-play (teachers propose verifiable Python
tasks, students solve them; a sandbox judges every answer).

- base model: `{base}`
- role in the league: {role} `{member}`
- steps trained by the run: {league.step if league.step is not None else 0}
- TrueSkill rating: {rating}
- {scored}

Load it with PEFT on the same base model:

```python
from peft import PeftModel
from transformers import AutoModelForCausalLM

base = AutoModelForCausalLM.from_pretrained("PATH_OR_ID_OF_{base}")
model = PeftModel.from_pretrained(base, "THIS_FOLDER")
```
"""
