"""A checkpoint names the arithmetic that computed it; a resume on other arithmetic says so."""

import torch

from popula.run.arithmetic import fingerprint, resume_note


def test_a_cpu_fingerprint_names_torch_and_its_kernels():
    assert fingerprint("cpu", "float32") == {"torch": torch.__version__,
                                             "kernels": f"cpu {torch.backends.cpu.get_cpu_capability()}",
                                             "dtype": "float32"}


def test_resuming_on_the_same_arithmetic_says_nothing():
    here = fingerprint("cpu", "float32")
    assert resume_note(dict(here), here) is None


def test_a_checkpoint_from_before_records_were_kept_says_nothing():
    assert resume_note(None, fingerprint("cpu", "float32")) is None


def test_other_kernels_get_one_line_naming_both_machines():
    was = {"torch": "2.13.0+cpu", "kernels": "cpu AVX512", "dtype": "float32"}
    now = {"torch": "2.13.0+cpu", "kernels": "cpu AVX2", "dtype": "float32"}
    note = resume_note(was, now)
    assert note is not None and "\n" not in note
    assert "kernels cpu AVX512" in note and "kernels cpu AVX2" in note
    assert "will not repeat" in note


def test_another_dtype_is_other_arithmetic_too():
    note = resume_note(fingerprint("cpu", "float32"), fingerprint("cpu", "bfloat16"))
    assert note is not None and "dtype float32" in note and "dtype bfloat16" in note
