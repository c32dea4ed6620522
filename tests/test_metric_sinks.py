"""The metric sinks beside metrics.jsonl (`logging.report_to`): named once in the config, refused in
one line when unknown or not installed, and fed the same scalars every step. The Weights & Biases
sink runs for real in offline mode (no network, every W&B folder under tmp), and a resumed run
logs to the same W&B run id."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from popula.cli import main
from popula.config import Config, load_config
from popula.errors import PopulaError
from popula.metric_sinks import SINKS, WANDB_ID, SinkContext, check_sinks, open_sinks
from popula.run.metrics import MetricsLog, read_metrics
from tests.test_run_e2e import args as run_args


class Recorder:
    def __init__(self, fail_on_close: bool = False) -> None:
        self.logged: list[tuple[int, dict]] = []
        self.closed = False
        self.fail_on_close = fail_on_close

    def log(self, step, scalars):
        self.logged.append((step, scalars))

    def close(self):
        self.closed = True
        if self.fail_on_close:
            raise RuntimeError("sink broke")


# -- the config ---------------------------------------------------------------------------------------


def test_tensorboard_is_the_default_and_an_empty_list_is_metrics_jsonl_alone():
    assert Config().logging.report_to == ["tensorboard"]
    assert load_config(None, ["logging.report_to=[]"]).logging.report_to == []
    both = load_config(None, ["logging.report_to=[tensorboard, wandb]", "logging.wandb_mode=offline"])
    assert both.logging.report_to == ["tensorboard", "wandb"] and both.logging.wandb_mode == "offline"


@pytest.mark.parametrize("value, says", [
    ("[tensorboard, mlflow]", "unknown metric sinks ['mlflow']; expected some of tensorboard, wandb"),
    ("[wandb, wandb]", "wandb named twice"),
])
def test_an_unknown_or_repeated_sink_is_refused_in_one_line_naming_the_override(value, says):
    with pytest.raises(PopulaError) as err:
        load_config(None, [f"logging.report_to={value}"])
    assert str(err.value).startswith(f"--set logging.report_to={value}: logging.report_to:")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_every_sink_names_what_installs_it():
    assert {"tensorboard", "wandb"} <= set(SINKS)
    assert all(spec.module is None or spec.install.startswith("pip install") for spec in SINKS.values())


# -- wandb not installed ------------------------------------------------------------------------------


def test_wandb_asked_for_and_not_installed_is_one_line_before_anything_loads(tmp_path, weightless_base, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    with pytest.raises(PopulaError, match=r"pip install 'popula\[wandb\]'"):
        check_sinks(["tensorboard", "wandb"])
    check_sinks(["tensorboard"])  # the others are untouched
    out = tmp_path / "run"
    code = main(["run", "configs/tiny-cpu.yaml", "--out", str(out), "--set=logging.report_to=[tensorboard,wandb]",
                 f"--set=base_model={weightless_base}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "logging.report_to names wandb" in err[0] and "pip install 'popula[wandb]'" in err[0]
    assert not out.exists()


# -- what the sinks get -------------------------------------------------------------------------------


def test_every_sink_gets_the_numeric_fields_flattened_and_is_closed_even_when_one_fails(tmp_path):
    first, second = Recorder(fail_on_close=True), Recorder()
    log = MetricsLog(tmp_path, [first, second])
    log.write({"step": 3, "solve_rate": 0.5, "tokens": 7, "evolved": [], "ok": True, "note": "x",
               "heldout": {"students": {"S0": {"pass1": 0.25}}}, "missing": None})
    assert first.logged == second.logged == [(3, {"solve_rate": 0.5, "tokens": 7,
                                                  "heldout/students/S0/pass1": 0.25})]
    with pytest.raises(RuntimeError, match="sink broke"):
        log.close()
    assert first.closed and second.closed
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [3]


def test_no_sinks_writes_metrics_jsonl_alone(tmp_path):
    log = MetricsLog(tmp_path, open_sinks([], SinkContext(tmp_path, "r", {}, Config().logging)))
    log.write({"step": 1, "solve_rate": 0.5})
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


# -- wandb, offline -----------------------------------------------------------------------------------


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb, offline, with every folder of its own under tmp: nothing reaches the network or ~."""
    wandb = pytest.importorskip("wandb")
    for var in ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var, folder in (("WANDB_DIR", "dir"), ("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"),
                        ("WANDB_DATA_DIR", "data")):
        (tmp_path / "wandb-home" / folder).mkdir(parents=True)
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / folder))
    yield wandb
    wandb.teardown()


def offline_runs(run_dir: Path) -> list[dict]:
    """Each offline W&B run under RUN_DIR/wandb/, oldest first, read back with wandb's own reader:
    its id, project, name, config and the history rows it logged. `run.finish()` may return before
    wandb's service process has written the file (seen under load), so the service is torn down
    first: teardown waits for every record to be written."""
    import wandb
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    wandb.teardown()

    runs = []
    for folder in sorted((run_dir / "wandb").glob("offline-run-*")):
        (path,) = folder.glob("run-*.wandb")
        store = datastore.DataStore()
        store.open_for_scan(str(path))
        run: dict = {"history": []}
        while (data := store.scan_data()) is not None:
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.update(id=record.run.run_id, project=record.run.project, name=record.run.display_name,
                           config={u.key: json.loads(u.value_json) for u in record.run.config.update})
            elif kind == "history":
                run["history"].append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                       for item in record.history.item})
        runs.append(run)
    return runs


def test_the_wandb_sink_logs_offline_and_a_reopened_run_keeps_its_id(offline_wandb, tmp_path):
    cfg = load_config(None, ["logging.report_to=[wandb]", "logging.wandb_project=popula-tests"])
    ctx = SinkContext(tmp_path, "sinks", cfg.model_dump(mode="json"), cfg.logging)
    for step in (1, 2):  # a run, then its resume: each opens the sink anew
        (sink,) = open_sinks(["wandb"], ctx)
        sink.log(step, {"solve_rate": step / 4, "heldout/pass1": 0.5})
        sink.close()
    run_id = (tmp_path / WANDB_ID).read_text().strip()
    first, second = offline_runs(tmp_path)
    assert first["id"] == second["id"] == run_id
    assert (first["project"], first["name"]) == ("popula-tests", "sinks")
    assert first["config"]["logging"]["report_to"] == ["wandb"] and first["config"]["seed"] == 0
    assert [(h["_step"], h["solve_rate"], h["heldout/pass1"]) for h in first["history"] + second["history"]] \
        == [(1, 0.25, 0.5), (2, 0.5, 0.5)]


@pytest.mark.slow
def test_a_run_reports_to_wandb_offline_and_its_resume_logs_to_the_same_run(offline_wandb, quick_base, tmp_path):
    out = tmp_path / "run"
    sinks = "--set=logging.report_to=[tensorboard,wandb]"
    assert main(run_args(quick_base, out, 1, sinks)) == 0
    assert main(run_args(quick_base, out, 2, sinks, "--resume")) == 0
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))  # TensorBoard still gets them
    first, second = offline_runs(out)
    assert first["id"] == second["id"] == (out / WANDB_ID).read_text().strip()
    assert first["name"] == "run" and first["config"]["run"]["steps"] == 1 and second["config"]["run"]["steps"] == 2
    logged = first["history"] + second["history"]
    assert [h["_step"] for h in logged] == [1, 2]
    for row, history in zip(rows, logged):
        for key in ("solve_rate", "valid_rate", "wall_s", "tokens_generated"):
            if row.get(key) is not None:
                assert history[key] == pytest.approx(row[key]), key
