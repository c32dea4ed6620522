"""The `runtime` section: device and dtype resolved once, at the edge, for engine and learner."""

from __future__ import annotations

import pytest
import torch

from popula.cli import main
from popula.config import load_config
from popula.errors import PopulaError
from popula.runtime import resolve_runtime

NO_GPU = not torch.cuda.is_available()


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_auto_on_a_machine_without_a_gpu_is_cpu_and_float32():
    rt = resolve_runtime("auto", "auto")
    assert (rt.device, rt.dtype) == ("cpu", "float32")
    assert rt.torch_dtype is torch.float32
    cfg = load_config(None).resolved()
    assert (cfg.runtime.device, cfg.runtime.dtype) == ("cpu", "float32")


@pytest.mark.skipif(NO_GPU, reason="needs a GPU")
def test_auto_on_a_gpu_machine_is_the_first_gpu_in_bf16_where_supported():
    rt = resolve_runtime("auto", "auto")
    assert rt.device == "cuda:0"
    assert rt.dtype == ("bfloat16" if torch.cuda.is_bf16_supported() else "float32")


def test_explicit_dtypes_are_kept_and_auto_is_not_applied_to_them():
    assert resolve_runtime("cpu", "bfloat16").dtype == "bfloat16"
    assert resolve_runtime("cpu", "float16").dtype == "float16"


@pytest.mark.parametrize("override, message", [
    ("runtime.dtype=fp8", "runtime.dtype"),
    ("runtime.dtype=float64", "runtime.dtype"),
    ("runtime.device=gpu", "device 'gpu' is not one of auto, cpu, cuda, cuda:N"),
    ("runtime.device=cuda:x", "is not one of auto, cpu, cuda, cuda:N"),
    ("runtime.gpu_memory_utilization=1.5", "runtime.gpu_memory_utilization"),
    ("runtime.max_num_seqs=0", "runtime.max_num_seqs"),
])
def test_bad_runtime_values_are_refused_naming_the_key(override, message):
    # an override is blamed by itself (`--set KEY=VALUE: ...`), not the config file
    with pytest.raises(PopulaError, match=f"--set {override.replace('.', '[.]')}:") as err:
        load_config(None, [override])
    assert message in str(err.value)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_exits_2_with_a_message_before_any_model_loads(device, tmp_path, weightless_base, capsys):
    out = tmp_path / "run"
    code = main(["run", "configs/tiny-cpu.yaml", "--out", str(out), "--set", f"runtime.device={device}",
                 "--set", f"base_model={weightless_base}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"runtime.device: '{device}' asks for a GPU, but torch sees none on this machine" in err
    assert "use runtime.device=cpu or auto" in err
    assert not out.exists()
