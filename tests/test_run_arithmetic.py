"""A checkpoint names the arithmetic that computed it; a resume on other arithmetic says so."""

import torch

from popula.run.arithmetic import fingerprint, resume_note


def test_a_cpu_fingerprint_names_torch_and_its_kernels():
    assert fingerprint("cpu") == {"torch": torch.__version__, "kernels": f"cpu {torch.backends.cpu.get_cpu_capability()}"}


def test_resuming_on_the_same_arithmetic_says_nothing():
    here = fingerprint("cpu")
    assert resume_note(dict(here), here) is None


def test_a_checkpoint_from_before_records_were_kept_says_nothing():
    assert resume_note(None, fingerprint("cpu")) is None


def test_other_kernels_get_one_line_naming_both_machines():
    was = {"torch": "2.13.0+cpu", "kernels": "cpu AVX512"}
    now = {"torch": "2.13.0+cpu", "kernels": "cpu AVX2"}
    note = resume_note(was, now)
    assert note is not None and "\n" not in note
    assert "kernels cpu AVX512" in note and "kernels cpu AVX2" in note
    assert "will not repeat" in note
