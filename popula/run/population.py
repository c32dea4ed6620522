"""`popula run`: a whole population self-play run on one machine, resumable.

Data flow of one step (docs/design.md § What the sources say, § Architecture):

    league.match ─► SelfPlay.play (engine + sandbox) ─► learner.step ─► store.save
         ▲                                                                  │
         └──── league.record_match / end_step ◄── evolution every K steps ◄─┘

and what it writes (docs/design.md § Run directory): config.yaml, metrics.jsonl, league.json, adapters/,
tasks.jsonl, checkpoints/. Everything a resume needs is in the newest checkpoint;
files outside it (metrics, task log) are cut back to the checkpoint's step on resume.
"""

from __future__ import annotations

import gc
import io
import json
import pickle
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evolution import make_child, plan_replacements
from popula.adapters import AdapterRef
from popula.adapters.files import base_lora_shapes
from popula.adapters.store import AdapterStore
from popula.config import Config
from popula.errors import PopulaError
from popula.eval.heldout import HeldoutProbe, TaskProbe
from popula.league import League, LeagueConfig, Role
from popula.learner import Rollout
from popula.learner.schedule import learning_rate
from popula.metric_sinks import SinkContext, check_sinks, open_sinks
from popula.model.base import resolve_base_model
from popula.run import arithmetic
from popula.run.buffer import SEED_TEACHER, TaskBuffer
from popula.run.checkpoint import Checkpoints
from popula.run.early_rewards import record_early_rewards
from popula.run.metrics import MetricsLog, summary_line
from popula.run.parts.builders import context_of
from popula.run.parts.workers import Workers, build_workers, reserve_workers
from popula.run.ratchet import DepthRatchet
from popula.run.rundir import GracefulStop, check_run_dir, prepare_run_dir, uninterruptible
from popula.run.selfplay import PlaySettings, SelfPlay, StepGame, match_results, teacher_group
from popula.run.step_metrics import step_row
from popula.seeds import SEED_TASKS, derive_seed
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import prompt_format, stop_token_ids


@dataclass
class Roster:
    """Which adapter each alive league member trains.

    In a population every member is its own adapter; in the single-agent baseline the
    one teacher and the one student are two league entries of the same adapter.
    """

    adapter_of: dict[str, str]

    @property
    def adapters(self) -> list[str]:
        return sorted(set(self.adapter_of.values()))


@dataclass(frozen=True)
class Seat:
    """A member the league starts with: its name, its role (stated, never read from the name)
    and the adapter it trains."""

    member: str
    role: Role
    adapter: str


def starting_seats(cfg: Config) -> list[Seat]:
    """The league's first members, teachers first: T0.. and S0.. each training its own adapter,
    or in the single-agent baseline one teacher and one student sharing adapter A0."""
    if cfg.population.single_agent:
        return [Seat("T0", "teacher", "A0"), Seat("S0", "student", "A0")]
    p = cfg.population
    return ([Seat(f"T{i}", "teacher", f"T{i}") for i in range(p.teachers)]
            + [Seat(f"S{i}", "student", f"S{i}") for i in range(p.students)])


@dataclass(frozen=True)
class Played:
    """A step's play, before anything learns from it."""

    step: int
    matches: list[Any]
    game: StepGame
    start: float  # perf_counter at the step's start
    play_s: float


class PopulationRun:
    """Owns every component of a run; `train()` runs steps until done or stopped."""

    def __init__(self, cfg: Config, run_dir: Path, *, resume: bool = False, resume_step: int | None = None) -> None:
        # A directory that cannot take the run is refused before anything loads or is waited for.
        check_run_dir(run_dir, resume)
        check_sinks(cfg.logging.report_to)  # a sink asked for and not installed: refused before anything loads
        self.resume_step = resume_step  # None: the newest checkpoint
        # The device and dtype this machine gives `runtime` (auto -> cpu/float32 without a GPU) are
        # decided before anything loads, and written to config.yaml as resolved. A Ray run's
        # devices are its actors' (ray.engine_gpus / learner_gpus), not the driver's.
        if not cfg.ray.enabled:
            cfg = cfg.resolved()
        self.cfg = cfg
        self.run_dir = run_dir
        # What computes this run's last bits, kept in each checkpoint (a Ray run's are its actors').
        self.arithmetic = None if cfg.ray.enabled else arithmetic.fingerprint(cfg.runtime.device, cfg.runtime.dtype)
        self.base_path = resolve_base_model(cfg.base_model)
        # Checked before the run directory is touched: a refused config leaves nothing behind.
        shapes = base_lora_shapes(self.base_path, cfg.lora.target_modules)
        smallest = min(min(shape) for shape in shapes.values())
        if cfg.lora.rank > smallest:
            raise PopulaError(f"lora.rank={cfg.lora.rank} is above the smallest dimension ({smallest}) of the "
                              f"target modules of {cfg.base_model}: a LoRA cannot have a higher rank than its layer")
        # Where the workers run is settled before the directory is touched too: a Ray cluster
        # that cannot place the actors refuses the run here (exit 2), naming asks and resources.
        self.reservation = reserve_workers(cfg)
        self.workers: Workers | None = None  # built by _open; None only while a failed start unwinds
        self.metrics: MetricsLog | None = None  # likewise
        try:
            # Held until close(): no second process may write this directory while this run lives.
            self.lock = prepare_run_dir(run_dir, cfg, resume)
        except BaseException:
            if self.reservation is not None:
                self.reservation.release()
            raise
        try:
            self._open(resume)
        except BaseException:
            # A run that fails to start releases what it started (Ray actors, sandbox workers) and the lock.
            if self.workers is not None:
                self.workers.close()
            elif self.reservation is not None:
                self.reservation.release()
            if self.metrics is not None:
                self.metrics.close()
            self.lock.release()
            raise

    def _open(self, resume: bool) -> None:
        from transformers import AutoTokenizer

        cfg, run_dir = self.cfg, self.run_dir
        # first: a sink that cannot open (wandb not logged in) refuses the run before the workers load the model
        self.metrics = MetricsLog(run_dir, open_sinks(cfg.logging.report_to, SinkContext(
            run_dir, run_dir.resolve().name, cfg.model_dump(mode="json"), cfg.logging)))
        _seed_everything(cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.base_path))
        self.store = AdapterStore(run_dir / "adapters", self.base_path, rank=cfg.lora.rank, alpha=cfg.lora.alpha,
                                  target_modules=cfg.lora.target_modules, seed=cfg.seed)
        self.checkpoints = Checkpoints(run_dir / "checkpoints", keep=cfg.run.keep_checkpoints)
        t = cfg.tasks
        self.ratchet = (DepthRatchet(t.ratchet_step, t.ratchet_floor, t.ratchet_ceiling)
                        if t.reference_weighting == "ratchet" else None)
        self.buffer = TaskBuffer(run_dir / "tasks.jsonl", t.buffer_size, t.reference_weighting,
                                 0.0 if self.ratchet else t.frontier_tilt,  # a ratchet's tilt starts at 0
                                 t.ratchet_from if self.ratchet else "hardness", t.unsolved_reference_weight)
        self.rng = np.random.default_rng(cfg.seed)
        self.evolution = cfg.evolution.build(cfg.seed) if cfg.evolution.enabled and not cfg.population.single_agent else None
        self.workers = build_workers(cfg, self.base_path, self.reservation)
        self.engine, self.sandbox, self.learner = self.workers.engine, self.workers.sandbox, self.workers.learner
        self.play = SelfPlay(self.engine, self.sandbox, prompt_format(self.tokenizer), self.tokenizer,
                             stop_token_ids(self.tokenizer),
                             PlaySettings.from_config(cfg, context=context_of(cfg, self.base_path)))
        self.heldout = (HeldoutProbe(cfg.heldout, cfg.run.steps, self.engine, self.tokenizer, self.sandbox,
                                     cfg.sandbox.workers) if cfg.heldout.every > 0 else None)
        # evolution.fitness: probe ranks students by pass@1 on a set of their own (a seed apart from the trend's)
        self.selection = (TaskProbe(cfg.evolution.probe, self.engine, self.tokenizer, self.sandbox, cfg.sandbox.workers)
                          if self.evolution is not None and cfg.evolution.fitness == "probe" else None)
        if resume:
            self.step = self._restore()
        else:
            self.step = 0
            self._start()

    # -- start and resume ------------------------------------------------------------------------

    def _start(self) -> None:
        cfg = self.cfg
        self.league = League(LeagueConfig(**cfg.league.model_dump()))
        seats = starting_seats(cfg)
        self.roster = Roster({seat.member: seat.adapter for seat in seats})
        for seat in seats:
            self.league.add_member(seat.member, seat.role)
        for adapter in self.roster.adapters:
            ref = self.store.create(adapter)
            self.learner.add_adapter(adapter, self.store.load(ref).state_dict)
            self.workers.bind(ref, adapter)
        # The buffer starts from generated seed tasks; a seed offset keeps them apart from
        # the held-out sets `popula tasks` writes.
        seeds = generate_tasks(cfg.tasks.seed_tasks, seed=derive_seed(cfg.seed, SEED_TASKS), types=cfg.tasks.types,
                               namespace="seed", workers=cfg.sandbox.workers)
        self.buffer.add(seeds, step=0, teacher=SEED_TEACHER, rhos=[None] * len(seeds))
        self.league.save(self.run_dir / "league.json")
        self._checkpoint()

    def _checkpoint(self) -> None:
        self.store.flush()  # a checkpoint's step has every adapter version it published on disk

        def write(d: Path) -> None:
            # serialised in memory, then written as plain bytes: a full disk is then an OSError the
            # checkpoint reports (torch.save onto a path raises a RuntimeError instead)
            learner = io.BytesIO()
            torch.save(self.learner.state_dict(), learner)
            (d / "learner.pt").write_bytes(learner.getbuffer())
            self.league.save(d / "league.json")
            state = {
                "step": self.step,
                "roster": self.roster.adapter_of,
            }
            if self.ratchet is not None:
                state["reference_tilt"] = self.buffer.tilt
            if self.arithmetic is not None:
                state["arithmetic"] = self.arithmetic
            (d / "state.json").write_text(json.dumps(state, indent=1))
            (d / "rng.pkl").write_bytes(pickle.dumps(self._rng_state()))

        self.checkpoints.save(self.step, write)

    def _restore(self) -> int:
        path = self.checkpoints.load(self.resume_step)
        state = json.loads((path / "state.json").read_text())
        step = int(state["step"])
        later = self.checkpoints.discard_after(step)
        if later:
            print(f"popula run: resuming from step {step} replaces the checkpoints of steps {', '.join(map(str, later))}")
        self.roster = Roster(state["roster"])
        if self.ratchet is not None:
            self.buffer.tilt = float(state["reference_tilt"])
        self.league = League.load(path / "league.json")
        self.league.save(self.run_dir / "league.json")
        try:
            self.learner.load_state_dict(torch.load(path / "learner.pt", weights_only=False))
            rng = pickle.loads((path / "rng.pkl").read_bytes())
        except Exception as err:  # noqa: BLE001 - any unreadable payload is a corrupt checkpoint
            raise PopulaError(f"{path}: checkpoint cannot be restored ({err})") from err
        self._set_rng_state(rng)
        # New versions carry the checkpoint's weights, so nothing written after it is served.
        for adapter in self.roster.adapters:
            self._publish(adapter)
        self.buffer.restore(up_to_step=step)
        self.metrics.truncate_after(step)
        print(f"popula run: resumed {self.run_dir} at step {step}")
        if self.arithmetic is not None:
            note = arithmetic.resume_note(state.get("arithmetic"), self.arithmetic)
            if note:
                print(note)
        return step

    # -- the loop --------------------------------------------------------------------------------

    def train(self) -> bool:
        """Run steps until `run.steps` or Ctrl-C, then checkpoint the last finished step; True
        when the run reached `run.steps`, False when Ctrl-C stopped it first.

        A step that raises is not checkpointed: its state is half-updated, so the newest
        checkpoint stays the last good one and `--resume` replays the failed step. A second
        Ctrl-C during a step's play abandons the step: play changes only the random generators,
        which are set back, so the checkpoint written then is the step before it, exactly.
        """
        # What exists now (the model, the engines, the tokenizer: some 400,000 objects on the
        # tiny base) lives as long as the run: kept out of the collector, a full collection
        # no longer walks them (a 0.2 s pause in some step on the tiny base). They are handed
        # back when the run ends: frozen at exit, they are never freed, and extension modules
        # that count their objects (triton's nanobind) print hundreds of "leaked" lines.
        gc.freeze()
        with GracefulStop() as stop:
            try:
                while self.step < self.cfg.run.steps and not stop.requested:
                    generators = self._rng_state()
                    try:
                        with stop.abandonable():  # the only part a second Ctrl-C cuts short
                            played = self._play(self.step + 1)
                    except KeyboardInterrupt:
                        self._set_rng_state(generators)
                        break
                    row = self._learn_from(played)
                    self.step += 1
                    self.metrics.write(row)
                    print(summary_line(row), flush=True)
                    if self.step % self.cfg.run.checkpoint_every == 0:
                        self._checkpoint()
                if self.checkpoints.latest_step() != self.step:
                    self._checkpoint()
            finally:
                self.close()
                gc.unfreeze()
        return self.step >= self.cfg.run.steps

    def _rng_state(self) -> dict[str, Any]:
        return {"numpy": self.rng.bit_generator.state, "python": random.getstate(), "torch": torch.get_rng_state()}

    def _set_rng_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["numpy"]
        random.setstate(state["python"])
        torch.set_rng_state(state["torch"])

    def _play(self, step: int) -> Played:
        """The first half of a step: match, propose, judge, answer, judge. It changes nothing of
        the run's state but the random generators, so a step stopped here can be abandoned."""
        start = time.perf_counter()
        matches = self.league.match(self.rng)
        refs: dict[str, AdapterRef] = {m: self.store.latest(a) for m, a in self.roster.adapter_of.items()}
        t0 = time.perf_counter()
        game = self.play.play(step, matches, refs, self.buffer, self.rng, self.cfg.seed)
        return Played(step, matches, game, start, time.perf_counter() - t0)

    def _learn_from(self, played: Played) -> dict[str, Any]:
        """The second half of a step: update every adapter, rate the matches, evolve, measure."""
        step, matches, game, start, play_s = played.step, played.matches, played.game, played.start, played.play_s
        t0 = time.perf_counter()
        lr = learning_rate(self.cfg.learner, step, self.cfg.run.steps)
        learn = self.learner.step(self._training_samples(game), lr=lr)
        self.store.flush()  # the last step's background saves: a failed write stops the run here
        for adapter in self.roster.adapters:
            self._publish(adapter)
        update_s = time.perf_counter() - t0

        records = [self.league.record_match(step, match.teacher, match.student, match_results(game, match))
                   for match in matches]
        self.league.end_step(step)
        retention = ([] if self.evolution is None
                     else record_early_rewards(self.league, game, step, self.evolution.min_age))
        self._add_to_buffer(step, game)
        t0 = time.perf_counter()
        selection = self._selection_scores(step)
        selection_s = time.perf_counter() - t0
        evolved = self._evolve(step, selection)
        self.league.save(self.run_dir / "league.json")
        phases = {"play_s": play_s, "verify_s": game.verify_s, "update_s": update_s}
        if selection is not None:
            phases["selection_s"] = selection_s
        t0 = time.perf_counter()
        heldout = self._probe_heldout(step)
        if heldout is not None:
            phases["heldout_s"] = time.perf_counter() - t0
        row = step_row(step, game, learn, evolved, wall_s=time.perf_counter() - start, phases=phases,
                       matches=records, retention=retention, heldout=heldout)
        row["lr"] = lr
        if selection is not None:
            row["selection"] = {"tasks": len(self.selection.tasks), "samples": self.selection.settings.samples,
                                "students": selection}
        if self.ratchet is not None:
            row["reference_tilt"] = self.buffer.tilt  # the tilt this step's references were drawn with
            self.buffer.tilt = self.ratchet.next_tilt(self.buffer.tilt, row["valid_rate"])
        return row

    def _probe_heldout(self, step: int) -> dict[str, Any] | None:
        """The live students (after this step's update and evolution) on the held-out set, when due."""
        if self.heldout is None or not self.heldout.due(step):
            return None
        self.store.flush()  # an engine that loads a version from its files finds them written
        students = {m.name: self.store.latest(self.roster.adapter_of[m.name]) for m in self.league.alive("student")}
        return self.heldout.score(students, best=self.league.ranked("student")[0].name)

    def _publish(self, adapter: str) -> AdapterRef:
        """Save the learner's weights of `adapter` as a new version; an engine sharing the
        learner's model serves that version from the learner's own tensors (no file read), so
        its files are written in the background, during the next play (`AdapterStore.save`)."""
        ref = self.store.save(adapter, self.learner.adapter_state(adapter), background=self.workers.sharing is not None)
        self.workers.bind(ref, adapter)
        return ref

    def _training_samples(self, game: StepGame) -> list[Any]:
        g = self.cfg.generation
        by_lines = self.cfg.learner.teacher_strata == "lines"
        samples = []
        for i, p in enumerate(game.proposals):
            samples.append(Rollout(adapter=self.roster.adapter_of[p.teacher], role="teacher", task_type=p.task_type,
                                   group=teacher_group(p, by_lines=by_lines), prompt_ids=p.prompt_ids,
                                   completion_ids=p.sample.token_ids, sampler_logprobs=p.sample.logprobs,
                                   adapter_version=p.adapter.version, reward=p.reward,
                                   temperature=g.proposal_temperature))
        for a, shown in [(a, False) for a in game.attempts] + [(a, True) for a in game.demonstrations]:
            p = game.proposals[a.proposal]
            samples.append(Rollout(adapter=self.roster.adapter_of[a.student], role="student", task_type=p.task_type,
                                   group=f"student:{a.proposal}:{a.student}", prompt_ids=a.prompt_ids,
                                   completion_ids=a.sample.token_ids, sampler_logprobs=a.sample.logprobs,
                                   adapter_version=a.adapter.version, reward=a.reward, temperature=g.temperature,
                                   demonstration=shown))
        return samples

    def _add_to_buffer(self, step: int, game: StepGame) -> None:
        by_teacher: dict[str, list] = {}
        for p in game.proposals:
            if p.valid:
                by_teacher.setdefault(p.teacher, []).append(p)
        for teacher, props in by_teacher.items():
            rhos = [float(np.mean(list(p.rhos.values()))) if p.rhos else None for p in props]
            self.buffer.add([p.task for p in props], step=step, teacher=teacher, rhos=rhos)

    def _selection_scores(self, step: int) -> dict[str, dict[str, float]] | None:
        """The live students on evolution's probe set, at an evolution step where one of them may
        be replaced (`evolution.fitness: probe`); None otherwise, and nothing is measured."""
        if self.selection is None or not self._evolves_at(step):
            return None
        students = self.league.alive("student")
        if not any(m.age(step) >= self.evolution.min_age for m in students):
            return None
        self.store.flush()  # an engine that loads a version from its files finds them written
        return self.selection.score({m.name: self.store.latest(self.roster.adapter_of[m.name]) for m in students})

    def _evolves_at(self, step: int) -> bool:
        """Not at the run's last configured step: a child born there would never train, yet it
        would be handed to the user as a live member (and be scored, ranked and evaluated as
        one) in place of a member that had trained all run."""
        return self.evolution is not None and self.evolution.due(step) and step < self.cfg.run.steps

    def _evolve(self, step: int, selection: dict[str, dict[str, float]] | None) -> list[dict[str, Any]]:
        """Every K steps replace the weakest of each role by children of stronger members, ranked
        by conservative rating, or students by `selection`'s pass@1 when it was measured."""
        if not self._evolves_at(step):
            return []
        scores = {role: {m.name: m.conservative for m in self.league.alive(role)} for role in ("teacher", "student")}
        if selection is not None:
            scores["student"] = {name: s["pass1"] for name, s in selection.items()}
        ages = {m.name: m.age(step) for role in ("teacher", "student") for m in self.league.alive(role)}
        evolved = []
        for plan in plan_replacements(step, scores, self.evolution, ages):
            parents = {p: self.learner.adapter_state(self.roster.adapter_of[p]) for p in plan.parents}
            child = make_child(plan, parents)
            inherited = (self.learner.optimizer_state(self.roster.adapter_of[plan.parents[0]])
                         if plan.optimizer_state == "inherit" else None)
            old_adapter = self.roster.adapter_of.pop(plan.old)
            self.learner.remove_adapter(old_adapter)
            self.store.retire(old_adapter)
            self.learner.add_adapter(plan.child, child, inherited)
            self._publish(plan.child)
            self.roster.adapter_of[plan.child] = plan.child
            self.league.replace(plan.old, plan.child, list(plan.parents), plan.operator, step)
            evolved.append({"role": plan.role, "replaced": plan.old, "age": ages[plan.old], "child": plan.child,
                            "parents": list(plan.parents), "operator": plan.operator, "strength": plan.strength})
        return evolved

    def close(self) -> None:
        with uninterruptible():
            try:
                self.metrics.close()
                self.workers.close()
                self.store.close()
            finally:
                self.lock.release()


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
