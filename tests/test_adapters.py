"""Specification of the adapter store: PEFT-format versions, run-unique ids, one version per adapter on disk,
and refusal of missing, corrupt or mismatched adapters with errors that name them."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

from conftest import small_llama
from popula.adapters.files import read_adapter
from popula.adapters.store import AdapterStore
from popula.errors import PopulaError
from popula.lora import DEFAULT_TARGET_MODULES, MultiLoRAModel

VOCAB = 80


def make_base(path: Path, hidden: int = 32) -> Path:
    small_llama(VOCAB, hidden=hidden, intermediate=64, heads=4, kv_heads=2).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    return make_base(tmp_path_factory.mktemp("base"))


def trained(store: AdapterStore, name: str, scale: float) -> dict[str, torch.Tensor]:
    """The latest tensors of `name` with B moved off zero, as a learner update would."""
    sd = dict(store.load(store.latest(name)).state_dict)
    g = torch.Generator().manual_seed(int(scale * 100))
    return {k: (torch.randn(v.shape, generator=g) * scale if "lora_B" in k else v) for k, v in sd.items()}


def test_saved_versions_load_unchanged_in_peft_and_give_the_multi_lora_models_logits(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4, alpha=8.0, seed=3)
    store.create("teacher0")
    ref = store.save("teacher0", trained(store, "teacher0", 0.3))
    assert (ref.version, ref.uid) == (1, 2)
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))

    mm = MultiLoRAModel(LlamaForCausalLM.from_pretrained(base_dir), rank=4, alpha=8.0, n_slots=2).eval()
    loaded = store.load(ref)
    mm.load_slot(1, loaded.state_dict, alpha=loaded.alpha)
    with torch.no_grad(), mm.route([1, 1]):
        ours = mm(input_ids=ids).logits
    for path in (ref.path, tmp_path / "adapters" / "teacher0"):  # the version dir and NAME/ (latest)
        peft_model = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_dir), str(path)).eval()
        with torch.no_grad():
            torch.testing.assert_close(peft_model(input_ids=ids).logits, ours, rtol=1e-4, atol=1e-5)
    config = json.loads((ref.path / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0 and set(config["target_modules"]) == set(DEFAULT_TARGET_MODULES)


def test_create_is_peft_initialised_and_seeded_by_store_seed_and_name_only(base_dir, tmp_path):
    a = AdapterStore(tmp_path / "a", base_dir, rank=4, seed=1)
    b = AdapterStore(tmp_path / "b", base_dir, rank=4, seed=1)
    c = AdapterStore(tmp_path / "c", base_dir, rank=4, seed=2)
    sd = {s: {n: s.load(s.create(n)).state_dict for n in ("x", "y")} for s in (a, b, c)}
    key_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    key_b = key_a.replace("lora_A", "lora_B")
    assert torch.equal(sd[a]["x"][key_a], sd[b]["x"][key_a])
    assert not torch.equal(sd[a]["x"][key_a], sd[a]["y"][key_a])
    assert not torch.equal(sd[a]["x"][key_a], sd[c]["x"][key_a])
    assert not sd[a]["x"][key_b].any()  # B starts at zero: a new adapter is the base
    bound = 1 / 32 ** 0.5  # kaiming-uniform(a=sqrt(5)) bound for fan_in 32
    assert 0.5 * bound < sd[a]["x"][key_a].abs().max() <= bound


def test_every_version_gets_a_new_uid_and_a_newer_version_replaces_the_old_on_disk(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    v0 = store.create("s0")
    other = store.create("s1")
    v1 = store.save("s0", trained(store, "s0", 0.1))
    assert v1.uid not in (v0.uid, other.uid) and v1.version == 1 and store.latest("s0") == v1
    assert not v0.path.exists() and v1.path.exists() and other.path.exists()
    assert store.load(v1).state_dict
    for step in range(5):  # disk stays bounded: one version per adapter
        store.save("s0", trained(store, "s0", 0.3 + step))
    assert len(list((tmp_path / "adapters" / "s0").glob("v*"))) == 1


def test_uid_counter_and_latest_versions_survive_reopening_and_leftovers_are_pruned(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    store.create("t0")
    latest = store.save("t0", trained(store, "t0", 0.6))
    old = shutil.copytree(latest.path, latest.path.with_name("v000000"))  # as a crash between two writes leaves it
    reopened = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    assert reopened.latest("t0") == latest
    assert not old.exists()  # stale versions go
    assert reopened.create("t1").uid == latest.uid + 1


def test_retired_adapters_disappear_and_a_returning_name_gets_a_new_uid(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    ref = store.create("weak")
    store.retire("weak")
    assert "weak" not in store.names() and not (tmp_path / "adapters" / "weak").exists()
    again = store.create("weak")
    assert again.uid > ref.uid and again.path.exists() and store.latest("weak") == again


def test_missing_corrupt_and_mismatched_adapters_are_refused_naming_them(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    ref = store.create("victim")
    with pytest.raises(PopulaError, match="'other'.*does not exist"):
        read_adapter(tmp_path / "nowhere", name="other", base_path=base_dir, max_rank=8,
                     target_modules=DEFAULT_TARGET_MODULES)

    rank8 = AdapterStore(tmp_path / "rank8", base_dir, rank=8).create("big")
    with pytest.raises(PopulaError, match="big v0.*field r is 8"):
        store.load(rank8)
    qv = AdapterStore(tmp_path / "qv", base_dir, rank=4, target_modules=["q_proj", "v_proj"]).create("qv")
    with pytest.raises(PopulaError, match="qv v0.*target_modules"):
        store.load(qv)
    other_base = make_base(tmp_path / "other_base", hidden=48)
    foreign = AdapterStore(tmp_path / "foreign", other_base, rank=4).create("foreign")
    with pytest.raises(PopulaError, match="foreign v0.*made for base"):
        store.load(foreign)
    (foreign.path / "adapter_config.json").write_text(
        (foreign.path / "adapter_config.json").read_text().replace(f'"{other_base.name}"', f'"{base_dir.name}"'))
    with pytest.raises(PopulaError, match="foreign v0.*another base"):
        store.load(foreign)  # a lying config: the tensor shapes still give it away

    weights = ref.path / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(PopulaError, match="victim v0.*corrupt"):
        store.load(ref)
    (ref.path / "adapter_config.json").write_text("{not json")
    with pytest.raises(PopulaError, match="victim v0.*not valid JSON"):
        store.load(ref)


def test_save_refuses_tensors_that_would_corrupt_an_adapter(base_dir, tmp_path):
    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    ref = store.create("s")
    sd = dict(store.load(ref).state_dict)
    key = next(k for k in sd if "lora_B" in k)
    with pytest.raises(PopulaError, match="'s'.*NaN"):
        store.save("s", {**sd, key: torch.full_like(sd[key], float("nan"))})
    huge = store.save("s", {**sd, key: torch.full_like(sd[key], 3e38)})  # finite, though their sum is not
    assert torch.equal(store.load(huge).state_dict[key], torch.full_like(sd[key], 3e38))
    ref = store.save("s", sd)
    with pytest.raises(PopulaError, match="'s'.*missing"):
        store.save("s", {k: v for k, v in sd.items() if k != key})
    with pytest.raises(PopulaError, match="name"):
        store.save("../escape", sd)
    assert store.latest("s") == ref


def test_a_background_save_hands_out_its_version_at_once_and_writes_it_in_order(base_dir, tmp_path, monkeypatch):
    """`save(background=True)` returns the next version before its files exist; the writer
    thread writes versions in save order; `load` and `flush` wait for it, and the disk ends
    as a synchronous save leaves it: the latest version only."""
    import popula.adapters.store as store_module

    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    v0 = store.create("s0")
    states = [trained(store, "s0", 0.1 * (k + 1)) for k in range(3)]
    gate = threading.Event()
    write = store_module.write_adapter

    def write_when_let(*args, **kwargs):
        gate.wait(5)
        write(*args, **kwargs)

    monkeypatch.setattr(store_module, "write_adapter", write_when_let)
    refs = [store.save("s0", sd, background=True) for sd in states]
    assert [r.version for r in refs] == [1, 2, 3] and len({r.uid for r in refs} | {v0.uid}) == 4
    assert store.latest("s0") == refs[-1] and not refs[-1].path.exists()  # handed out, not yet written
    gate.set()
    loaded = store.load(refs[-1]).state_dict  # waits for the writer
    assert all(torch.equal(loaded[k], states[-1][k]) for k in states[-1])
    assert [p.name for p in (tmp_path / "adapters" / "s0").glob("v*")] == [refs[-1].path.name]
    assert AdapterStore(tmp_path / "adapters", base_dir, rank=4).latest("s0") == refs[-1]


def test_a_background_save_that_fails_is_raised_by_the_next_flush_and_the_last_written_version_stays(
        base_dir, tmp_path, monkeypatch):
    import popula.adapters.store as store_module

    store = AdapterStore(tmp_path / "adapters", base_dir, rank=4)
    v0 = store.create("s0")
    sd = trained(store, "s0", 0.2)
    key = next(k for k in sd if "lora_B" in k)
    with pytest.raises(PopulaError, match="'s0'.*NaN"):  # the values are checked before the ref is handed out
        store.save("s0", {**sd, key: torch.full_like(sd[key], float("inf"))}, background=True)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module, "write_adapter", full_disk)
    failed = store.save("s0", sd, background=True)
    with pytest.raises(PopulaError, match=r"'s0' v1: cannot write .*No space left"):
        store.flush()
    assert store.latest("s0") == v0 and v0.path.exists() and not failed.path.exists()
    store.flush()  # reported once
    monkeypatch.undo()
    assert store.save("s0", sd, background=True).version == 1
    store.close()
    assert store.load(store.latest("s0")).state_dict
