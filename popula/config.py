"""The run configuration: YAML validated once, at the edge, into typed objects.

Everything downstream takes these objects, never raw dictionaries. Unknown keys, wrong
types and impossible sizes are refused here with a message naming the key, so a typo in
a config fails in the first second of a run, not an hour in.

The defaults are the measured best on the tiny base, the settings `configs/tiny-cpu.yaml`
states with their reasons (docs/results/learning): a config naming nothing runs what the
shipped one runs. A config may `extends:` another file (a path relative to it) and state only
its differences; the two are merged before the one validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from popula.engines.registry import DEFAULT_ENGINE, ENGINES
from popula.errors import PopulaError
from popula.kinds import default_types, task_types
from popula.league.schema import LeagueConfig
from popula.metric_sinks import DEFAULT_SINKS, SINKS
from popula.rewards import INVALID_TASK_REWARD, UNSOLVED_TASK_REWARD
from popula.runtime import DEVICE_PATTERN, resolve_runtime

# The default bounds of a steered entropy coefficient (popula.learner.entropy_control).
ENTROPY_COEF_FLOOR = 1e-4
ENTROPY_COEF_CEILING = 0.05


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PopulationConfig(_Section):
    teachers: int = Field(4, ge=1, description="teacher adapters")
    students: int = Field(4, ge=1, description="student adapters")
    single_agent: bool = Field(
        False, description="one adapter both proposes and solves (the baseline); needs 1+1"
    )

    @model_validator(mode="after")
    def _single_agent_is_one_adapter(self) -> "PopulationConfig":
        if self.single_agent and (self.teachers, self.students) != (1, 1):
            raise ValueError("single_agent needs teachers: 1 and students: 1 (one adapter plays both)")
        return self


class LoraConfig(_Section):
    rank: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
    )

    @model_validator(mode="after")
    def _no_lora_on_head_or_embeddings(self) -> "LoraConfig":
        bad = [m for m in self.target_modules if m in ("lm_head", "embed_tokens")]
        if bad:
            raise ValueError(f"LoRA on {bad} is not supported (vLLM drops lm_head LoRA from log-prob paths)")
        return self


class TasksConfig(_Section):
    types: list[str] = Field(
        default_factory=lambda: list(default_types()), min_length=1,
        description="task kinds the teachers propose, each a registered one (popula/kinds; default: those that declare `default`)"
    )
    proposals_per_type: int = Field(4, ge=1, description="proposals per teacher per type per step")
    references: int = Field(6, ge=0, description="K reference tasks shown to a proposing teacher")
    reference_weighting: Literal["uniform", "challenge", "frontier", "ratchet"] = Field(
        "ratchet", description="how references are drawn from the buffer: uniformly, towards deep tasks "
                               "the students found hard (challenge), exponentially towards tasks deeper "
                               "than the buffer's mean (frontier; popula.run.buffer), or as frontier with a "
                               "tilt that climbs while the teachers stay valid (ratchet; popula.run.ratchet)"
    )
    frontier_tilt: float = Field(1.0, gt=0, description="frontier weighting: the weight's factor per AST "
                                                         "level above the buffer's mean depth is exp(tilt)")
    ratchet_step: float = Field(0.02, gt=0, description="ratchet weighting: the tilt's move per step, up when "
                                                          "the step's teacher valid rate reached ratchet_floor")
    ratchet_floor: float = Field(0.88, ge=0, le=1, description="ratchet weighting: the valid rate below which the "
                                                                 "references back off; 0: they climb every step")
    ratchet_ceiling: float = Field(2.0, gt=0, description="ratchet weighting: the largest tilt it reaches")
    ratchet_from: Literal["hardness", "challenge"] = Field(
        "challenge", description="ratchet weighting: what its tilt multiplies, the students' difficulty alone "
                                 "(frontier's weight) or challenge's weight, so that at tilt 0 it draws as "
                                 "challenge does and the climb starts from there")
    unsolved_reference_weight: float | None = Field(
        None, ge=0, description="challenge, frontier and ratchet weightings: the difficulty a task no student "
                                "solved counts as (a solved one: 1.1 - its solve rate; None: the buffer's 0.25); "
                                "0 never shows it, so teachers imitate only tasks some rollout solved, and the "
                                "seeds (popula.run.buffer)")
    seed_references: int = Field(0, ge=0, description="of the K references, this many drawn from the generated "
                                                      "seed tasks and shown last (popula.run.buffer); 0: none")
    seed_tasks: int = Field(48, ge=1, description="generated tasks that seed the buffer")
    buffer_size: int = Field(2048, ge=1)

    @field_validator("types")
    @classmethod
    def _registered_kinds(cls, types: list[str]) -> list[str]:
        unknown = [t for t in types if t not in task_types()]
        if unknown:
            raise ValueError(f"unknown task types {unknown}; expected some of {', '.join(task_types())}")
        return types

    @model_validator(mode="after")
    def _unsolved_weight_needs_a_weighting(self) -> "TasksConfig":
        if self.reference_weighting == "uniform" and self.unsolved_reference_weight is not None:
            raise ValueError(f"unsolved_reference_weight={self.unsolved_reference_weight} does nothing with "
                             "uniform references: set reference_weighting to challenge, frontier or ratchet")
        return self


class GenerationConfig(_Section):
    rollouts: int = Field(8, ge=1, description="student rollouts per task (n)")
    resample_rollouts: int = Field(
        0, ge=0, description="dynamic sampling (DAPO): a student's rollouts of a task that all earned the same reward "
                             "carry no advantage, so that student answers the task this many times more, once; the "
                             "group then holds all of them. 0: off"
    )
    temperature: float = Field(1.0, gt=0)
    teacher_temperature: float | None = Field(
        0.8, gt=0, description="teachers' sampling temperature, which their updates train; None: temperature. "
                               "The tiny base at 1.0 breaks long programs with stray tokens (docs/results/learning)"
    )
    top_p: float = Field(1.0, gt=0, le=1)
    teacher_max_tokens: int = Field(192, ge=8)
    student_max_tokens: int = Field(96, ge=8)

    @property
    def proposal_temperature(self) -> float:
        """The temperature teachers propose with (and are trained at)."""
        return self.temperature if self.teacher_temperature is None else self.teacher_temperature


class SandboxConfig(_Section):
    workers: int = Field(2, ge=1)
    isolation: Literal["jail", "none"] = Field(
        "jail", description="jail: refuse to run where the OS jail cannot be built; none: run generated code "
                            "WITHOUT chroot/uid isolation (explicit opt-in, see docs/security.md)"
    )


class LeagueSection(LeagueConfig):
    """TrueSkill and PFSP settings (popula.league.LeagueConfig), strict about unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LearnerConfig(_Section):
    """Policy-gradient settings shared by every adapter (popula.learner)."""

    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (on the tiny base 2e-4 moves nothing in 120 "
                                               "steps, 6e-3 halves held-out pass@4: docs/results/learning)")
    lr_decay: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="the rate over the run: lr throughout (constant), or from lr at step 1 to lr_final at "
                                "run.steps along a line (linear) or a half cosine (cosine), lr_final after it. A "
                                "function of the step and run.steps, so a resumed or branched run stays on its "
                                "curve (one resumed with more --steps follows the longer curve from its step on: "
                                "popula.learner.schedule). metrics.jsonl's `lr` is each step's. On SmolLM2 a cosine "
                                "from 4e-4 to 2e-4 scored level with a constant 2e-4 over two seeds (rungs AC "
                                "and AE, docs/results/smollm2-ladder)"
    )
    lr_final: float | None = Field(None, gt=0, description="the rate a decay ends at, at run.steps (needs lr_decay "
                                                            "linear or cosine)")
    weight_decay: float = Field(0.0, ge=0)
    epochs: int = Field(1, ge=1, description="optimisation passes over each step's samples")
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip: lower bound 1 - clip_eps")
    clip_eps_high: float | None = Field(
        None, gt=0, description="upper bound 1 + clip_eps_high (DAPO clip-higher); None: clip_eps"
    )
    kl_coef: float = Field(0.5, ge=0, description="k3 KL to the bare base; 0 skips the base forward")
    student_kl_coef: float | None = Field(
        0.05, ge=0, description="the KL coefficient of student rollouts alone; None: kl_coef. Holds a student's "
                                "answers nearer the base's spread (pass@k) without holding the teachers back"
    )
    student_entropy_coef: float = Field(
        0.0, ge=0, description="a bonus of this times the policy's entropy at each token of a student's answer (the "
                               "whole next-token distribution): holds the answers' spread as pass@1 rises, so groups "
                               "keep a signal and pass@k is not traded for pass@1. 0: off"
    )
    student_target_entropy: float | None = Field(
        None, gt=0, description="steer each student's entropy coefficient, starting from student_entropy_coef, "
                                "towards answers of this entropy (nats per token, the run's student_entropy): "
                                "after each step it is multiplied by exp(student_entropy_rate * (target - entropy) "
                                "/ target), within [student_entropy_coef_min, student_entropy_coef_max]. A fixed "
                                "coefficient that holds the spread early loses it later "
                                "(popula.learner.entropy_control). None: the coefficient is fixed"
    )
    student_entropy_rate: float = Field(0.1, gt=0, description="how fast a steered entropy coefficient moves: each "
                                                                "step its log moves by this times the relative "
                                                                "error (target - entropy) / target")
    student_entropy_coef_max: float = Field(
        ENTROPY_COEF_CEILING, gt=0, description="the most a steered entropy coefficient reaches: the answers' entropy follows the "
                                "bonus tens of steps late, and unbounded the rule winds up (on SmolLM2 a coefficient "
                                "of 0.5 blew the entropy up to three times its start: docs/results/smollm2-ladder)"
    )
    student_entropy_coef_min: float = Field(
        ENTROPY_COEF_FLOOR, gt=0, description="the least a steered entropy coefficient falls to. A student whose answers start "
                                "wider than the target drives its coefficient down for as long as they stay wide; "
                                "from 1e-4 it takes tens of steps to climb back once they narrow (on SmolLM2 seed "
                                "1 of rung J the answers collapsed while it climbed from 5e-4: docs/results/"
                                "smollm2-rung-j). Set to student_entropy_coef, the steering only ever adds to the "
                                "fixed bonus"
    )
    student_demonstrations: bool = Field(
        False, description="a (task, student) group in which no rollout solved its task also trains on the task's "
                           "known answer (its output, input or program, as the sandbox computed it), as one more "
                           "rollout with reward 1 taken at the learner's own log-probs: a group of wrong answers "
                           "alone carries no gradient, and on SmolLM2 most `code_f` groups are such "
                           "(docs/results/smollm2-ladder). The teachers' rewards, the league and the step's solve "
                           "rate are the students' own answers' alone. On SmolLM2 it held the answers' spread and lowered "
                           "held-out pass@1 (rung AB). False: students learn only from what they sampled"
    )
    advantage: Literal["grpo", "dr_grpo", "passk"] = Field(
        "grpo", description="student advantages: group mean-centred and std-normalised (grpo), only centred "
                            "(dr_grpo), or for the best of pass_k answers (passk; on the tiny base it learns less and "
                            "keeps no more pass@k: docs/results/learning)"
    )
    pass_k: int = Field(4, ge=1, description="k of the passk advantage (at most the rollouts per task)")
    teacher_baseline: Literal["batch", "ema", "population"] = Field(
        "population", description="teacher baseline per task type: this step's mean of the adapter's own tasks "
                                  "(batch), a running mean of them (ema), or this step's mean over every "
                                  "teacher's tasks (population)"
    )
    teacher_strata: Literal["none", "lines"] = Field(
        "lines", description="lines: a teacher's task is compared only with tasks of its type and its shape "
                             "(one-line or multi-line body), so the teachers improve each shape but are not "
                             "taught to switch from one to the other; none: by type alone"
    )
    teacher_baseline_momentum: float = Field(0.9, ge=0, lt=1, description="ema baseline: weight of the past")
    teacher_normalize_std: bool = Field(True, description="divide teacher advantages by the group's reward std")
    max_tokens_per_microbatch: int = Field(
        8192, ge=16, description="memory bound: rows x padded length of one forward/backward"
    )
    grad_clip: float | None = Field(1.0, gt=0, description="per-adapter gradient norm clip; None: off")
    is_cap: float | None = Field(
        2.0, gt=0, description="truncated importance sampling: the PPO ratio is to the learner's own log-probs and "
                               "each token is weighted by min(p_learner / p_sampler, is_cap), which corrects for a "
                               "sampler that computes the policy slightly differently (bf16, vLLM); None: the ratio "
                               "is to the sampler's log-probs"
    )
    share_prompts: bool = Field(True, description="pack the rollouts of one prompt and adapter into one sequence, so "
                                                  "the prompt's forward and backward run once per group")
    activation_checkpointing: bool = Field(
        False, description="keep only each decoder layer's input in the learner's forward and recompute the layer "
                           "in the backward: a microbatch holds one layer's activations instead of all of them, for "
                           "one more forward (for GPU memory; gradients are unchanged)"
    )
    logit_chunk: int | None = Field(256, ge=1, description="positions per LM-head chunk when computing log-probs, so "
                                                           "the (tokens x vocabulary) logits never exist at once; "
                                                           "None: full logits")

    @model_validator(mode="after")
    def _steering_starts_somewhere(self) -> "LearnerConfig":
        steered = self.student_target_entropy is not None
        # student_entropy_coef_min > 0 by its field, so the start is > 0 too
        if steered and not (self.student_entropy_coef_min <= self.student_entropy_coef
                            <= self.student_entropy_coef_max):
            raise ValueError("student_target_entropy steers the entropy coefficient from student_entropy_coef, "
                             "which must then be > 0 (e.g. 0.01), at least student_entropy_coef_min and at most "
                             "student_entropy_coef_max")
        return self

    @model_validator(mode="after")
    def _decay_has_an_end(self) -> "LearnerConfig":
        if self.lr_decay != "constant" and self.lr_final is None:
            raise ValueError(f"lr_decay {self.lr_decay} needs lr_final, the rate it ends at on run.steps (e.g. "
                             f"lr_final: {self.lr / 2:g})")
        if self.lr_decay == "constant" and self.lr_final is not None:
            raise ValueError("lr_final is the end of a decay: set lr_decay to linear or cosine, or drop lr_final")
        return self

    def kl_coef_for(self, role: str) -> float:
        """The KL coefficient of a rollout of `role` ("teacher" or "student")."""
        return self.student_kl_coef if role == "student" and self.student_kl_coef is not None else self.kl_coef

    @property
    def uses_kl(self) -> bool:
        """Whether any rollout's loss has a KL term (else the bare base's forward is skipped)."""
        return self.kl_coef > 0 or bool(self.student_kl_coef)


class ProbeSettings(_Section):
    """A fixed set of generated tasks that training never sees (the generator's held-out stream,
    by seed) and how the students answer it: what the held-out trend and evolution's `probe`
    fitness both measure (popula.eval.heldout.TaskProbe)."""

    tasks: int = Field(300, ge=1, description="generated held-out tasks (the generator's held-out stream)")
    seed: int = Field(987_654, ge=0, description="the set's seed (its stream is apart from training's)")
    samples: int = Field(4, ge=1, description="answers per task: pass@1 and pass@k with k = samples")
    temperature: float = Field(0.8, ge=0)
    max_tokens: int = Field(96, ge=1, description="answer tokens")


class SelectionProbe(ProbeSettings):
    """The tasks evolution's `probe` fitness ranks students on: a seed of their own, so the
    held-out trend (heldout.seed) and any report set stay untouched by the selection."""

    tasks: int = Field(100, ge=1, description="generated tasks each live student answers at an evolution step")
    seed: int = Field(31_337, ge=0, description="the selection set's seed; never a set results are reported on")
    samples: int = Field(2, ge=1, description="answers per task (pass@1 is their mean)")


class EvolutionSection(_Section):
    """When and how weight-space evolution replaces the weakest (evolution.EvolutionConfig)."""

    enabled: bool = True
    every: int = Field(10, ge=1, description="evolve every K steps")
    replace_bottom: int = Field(1, ge=0, description="members replaced per role, by conservative rating")
    selection: Literal["tournament", "weighted"] = "tournament"
    tournament_size: int = Field(2, ge=1)
    temperature: float = Field(1.0, gt=0, description="weighted selection: softmax temperature over mu - 3 sigma")
    operator_mix: dict[str, float] | None = Field(None, description="operator -> weight; None: the default mix")
    strengths: dict[str, float] = Field(default_factory=dict, description="operator -> strength override")
    optimizer_state: Literal["reset", "inherit"] = "reset"
    min_age: int = Field(
        20, ge=0, description="steps a member trains after its birth before it may be replaced (PBT readiness)"
    )
    fitness: Literal["rating", "probe"] = Field(
        "rating", description="what ranks students for replacement and as parents: 'rating' (the league's "
                              "mu - 3 sigma) or 'probe' (pass@1 on evolution.probe's tasks, measured at each "
                              "evolution step, as population-based training ranks by a validation score). "
                              "Teachers are ranked by rating either way")
    probe: SelectionProbe = SelectionProbe()

    def build(self, seed: int):
        """The evolution package's own config (which checks operator names)."""
        # deferred: evolution loads torch, and the CLI imports this module before it may (popula.openmp)
        from evolution import DEFAULT_MIX, EvolutionConfig, EvolutionError

        try:
            return EvolutionConfig(
                every=self.every, replace_bottom=self.replace_bottom, selection=self.selection,
                tournament_size=self.tournament_size, temperature=self.temperature,
                operator_mix=dict(self.operator_mix or DEFAULT_MIX), strengths=dict(self.strengths),
                optimizer_state=self.optimizer_state, min_age=self.min_age, seed=seed,
            )
        except EvolutionError as err:
            raise PopulaError(f"invalid config: {err}") from None


class RewardsConfig(_Section):
    """The verifier's outcomes as numbers (popula/rewards.py); the design's values by default."""

    invalid_task: float = Field(
        INVALID_TASK_REWARD, le=0,
        description="teacher reward for a task that fails to parse, execute or is nondeterministic "
                    "(the design's -1; docs/results/learning measures a weaker penalty)")
    novelty_window: int = Field(
        0, ge=0,
        description="fitness sharing: a valid task's teacher reward is divided by 1 + the tasks of its type with "
                    "the same program form among the step's other valid tasks and the newest N buffered ones "
                    "(popula/novelty.py); 0: off, the design's reward")
    novelty_penalty: float = Field(
        0.0, ge=0, le=1,
        description="with novelty_window: each other task of the same form also subtracts this from the shared "
                    "reward, down to rewards.invalid_task, so a form repeated often costs its teacher as much as a "
                    "task that fails to run (division alone leaves a reward of 0 at 0: a task the students always "
                    "solve stays safer than a new one that may fail); 0: off")
    refuse_trivial: bool = Field(
        False,
        description="a valid task a student can answer without reading it (an identity function; for code_f also "
                    "a constant one: TaskKind.trivial_fault) is invalid: its teacher gets rewards.invalid_task and "
                    "no student answers it. For a curriculum that fills with `def f(n): return n` and students "
                    "that learn to copy (docs/results/smollm2-rung-j/); false: the design's, such a task is valid")
    blind_task_cap: float | None = Field(
        None, le=1,
        description="the most a valid task whose program never reads its input pays its teacher (e.g. 0), before "
                    "fitness sharing; students still answer it and learn from it. For teachers that settle on "
                    "`def f(x): return [5]`, valid every time and never the same form twice, which the repeat "
                    "penalty cannot see (docs/results/smollm2-ladder/, rung U); null: off, the design's reward")
    solved_task: float | None = Field(
        None, le=0,
        description="teacher reward for a valid task every rollout of its matched student solves, in place of the "
                    "design's 1 - 1 = 0 (e.g. -0.5): under the design a task too easy to teach anything pays what "
                    "an unsolved one pays, so the teachers cannot tell the two apart (docs/results/smollm2-ladder/, "
                    "rung V); at least rewards.invalid_task; null: off, the design's reward")
    unsolved_task: float = Field(
        UNSOLVED_TASK_REWARD, le=0,
        description="teacher reward for a valid task no rollout of its matched student solves (the design's zero "
                    "floor, 0); the same value as solved_task makes the two ends pay alike. Measured once at -0.5 "
                    "(docs/results/smollm2-ladder/, rung Y): the teachers kept posing tasks nobody solves and pass@1 "
                    "did not rise; at least rewards.invalid_task")
    solvable_by: Literal["matched", "population"] = Field(
        "matched",
        description="who may show a valid task solvable (the zero floor): 'matched', the design's: a task none of "
                    "the matched student's rollouts solves pays its teacher 0; 'population': the other live "
                    "students answer it too (generation.rollouts each) and if any solves it, it pays 1. For "
                    "students whose answers have collapsed (always right or always wrong on a task), under which "
                    "every valid task pays 0; with one student it changes nothing")

    @model_validator(mode="after")
    def _penalty_needs_a_window(self) -> "RewardsConfig":
        if self.novelty_penalty > 0 and self.novelty_window == 0:
            raise ValueError(f"rewards.novelty_penalty={self.novelty_penalty} counts repeats within "
                             "rewards.novelty_window, which is 0 (off); set a window, e.g. 64")
        return self

    @model_validator(mode="after")
    def _cap_above_invalid(self) -> "RewardsConfig":
        for key in ("blind_task_cap", "solved_task", "unsolved_task"):
            value = getattr(self, key)
            if value is not None and value < self.invalid_task:
                raise ValueError(f"rewards.{key}={value} is below rewards.invalid_task={self.invalid_task}: a valid "
                                 f"task would pay less than a broken one")
        return self


class RunConfig(_Section):
    steps: int = Field(120, ge=1)
    checkpoint_every: int = Field(10, ge=1)
    keep_checkpoints: int = Field(2, ge=1, description="newest checkpoints kept; older ones are deleted")


class HeldoutSection(ProbeSettings):
    """A held-out pass@k trend while the run trains (popula.eval.heldout): every `every` steps, and
    at the last, each live student answers one fixed set of generated tasks that training never
    sees. Off by default: 300 tasks x 4 samples cost about 12 s a student on 2 cores. The
    defaults are `benchmarks/learning.py`'s held-out set and settings, so the trend ends on the
    figure that benchmark reports."""

    every: int = Field(0, ge=0, description="score the live students every N steps and at the last step; 0: never")


class RaySection(_Section):
    """Where the workers run when the run is spread over a Ray cluster (popula.run.parts.ray.workers)."""

    enabled: bool = Field(False, description="run engines, sandboxes and learner as Ray actors")
    address: str | None = Field(
        None, description="None: start a local Ray (or join $RAY_ADDRESS); 'auto': the cluster `ray start` made "
                          "on this node; 'ray://host:10001': a remote cluster via Ray Client"
    )
    engines: int = Field(1, ge=1, description="generation engine actors; a call's requests are split among them")
    engine_cpus: float | None = Field(
        None, ge=0, description="CPUs Ray reserves per engine actor; None: fit (a local Ray this run starts shares "
                                "its CPUs among all actors, at most 1 each; a joined cluster: 1)")
    engine_gpus: float = Field(0.0, ge=0, description="GPUs per engine actor (> 0: the torch engine runs on cuda)")
    learner_cpus: float | None = Field(None, ge=0, description="CPUs Ray reserves for the learner actor; None: fit")
    learner_gpus: float = Field(0.0, ge=0, description="GPUs for the learner actor (> 0: it trains on cuda)")
    sandbox_actors: int = Field(1, ge=1, description="sandbox actors, each with sandbox.workers jail processes")
    sandbox_cpus: float | None = Field(None, ge=0, description="CPUs Ray reserves per sandbox actor; None: fit")
    torch_threads: int | None = Field(None, ge=1, description="torch threads in engine/learner actors; None: the node's cores")
    strategy: Literal["DEFAULT", "SPREAD"] = Field(
        "DEFAULT", description="Ray scheduling of engine and sandbox actors: DEFAULT packs, SPREAD spreads over nodes"
    )
    max_restarts: int = Field(3, ge=-1, description="restarts of a dead engine or sandbox actor (-1: unlimited)")
    ship_base: bool = Field(True, description="send a local base-model directory through the object store")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray this run starts (None: all)")
    object_store_mb: int | None = Field(None, ge=64, description="object store of a local Ray this run starts")
    pending_timeout_s: float = Field(
        60.0, gt=0, description="seconds the actors may wait for the cluster to place them before the run stops "
                                "(exit 2) naming each actor's ask and the cluster's resources")


class LoggingSection(_Section):
    """Where each step's scalars go beside RUN_DIR/metrics.jsonl, which is always written: the metric
    sinks by name (popula/metric_sinks.py), and the Weights & Biases run's settings when it is one."""

    report_to: list[str] = Field(
        list(DEFAULT_SINKS), description="metric sinks, some of popula.metric_sinks.SINKS (tensorboard, wandb); "
                                         "[]: metrics.jsonl alone")
    wandb_project: str = Field("popula", min_length=1, description="the W&B project the run logs to")
    wandb_entity: str | None = Field(None, description="the W&B team or user; None: the login's default")
    wandb_mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="None: $WANDB_MODE, else online; offline writes RUN_DIR/wandb/ for `wandb sync`")

    @field_validator("report_to")
    @classmethod
    def _registered_sinks(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in SINKS]
        if unknown:
            raise ValueError(f"unknown metric sinks {unknown}; expected some of {', '.join(SINKS)}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named twice")
        return names


class RuntimeSection(_Section):
    """Device and precision of the engine and the learner (resolved by popula.runtime), and
    vLLM's share of a GPU it shares with the learner."""

    device: str = Field("auto", description="auto (a GPU when torch sees one, else cpu) | cpu | cuda | cuda:N")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "float32", description="auto: bfloat16 on a GPU that supports it, else float32; engine and learner alike. "
                               "float32 by default: for the tiny base bf16 is barely faster on a GPU (docs/results/gpu)"
    )
    gpu_memory_utilization: float = Field(
        0.5, gt=0, le=1, description="vLLM's share of GPU memory (weights + KV cache); the rest is the learner's"
    )
    enforce_eager: bool = Field(False, description="vLLM: no CUDA graphs (less memory, slower decoding)")
    max_num_seqs: int | None = Field(None, ge=1, description="vLLM: most sequences in one scheduler step; None: vLLM's")

    @model_validator(mode="after")
    def _device_name(self) -> "RuntimeSection":
        if not DEVICE_PATTERN.match(self.device):
            raise ValueError(f"device {self.device!r} is not one of auto, cpu, cuda, cuda:N")
        return self


class Config(_Section):
    """A whole run. Sections not given take their defaults."""

    seed: int = 0
    base_model: str = Field("tiny", description="`tiny`, a Hugging Face id or a local path")
    engine: str = Field(DEFAULT_ENGINE, description="generation engine: a name in popula.engines.registry.ENGINES")
    population: PopulationConfig = PopulationConfig()
    lora: LoraConfig = LoraConfig()
    tasks: TasksConfig = TasksConfig()
    generation: GenerationConfig = GenerationConfig()
    sandbox: SandboxConfig = SandboxConfig()
    league: LeagueSection = LeagueSection()
    evolution: EvolutionSection = EvolutionSection()
    learner: LearnerConfig = LearnerConfig()
    rewards: RewardsConfig = RewardsConfig()
    run: RunConfig = RunConfig()
    heldout: HeldoutSection = HeldoutSection()
    ray: RaySection = RaySection()
    runtime: RuntimeSection = RuntimeSection()
    logging: LoggingSection = LoggingSection()

    @field_validator("engine")
    @classmethod
    def _registered_engine(cls, name: str) -> str:
        # the registry is read now, not at import: an engine registered later (a plugin, a test) is accepted
        if name not in ENGINES:
            raise ValueError(f"unknown engine {name!r} (registered: {', '.join(sorted(ENGINES))})")
        return name

    @model_validator(mode="after")
    def _evolution_leaves_parents(self) -> "Config":
        p, e = self.population, self.evolution
        if e.enabled and not p.single_agent and e.replace_bottom >= min(p.teachers, p.students):
            raise ValueError(
                f"evolution.replace_bottom={e.replace_bottom} would replace every member of a role "
                f"({p.teachers} teachers, {p.students} students) and leave no parents"
            )
        return self

    @model_validator(mode="after")
    def _selection_apart_from_the_trend(self) -> "Config":
        e, h = self.evolution, self.heldout
        if e.enabled and e.fitness == "probe" and h.every > 0 and e.probe.seed == h.seed:
            raise ValueError(
                f"evolution.probe.seed={e.probe.seed} is heldout.seed: the held-out trend would be measured "
                "on the tasks evolution selects by; give evolution.probe.seed another value"
            )
        return self

    def resolved(self) -> "Config":
        """This config with `runtime.device` / `runtime.dtype` as they resolve on this machine
        (PopulaError, before any model is loaded, when e.g. cuda is asked for and absent)."""
        rt = resolve_runtime(self.runtime.device, self.runtime.dtype)
        return self.model_copy(update={"runtime": self.runtime.model_copy(update={"device": rt.device,
                                                                                  "dtype": rt.dtype})})

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML config (None: all defaults) and apply `key.sub=value` overrides.

    A config that `extends:` another is merged onto it first (`_read_config_data`). Override
    values are parsed as YAML, so `run.steps=10` gives an int and `tasks.types=[code_o]` a list.
    """
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        chain: list[Path] = []
        data = _read_config_data(Path(path), chain)
        source = str(path) + (f" (extending {' -> '.join(map(str, chain[1:]))})" if len(chain) > 1 else "")
    for override in overrides:
        _apply_override(data, override)
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise PopulaError(_blame(err, source, overrides)) from None


def _blame(err: ValidationError, source: str, overrides: list[str]) -> str:
    """The refusal, naming where each bad key came from: an override (`--set KEY=VALUE`) when
    the key is one it set or lies under one, else the config file."""
    by_override: list[str] = []
    by_file: list[str] = []
    for e in err.errors():
        loc = tuple(str(p) for p in e["loc"])
        where = ".".join(loc) or "(top level)"
        override = next((o for o in reversed(overrides)
                         if _shares_path(tuple(o.partition("=")[0].split(".")), loc)), None)
        if override is not None:
            by_override.append(f"--set {override}: {where}: {e['msg']}")
        else:
            by_file.append(f"{where}: {e['msg']}")
    parts = by_override + ([f"{source}: invalid config: {'; '.join(by_file)}"] if by_file else [])
    return "; ".join(parts)


def _shares_path(key: tuple[str, ...], loc: tuple[str, ...]) -> bool:
    """Whether an override's key and an error's location are one path, or one lies under the other."""
    n = min(len(key), len(loc))
    return n > 0 and key[:n] == loc[:n]


def _read_config_data(path: Path, chain: list[Path] | None = None) -> dict[str, Any]:
    """A config file's keys, with the file it `extends:` (a path relative to it) merged beneath.

    Mappings merge key by key and the extending file's value wins; any other value (a list
    included) replaces the one it extends. Nothing is validated here: the merged keys are, once.
    `chain` collects the files read, the extending one first.
    """
    chain = [] if chain is None else chain
    chain.append(path)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PopulaError(f"{path}: no such config file") from None
    except yaml.YAMLError as err:
        raise PopulaError(f"{path}: not valid YAML ({err})") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise PopulaError(f"{path}: a config must be a mapping of keys, got {type(loaded).__name__}")
    data = dict(loaded or {})
    if "extends" not in data:
        return data
    parent = data.pop("extends")
    if not isinstance(parent, str) or not parent:
        raise PopulaError(f"{path}: extends: must name a config file, got {parent!r}")
    base = path.parent / Path(parent).expanduser()
    if not base.is_file():
        raise PopulaError(f"{path}: extends: {parent}: no such config file ({base})")
    if any(base.resolve() == seen.resolve() for seen in chain):
        cycle = " -> ".join(map(str, [*chain, base]))
        raise PopulaError(f"{path}: extends: {parent} makes a cycle ({cycle})")
    return _merged(_read_config_data(base, chain), data)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (_merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict)
                    else value)
    return out


def _apply_override(data: dict[str, Any], override: str) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise PopulaError(f"override {override!r} must look like key.sub=value")
    if key == "extends":
        raise PopulaError(f"override {override!r}: only a config file can extend another")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise PopulaError(f"override {override!r}: value is not valid YAML ({err})") from None
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise PopulaError(f"override {override!r}: '{part}' is not a section")
        node = child
    node[leaf] = value
