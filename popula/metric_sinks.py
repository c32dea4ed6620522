"""Where each step's scalars go beside RUN_DIR/metrics.jsonl: the metric sinks, by name.

metrics.jsonl is the run's record and is always written (popula.run.metrics); a sink is a view
of it in a tool people watch runs in. `SINKS` is the one table: the config accepts its names
(`logging.report_to`), `popula run` checks that each named sink can be imported before any
model loads (`check_sinks`), and `popula.run.metrics.MetricsLog` opens them (`open_sinks`) and
hands each the same flat scalars every step.

Adding a sink is one class with `log(step, scalars)` and `close()`, and one entry of `SINKS`:
how to open it from a `SinkContext`, the module it needs and the line that installs it. Torch
and wandb are imported only when a sink of theirs opens, so the config imports this module
for nothing.
"""

from __future__ import annotations

import importlib
import os
import secrets
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from popula.errors import PopulaError


class MetricSink(Protocol):
    def log(self, step: int, scalars: dict[str, float]) -> None:
        """One step's numeric fields, nested keys joined by "/" (`heldout/students/S0/pass1`)."""

    def close(self) -> None:
        """Flush and finish; called once, at the run's end, Ctrl-C included."""


class LoggingSettings(Protocol):
    """What the sinks read of the config's `logging` section (popula.config.LoggingSection)."""

    wandb_project: str
    wandb_entity: str | None
    wandb_mode: str | None


@dataclass(frozen=True)
class SinkContext:
    """What a sink opens with: the run directory, the run's name (the directory's), its resolved
    config as a plain dictionary, and the `logging` section."""

    run_dir: Path
    name: str
    config: dict[str, Any]
    settings: LoggingSettings


class TensorBoardSink:
    """Every scalar under RUN_DIR/tensorboard/, the folder made at the first step."""

    def __init__(self, run_dir: Path) -> None:
        self._dir = run_dir / "tensorboard"
        self._writer = None

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self._dir))
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


WANDB_ID = Path("wandb") / "popula-run-id"  # under RUN_DIR: the W&B run a resume goes on logging to


class WandbSink:
    """One Weights & Biases run per run directory: named after it, its config the run's resolved
    config, its files under RUN_DIR/wandb/. The run's id is kept in RUN_DIR/wandb/popula-run-id,
    so `--resume` logs to the same W&B run (online; an offline resume writes a second offline
    folder with the same run id). The mode is `logging.wandb_mode`, else $WANDB_MODE, else online."""

    def __init__(self, ctx: SinkContext) -> None:
        import wandb

        settings = ctx.settings
        mode = settings.wandb_mode or os.environ.get("WANDB_MODE") or "online"
        id_path = ctx.run_dir / WANDB_ID
        if id_path.is_file():
            run_id = id_path.read_text(encoding="utf-8").strip()
        else:
            run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
            id_path.parent.mkdir(parents=True, exist_ok=True)
            id_path.write_text(run_id + "\n", encoding="utf-8")
        try:
            self._run = wandb.init(
                project=settings.wandb_project, entity=settings.wandb_entity, name=ctx.name, id=run_id,
                config=ctx.config, dir=str(ctx.run_dir), mode=mode,
                # an offline or disabled run has nothing to resume (wandb warns); its id is kept all the same
                resume="allow" if mode == "online" else None,
                # the run's own stdout stays untouched (no redirection of the file descriptors)
                settings=wandb.Settings(console="off"),
            )
        except Exception as err:  # noqa: BLE001 - no login, no network, a bad WANDB_* variable: the user's to fix
            raise PopulaError(f"wandb.init ({mode}) failed: {err} (log in with `wandb login`, or set "
                              f"logging.wandb_mode=offline and `wandb sync` RUN_DIR/wandb later)") from None

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self._run.log(scalars, step=step)

    def close(self) -> None:
        self._run.finish()


@dataclass(frozen=True)
class SinkSpec:
    """How to open one sink, and what it needs installed: `module` is imported by `check_sinks`
    before anything loads; `install` is the command its refusal names."""

    create: Callable[[SinkContext], MetricSink]
    module: str | None = None
    install: str = ""


SINKS: dict[str, SinkSpec] = {
    "tensorboard": SinkSpec(lambda ctx: TensorBoardSink(ctx.run_dir), "torch.utils.tensorboard",
                            "pip install tensorboard"),
    "wandb": SinkSpec(WandbSink, "wandb", "pip install 'popula[wandb]'"),
}
DEFAULT_SINKS = ("tensorboard",)


def check_sinks(names: list[str] | tuple[str, ...]) -> None:
    """Refuse (PopulaError, one line) a sink whose module is not installed, naming the install."""
    for name in names:
        spec = SINKS[name]
        if spec.module is None:
            continue
        try:
            importlib.import_module(spec.module)
        except ImportError as err:
            raise PopulaError(f"logging.report_to names {name}, which needs the {spec.module.split('.')[0]} "
                              f"package ({err}): {spec.install}, or drop {name} from logging.report_to") from None


def open_sinks(names: list[str] | tuple[str, ...], ctx: SinkContext) -> list[MetricSink]:
    """The named sinks, opened in order; one that fails to open closes those opened before it."""
    opened: list[MetricSink] = []
    try:
        for name in names:
            opened.append(SINKS[name].create(ctx))
    except BaseException:
        for sink in reversed(opened):
            sink.close()
        raise
    return opened
