"""Adapter store: every adapter version as a PEFT directory, with run-unique ids and refcounts.

Why versions and uids: engines cache adapters by id (vLLM never reloads an id it holds), so
each saved version gets a new directory and a new `uid` from a counter persisted on disk
(DESIGN 5). A version stays on disk while anything holds a reference to it (`acquire` /
`release`), so a generation phase never loses its adapter mid-flight, and stale versions are
deleted as soon as they are released, so disk use stays bounded.

Layout under `root_dir`:
    store.json                          next uid + latest version of every adapter
    NAME/adapter_config.json            the latest version (hard links), as DESIGN 3.3 promises
    NAME/adapter_model.safetensors
    NAME/v000003/adapter_config.json    one directory per live version; AdapterRef.path
    NAME/v000003/adapter_model.safetensors

`read_adapter` validates any PEFT directory against what a base can serve and is also what
the torch engine uses, so "missing, corrupt or mismatched" means the same everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from popula.errors import PopulaError
from popula.lora import DEFAULT_TARGET_MODULES, find_target_linears, fresh_peft_state_dict, peft_key

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
STATE_FILE = "store.json"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# PEFT features the multi-LoRA engines do not implement: an adapter using one is refused.
_UNSERVED = {"use_dora": False, "rank_pattern": {}, "alpha_pattern": {}, "modules_to_save": None,
             "target_parameters": None, "layers_to_transform": None, "bias": "none"}


@dataclass(frozen=True)
class AdapterRef:
    """One saved version of one adapter: a PEFT directory on disk.

    `uid` is unique over the whole run (across names and versions); engines use it as
    the LoRA id, so reloading a name with new weights always means a new id.
    """

    name: str
    version: int
    uid: int
    path: Path


@dataclass(frozen=True)
class LoadedAdapter:
    """A validated adapter: PEFT-key tensors plus what the engine needs to scale them."""

    state_dict: dict[str, torch.Tensor]
    rank: int
    alpha: float
    scaling: float
    target_modules: tuple[str, ...]


def base_identity(base_path: str | os.PathLike) -> str:
    """How a base is named in adapter_config.json: the resolved path when it is local."""
    p = Path(base_path).expanduser()
    return str(p.resolve()) if p.exists() else str(base_path)


def same_base(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two base names mean the same model: the same resolved path, or the same final
    name (a run directory or model cache moved to another machine; a hub id vs its local copy).
    Tensor shapes are checked separately, so a renamed different architecture is still caught."""
    return base_identity(a) == base_identity(b) or Path(str(a)).name == Path(str(b)).name


def meta_model(base_path: str | os.PathLike) -> torch.nn.Module:
    """The base's module tree on the meta device: its layer shapes from config.json, no weights read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(base_path))
    except (OSError, ValueError) as e:
        raise PopulaError(f"base model {base_path}: cannot read its config.json ({e})") from e
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def base_lora_shapes(base_path: str | os.PathLike, target_modules: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Module path -> (in, out) of every LoRA target of the base, read from its config (no weights)."""
    linears = find_target_linears(meta_model(base_path), target_modules)
    return {p: (m.in_features, m.out_features) for p, m in linears.items()}


def write_adapter(directory: Path, state_dict: Mapping[str, torch.Tensor], *, base_path: str | os.PathLike,
                  rank: int, alpha: float, target_modules: Sequence[str]) -> None:
    """Write a PEFT directory (config via peft's own LoraConfig) that PEFT and vLLM load unchanged."""
    from peft import LoraConfig

    directory.mkdir(parents=True, exist_ok=True)
    LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0, bias="none",
               task_type="CAUSAL_LM", base_model_name_or_path=base_identity(base_path)).save_pretrained(str(directory))
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state_dict.items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})


def read_adapter(path: Path, *, name: str, base_path: str | os.PathLike, max_rank: int,
                 target_modules: Sequence[str], exact_rank: int | None = None,
                 exact_targets: bool = False, shapes: Mapping[str, tuple[int, int]] | None = None) -> LoadedAdapter:
    """Load and validate one adapter directory; any problem raises PopulaError naming `name` and `path`.

    Checked: the directory and both files exist and parse; the config is LoRA for this base;
    rank <= max_rank (== exact_rank when given); its target modules are among `target_modules`
    (equal when `exact_targets`); PEFT features the engines cannot serve are off; the tensors
    are finite, complete and (when `shapes` is given) shaped for this base.
    """
    where = f"adapter {name!r} ({path})"
    if not path.is_dir():
        raise PopulaError(f"{where}: directory does not exist")
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise PopulaError(f"{where}: {CONFIG_FILE} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PopulaError(f"{where}: {CONFIG_FILE} is not valid JSON ({e})") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise PopulaError(f"{where}: {CONFIG_FILE} field peft_type must be 'LORA'")
    for key in ("r", "lora_alpha", "target_modules"):
        if key not in config:
            raise PopulaError(f"{where}: {CONFIG_FILE} has no field {key!r}")
    rank, alpha = config["r"], config["lora_alpha"]
    if not isinstance(rank, int) or rank < 1 or rank > max_rank or (exact_rank is not None and rank != exact_rank):
        want = f"== {exact_rank}" if exact_rank is not None else f"<= {max_rank}"
        raise PopulaError(f"{where}: field r is {rank!r}, must be {want}")
    targets = config["target_modules"]
    targets = (targets,) if isinstance(targets, str) else tuple(sorted(targets))
    allowed = set(target_modules)
    if (exact_targets and set(targets) != allowed) or not set(targets) <= allowed:
        raise PopulaError(f"{where}: field target_modules is {list(targets)}, "
                          f"expected {'exactly' if exact_targets else 'a subset of'} {sorted(allowed)}")
    for key, default in _UNSERVED.items():
        value = config.get(key)
        if not (value is None or value == default or (not default and not value)):
            raise PopulaError(f"{where}: field {key}={value!r} is not supported (must be {default!r})")
    declared_base = config.get("base_model_name_or_path")
    if declared_base and not same_base(declared_base, base_path):
        raise PopulaError(f"{where}: made for base {declared_base!r}, not {base_identity(base_path)!r}")
    try:
        state_dict = load_file(str(path / WEIGHTS_FILE))
    except FileNotFoundError:
        raise PopulaError(f"{where}: {WEIGHTS_FILE} is missing") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise PopulaError(f"{where}: {WEIGHTS_FILE} is corrupt ({e})") from None
    _check_tensors(where, state_dict, rank, shapes)
    scaling = alpha / rank ** 0.5 if config.get("use_rslora") else alpha / rank
    return LoadedAdapter(state_dict, rank, float(alpha), float(scaling), targets)


def _check_tensors(where: str, state_dict: Mapping[str, torch.Tensor], rank: int,
                   shapes: Mapping[str, tuple[int, int]] | None) -> None:
    for key, t in state_dict.items():
        if not key.endswith((".lora_A.weight", ".lora_B.weight")):
            raise PopulaError(f"{where}: unexpected tensor {key!r}")
        if not torch.isfinite(t).all():
            raise PopulaError(f"{where}: tensor {key} has NaN or inf values")
    if shapes is None:
        return
    for path, (fan_in, fan_out) in shapes.items():
        for which, shape in (("A", (rank, fan_in)), ("B", (fan_out, rank))):
            key = peft_key(path, which)
            if key in state_dict and tuple(state_dict[key].shape) != shape:
                raise PopulaError(f"{where}: tensor {key} has shape {tuple(state_dict[key].shape)}, "
                                  f"this base needs {shape} (an adapter for another base?)")


class AdapterStore:
    """Creates, versions, loads and garbage-collects the population's adapters (one process owns it).

    Every adapter has the same rank, alpha and target modules (the run's config); `save`
    refuses tensors that do not fit the base, so every version on disk is servable.
    """

    def __init__(self, root_dir: str | os.PathLike, base_path: str | os.PathLike, *, rank: int = 8,
                 alpha: float = 16.0, target_modules: Sequence[str] = DEFAULT_TARGET_MODULES, seed: int = 0) -> None:
        self.root = Path(root_dir)
        self.base_path = base_path
        self.rank, self.alpha, self.seed = rank, float(alpha), seed
        self.target_modules = tuple(sorted(target_modules))
        self.shapes = base_lora_shapes(base_path, self.target_modules)
        self._lock = threading.RLock()
        self._refs: dict[int, int] = {}  # uid -> holders
        self._live: dict[int, AdapterRef] = {}  # uid -> ref, for every version on disk
        self.root.mkdir(parents=True, exist_ok=True)
        self._next_uid, self._latest = self._read_state()
        self._prune_on_open()

    # -- creating and saving -------------------------------------------------------------------

    def create(self, name: str) -> AdapterRef:
        """A new adapter initialised as PEFT does, seeded by (store seed, name); saved as version 0."""
        if name in self._latest:
            raise PopulaError(f"adapter {name!r} already exists in {self.root}")
        digest = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        return self.save(name, fresh_peft_state_dict(self.shapes, self.rank, generator))

    def save(self, name: str, state_dict: Mapping[str, torch.Tensor]) -> AdapterRef:
        """Save `state_dict` (PEFT keys) as the next version of `name` (a new name starts at 0)."""
        if not _NAME.match(name):
            raise PopulaError(f"adapter name {name!r} must match {_NAME.pattern}")
        self._check_state_dict(name, state_dict)
        with self._lock:
            previous = self._latest.get(name)
            # A retired name may come back while an old version is still held: never reuse its number.
            version = 1 + max([-1 if previous is None else previous.version]
                              + [r.version for r in self._live.values() if r.name == name])
            uid = self._next_uid
            final = self.root / name / f"v{version:06d}"
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}.v{version}.", dir=self.root))
            write_adapter(tmp, state_dict, base_path=self.base_path, rank=self.rank, alpha=self.alpha,
                          target_modules=self.target_modules)
            final.parent.mkdir(exist_ok=True)
            if final.exists():  # left by a crash after the rename but before store.json: not referenced
                shutil.rmtree(final)
            os.replace(tmp, final)
            ref = AdapterRef(name=name, version=version, uid=uid, path=final)
            self._next_uid = uid + 1
            self._latest[name] = ref
            self._live[uid] = ref
            self._write_state()
            self._publish_latest(ref)
            if previous is not None:
                self._collect(previous)
            return ref

    # -- reading -----------------------------------------------------------------------------------

    def latest(self, name: str) -> AdapterRef:
        with self._lock:
            if name not in self._latest:
                raise PopulaError(f"no adapter named {name!r} in {self.root} (known: {sorted(self._latest)})")
            return self._latest[name]

    def names(self) -> list[str]:
        return sorted(self._latest)

    def load(self, ref: AdapterRef) -> LoadedAdapter:
        """The validated tensors of one version (PopulaError naming it when missing or mismatched)."""
        return read_adapter(ref.path, name=f"{ref.name} v{ref.version}", base_path=self.base_path,
                            max_rank=self.rank, exact_rank=self.rank, target_modules=self.target_modules,
                            exact_targets=True, shapes=self.shapes)

    def live_versions(self, name: str) -> list[AdapterRef]:
        """Versions of `name` still on disk (the latest, plus any still referenced)."""
        with self._lock:
            return sorted((r for r in self._live.values() if r.name == name), key=lambda r: r.version)

    # -- reference counting ----------------------------------------------------------------------------

    def acquire(self, ref: AdapterRef) -> AdapterRef:
        """Keep `ref`'s files on disk until a matching `release`, even after newer versions are saved."""
        with self._lock:
            if ref.uid not in self._live:
                raise PopulaError(f"adapter {ref.name!r} v{ref.version} (uid {ref.uid}) was already released")
            self._refs[ref.uid] = self._refs.get(ref.uid, 0) + 1
            return ref

    def release(self, ref: AdapterRef) -> None:
        with self._lock:
            count = self._refs.get(ref.uid, 0)
            if count <= 0:
                raise ValueError(f"release of {ref.name} v{ref.version} without a matching acquire")
            if count == 1:
                del self._refs[ref.uid]
            else:
                self._refs[ref.uid] = count - 1
            self._collect(ref)

    @contextmanager
    def pinned(self, refs: Sequence[AdapterRef | None]) -> Iterator[None]:
        """Hold every (non-None) ref for the duration of a generation or training phase."""
        held = [self.acquire(r) for r in dict.fromkeys(r for r in refs if r is not None)]
        try:
            yield
        finally:
            for r in held:
                self.release(r)

    def retire(self, name: str) -> None:
        """Forget `name` (e.g. replaced by evolution); its files go once no one holds them."""
        with self._lock:
            ref = self.latest(name)
            del self._latest[name]
            self._write_state()
            for link in (CONFIG_FILE, WEIGHTS_FILE):
                (self.root / name / link).unlink(missing_ok=True)
            self._collect(ref)

    # -- internals ---------------------------------------------------------------------------------------

    def _check_state_dict(self, name: str, state_dict: Mapping[str, torch.Tensor]) -> None:
        expected = {peft_key(p, w): ((self.rank, i) if w == "A" else (o, self.rank))
                    for p, (i, o) in self.shapes.items() for w in ("A", "B")}
        missing = sorted(set(expected) - set(state_dict))
        extra = sorted(set(state_dict) - set(expected))
        if missing or extra:
            raise PopulaError(f"adapter {name!r}: state dict does not match the store's LoRA layout "
                              f"(missing {missing[:2]}, unexpected {extra[:2]})")
        for key, shape in expected.items():
            t = state_dict[key]
            if tuple(t.shape) != shape:
                raise PopulaError(f"adapter {name!r}: {key} has shape {tuple(t.shape)}, expected {shape}")
            if not torch.isfinite(t).all():
                raise PopulaError(f"adapter {name!r}: {key} has NaN or inf values; refusing to save it")

    def _collect(self, ref: AdapterRef) -> None:
        """Delete `ref`'s directory if it is neither the latest version nor held by anyone."""
        if self._refs.get(ref.uid, 0) or self._latest.get(ref.name) == ref or ref.uid not in self._live:
            return
        del self._live[ref.uid]
        shutil.rmtree(ref.path, ignore_errors=True)
        if ref.name not in self._latest and not any(r.name == ref.name for r in self._live.values()):
            shutil.rmtree(self.root / ref.name, ignore_errors=True)

    def _publish_latest(self, ref: AdapterRef) -> None:
        """Hard-link the latest version's files into NAME/ so PEFT/vLLM can load NAME/ directly."""
        for fname in (CONFIG_FILE, WEIGHTS_FILE):
            tmp = self.root / ref.name / f".{fname}.tmp"
            tmp.unlink(missing_ok=True)
            try:
                os.link(ref.path / fname, tmp)
            except OSError:  # file systems without hard links
                shutil.copyfile(ref.path / fname, tmp)
            os.replace(tmp, self.root / ref.name / fname)

    def _read_state(self) -> tuple[int, dict[str, AdapterRef]]:
        path = self.root / STATE_FILE
        if not path.exists():
            return 1, {}
        try:
            state = json.loads(path.read_text())
            latest = {n: AdapterRef(n, int(v["version"]), int(v["uid"]), self.root / n / f"v{int(v['version']):06d}")
                      for n, v in state["latest"].items()}
            next_uid = int(state["next_uid"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise PopulaError(f"{path}: corrupt adapter store state ({e!r})") from None
        for ref in latest.values():
            self._live[ref.uid] = ref
        return next_uid, latest

    def _write_state(self) -> None:
        state = {"next_uid": self._next_uid,
                 "latest": {n: {"version": r.version, "uid": r.uid} for n, r in sorted(self._latest.items())}}
        tmp = self.root / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.root / STATE_FILE)

    def _prune_on_open(self) -> None:
        """A new process holds no references: drop versions and temp dirs a previous one left behind."""
        for child in self.root.iterdir():
            if not child.is_dir():
                continue
            ours = child.name.startswith(".") and ".v" in child.name or (child / CONFIG_FILE).exists() \
                or any(child.glob("v[0-9]*"))
            if ours and child.name not in self._latest:
                shutil.rmtree(child, ignore_errors=True)
        for name, ref in self._latest.items():
            for vdir in (self.root / name).glob("v[0-9]*"):
                if vdir.is_dir() and vdir != ref.path:
                    shutil.rmtree(vdir, ignore_errors=True)
