"""Adapter store: every adapter version as a PEFT directory, with run-unique ids.

Why versions and uids: engines cache adapters by id (vLLM never reloads an id it holds), so
each saved version gets a new directory and a new `uid` from a counter persisted on disk
(docs/design.md § Pitfalls). Only the latest version of each adapter is kept: saving a new one deletes the
one before, so disk use stays bounded.

Layout under `root_dir`:
    store.json                          next uid + latest version of every adapter
    NAME/adapter_config.json            the latest version (hard links), as docs/design.md § Run directory promises
    NAME/adapter_model.safetensors
    NAME/v000003/adapter_config.json    one directory per live version; AdapterRef.path
    NAME/v000003/adapter_model.safetensors
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Sequence

import torch

from popula.adapters.files import LoadedAdapter, base_lora_shapes, read_adapter, write_adapter
from popula.adapters.layout import CONFIG_FILE, STATE_FILE, WEIGHTS_FILE
from popula.adapters.ref import AdapterRef
from popula.errors import PopulaError
from popula.lora import DEFAULT_TARGET_MODULES, fresh_peft_state_dict, peft_key

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


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
        self._live: dict[int, AdapterRef] = {}  # uid -> ref, for every version on disk
        self._pending: dict[str, AdapterRef] = {}  # name -> newest version handed out, files not yet written
        self._writer: ThreadPoolExecutor | None = None  # background saves, one at a time, in order
        self._writes: list[Future] = []
        self.root.mkdir(parents=True, exist_ok=True)
        self._next_uid, self._latest = self._read_state()
        self._prune_on_open()

    # -- creating and saving -------------------------------------------------------------------

    def create(self, name: str) -> AdapterRef:
        """A new adapter initialised as PEFT does, seeded by (store seed, name); saved as version 0."""
        if name in self.names():
            raise PopulaError(f"adapter {name!r} already exists in {self.root}")
        digest = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        return self.save(name, fresh_peft_state_dict(self.shapes, self.rank, generator))

    def save(self, name: str, state_dict: Mapping[str, torch.Tensor], *, background: bool = False) -> AdapterRef:
        """Save `state_dict` (PEFT keys) as the next version of `name` (a new name starts at 0).

        The tensors are checked (layout, finite values) before anything else, in every case.
        `background`: return the new version's ref at once and write its files on the store's
        one writer thread, in save order; until `flush` returns they may not exist yet. For a
        caller whose engine serves the learner's own tensors and reads no file (`popula run`
        with the torch engine), this takes the writing off the step. `load`, `retire`,
        `flush` and `close` wait for the writer; a write that failed is raised by the first of them.
        """
        if not _NAME.match(name):
            raise PopulaError(f"adapter name {name!r} must match {_NAME.pattern}")
        self._check_state_dict(name, state_dict)
        if not background:
            self.flush()
            return self._write(self._reserve(name), state_dict)
        ref = self._reserve(name)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="adapter-writer")
        self._writes.append(self._writer.submit(self._write, ref, state_dict))
        return ref

    def flush(self) -> None:
        """Wait until every background save is on disk; raise the first that failed (PopulaError)."""
        writes, self._writes = self._writes, []
        errors = [w.exception() for w in writes]
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed

    def close(self) -> None:
        """Flush the background saves and stop the writer thread."""
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown()
                self._writer = None

    def _reserve(self, name: str) -> AdapterRef:
        """The next version of `name` and a new uid, handed out before its files exist."""
        with self._lock:
            previous = self._pending.get(name) or self._latest.get(name)
            version = 0 if previous is None else previous.version + 1
            ref = AdapterRef(name=name, version=version, uid=self._next_uid, path=self.root / name / f"v{version:06d}")
            self._next_uid += 1
            self._pending[name] = ref
            return ref

    def _write(self, ref: AdapterRef, state_dict: Mapping[str, torch.Tensor]) -> AdapterRef:
        """Write `ref`'s directory (a temp dir renamed into place), then make it the latest version."""
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{ref.name}.v{ref.version}.", dir=self.root))
            write_adapter(tmp, state_dict, base_path=self.base_path, rank=self.rank, alpha=self.alpha,
                          target_modules=self.target_modules)  # and mkdtemp's 0700 follows the umask
            ref.path.parent.mkdir(exist_ok=True)
            if ref.path.exists():  # left by a crash after the rename but before store.json: not referenced
                shutil.rmtree(ref.path)
            os.replace(tmp, ref.path)
        except BaseException as e:
            with self._lock:  # the version never was: `latest` goes back to the one on disk
                if self._pending.get(ref.name) == ref:
                    del self._pending[ref.name]
            if isinstance(e, OSError):
                raise PopulaError(f"adapter {ref.name!r} v{ref.version}: cannot write {ref.path} ({e})") from e
            raise
        with self._lock:
            previous = self._latest.get(ref.name)
            self._latest[ref.name] = ref
            self._live[ref.uid] = ref
            if self._pending.get(ref.name) == ref:
                del self._pending[ref.name]
            self._write_state()
            self._publish_latest(ref)
            if previous is not None:
                self._collect(previous)
        return ref

    # -- reading -----------------------------------------------------------------------------------

    def latest(self, name: str) -> AdapterRef:
        """The newest version of `name`, a background save's included (its files may be on their way)."""
        with self._lock:
            ref = self._pending.get(name) or self._latest.get(name)
            if ref is None:
                raise PopulaError(f"no adapter named {name!r} in {self.root} (known: {self.names()})")
            return ref

    def names(self) -> list[str]:
        with self._lock:
            return sorted(set(self._latest) | set(self._pending))

    def load(self, ref: AdapterRef) -> LoadedAdapter:
        """The validated tensors of one version (PopulaError naming it when missing or mismatched)."""
        self.flush()
        return read_adapter(ref.path, name=f"{ref.name} v{ref.version}", base_path=self.base_path,
                            max_rank=self.rank, exact_rank=self.rank, target_modules=self.target_modules,
                            exact_targets=True, shapes=self.shapes)

    def retire(self, name: str) -> None:
        """Forget `name` (e.g. replaced by evolution) and delete its files."""
        self.flush()
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
            if tuple(state_dict[key].shape) != shape:
                raise PopulaError(f"adapter {name!r}: {key} has shape {tuple(state_dict[key].shape)}, expected {shape}")
        # One sum per tensor and one check of them all (one device sync, no mask per tensor): a sum
        # is finite when every value is, or overflowed, which the exact look below tells apart.
        if bool(torch.isfinite(torch.stack([state_dict[key].sum() for key in expected])).all()):
            return
        for key in expected:
            if not torch.isfinite(state_dict[key]).all():
                raise PopulaError(f"adapter {name!r}: {key} has NaN or inf values; refusing to save it")

    def _collect(self, ref: AdapterRef) -> None:
        """Delete `ref`'s directory unless it is the latest version (or already gone)."""
        if self._latest.get(ref.name) == ref or ref.uid not in self._live:
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
        """Drop versions and temp dirs a previous process left behind (a crash between two writes)."""
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
