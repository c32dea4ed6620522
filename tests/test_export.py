"""`popula export`: an adapter a user can share. It loads with PEFT in a fresh process on a
copy of its base elsewhere, its config names no path of the machine that trained it, its
files follow the umask (another account can read them), and its model card says what it is."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from popula.adapters.store import AdapterStore
from popula.config import Config
from popula.league import League
from unprivileged import interpreter, preexec

ROOT = Path(__file__).resolve().parent.parent


def trained_run(path: Path, base: Path) -> Path:
    """A run directory as `popula run` leaves it, for what export reads: config, league,
    adapters, and a held-out probe of the best student in metrics.jsonl."""
    path.mkdir()
    (path / "config.yaml").write_text(Config().model_copy(update={"base_model": str(base)}).to_yaml())
    store = AdapterStore(path / "adapters", base)
    league = League()
    for name, role in (("T0", "teacher"), ("S0", "student"), ("S1", "student")):
        store.create(name)
        league.add_member(name, role)
    league.members["S1"].mu += 5  # S1 is the best-rated student
    league.step = 3
    league.save(path / "league.json")
    probe = {"tasks": 300, "samples": 4, "students": {"S1": {"pass1": 0.25, "passk": 0.4}}}
    (path / "metrics.jsonl").write_text(json.dumps({"step": 3, "heldout": probe}) + "\n")
    return path


def test_an_exported_adapter_loads_elsewhere_and_names_no_path_of_this_machine(quick_base, tmp_path):
    run = trained_run(tmp_path / "run", quick_base)
    shared = Path(tempfile.mkdtemp(prefix="popula-export-"))  # pytest's own tmp is private to its user
    try:
        os.chmod(shared, 0o755)
        out = shared / "best"
        old = os.umask(0o022)
        try:
            done = subprocess.run([sys.executable, "-m", "popula", "export", str(run), str(out)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=300)
        finally:
            os.umask(old)
        assert done.returncode == 0, done.stderr
        assert "S1" in done.stdout  # the best-rated student, by default
        config_text = (out / "adapter_config.json").read_text()
        assert json.loads(config_text)["base_model_name_or_path"] == quick_base.name
        assert str(tmp_path) not in config_text and str(Path.home()) not in config_text
        card = (out / "README.md").read_text()
        assert f"base_model: {quick_base.name}" in card and "held-out pass@1 0.250" in card and "steps" in card
        assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}
        assert stat.S_IMODE(out.stat().st_mode) == 0o755

        # another machine: the base under another path, PEFT in a fresh process
        elsewhere = tmp_path / "elsewhere" / quick_base.name
        shutil.copytree(quick_base, elsewhere)
        load = ("import sys; from peft import PeftModel; from transformers import AutoModelForCausalLM; "
                "m = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sys.argv[1]), sys.argv[2]); "
                "print(m.peft_config['default'].r)")
        done = subprocess.run([sys.executable, "-c", load, str(elsewhere), str(out)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.split()[-1] == "8", done.stderr

        # another account reads every file (it needs no more to load it where it has PEFT)
        exe = None
        if preexec() is not None:  # as root: drop to another uid; else this user is the other account already
            try:
                exe = interpreter()
            except pytest.skip.Exception:  # no Python that uid can run here: the modes above must do
                exe = None
        if exe is not None:
            read = ("import json, sys, pathlib; d = pathlib.Path(sys.argv[1]); "
                    "json.loads((d / 'adapter_config.json').read_text()); "
                    "print(sum(len(p.read_bytes()) for p in d.iterdir()))")
            done = subprocess.run([exe, "-I", "-c", read, str(out)], preexec_fn=preexec(),
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and int(done.stdout) > 0, done.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_export_of_an_unknown_member_names_the_known_ones(quick_base, tmp_path):
    run = trained_run(tmp_path / "run", quick_base)
    done = subprocess.run([sys.executable, "-m", "popula", "export", str(run), str(tmp_path / "out"), "--adapter", "S9"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "known: S0, S1, T0" in done.stderr
    assert not (tmp_path / "out").exists()


def test_export_copies_an_adapter_without_loading_torch(quick_base, tmp_path):
    """Exporting copies two files and writes a card: a user sharing an adapter waits for no
    model code (torch, transformers, safetensors' torch reader) to import."""
    run = trained_run(tmp_path / "run", quick_base)
    probe = ("import json, sys\n"
             "from popula.cli import main\n"
             "code = main(['export', sys.argv[1], sys.argv[2]])\n"
             "print(json.dumps([code, sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", probe, str(run), str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [0, []]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", "adapter_config.json",
                                                                    "adapter_model.safetensors"]
