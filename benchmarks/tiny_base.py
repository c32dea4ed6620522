"""How good is the tiny base before any self-play? Teacher validity and student solve rates.

    python3 benchmarks/tiny_base.py [--model tiny|DIR] [--proposals N] [--tasks N]

Teachers: for each task type, the model proposes tasks at temperature 1 from prompts
showing K=6 held-out reference tasks; a proposal counts as valid when it parses and
the sandbox accepts it; distinct_rate is the share of valid proposals whose program and
inputs are unique among them (distinct_programs: programs alone). Reference following: the same proposals again, once
from the shallowest third of the reference tasks by AST depth and once from the deepest third;
`reference_following` is how many levels the proposals' mean depth moves per level that the
references' mean depth moves (0: the model ignores its references' depth, 1: it copies it);
self-play can steer the curriculum through the references only as far as this. Line following:
proposals once from references whose function body is one line and once from multi-line ones;
`multiline_from_oneline` / `multiline_from_multiline` are the shares of parsed proposals with
more than one body line, and `valid_oneline` / `valid_multiline` the sandbox's acceptance rate of
each kind (over both sets): a self-play curriculum keeps multi-line programs only as far as the
base writes them from its references and writes them validly. Students: held-out generated tasks (the
"heldout" stream, never in the corpus) are posed in the model's own prompt format; an
answer counts when the sandbox judges it correct. Solve rates are the mean over
`--samples` samples per task at temperature 1 (what self-play rollouts see: a student
answers each task with several) and, for reference, of greedy decoding.

Last line: {"valid_rate", "distinct_rate", "reference_following", "multiline_from_oneline", "valid_multiline", "solve_code_o", "solve_code_i", "solve_code_f", ...}
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from popula.exits import run_script  # noqa: E402
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads
import torch  # noqa: E402

from popula.complexity import ast_depth, is_multiline, parsed_depths  # noqa: E402
from popula.model.base import load_base  # noqa: E402
from popula.kinds import task_types  # noqa: E402
from popula.records import TaskRecord  # noqa: E402
from popula.sandbox import Sandbox  # noqa: E402
from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks  # noqa: E402
from popula.tasks.prompts import K_REFERENCES, prompt_format, stop_token_ids  # noqa: E402


def sample(model, tokenizer, prompts: list[str], *, temperature: float, max_new_tokens: int, batch: int = 32) -> list[str]:
    """Complete prompts with transformers' generate (left padding), stopping at EOS."""
    tokenizer.padding_side = "left"
    stops = stop_token_ids(tokenizer)
    texts: list[str] = []
    for i in range(0, len(prompts), batch):
        enc = tokenizer(prompts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=None,
                top_k=None,
                max_new_tokens=max_new_tokens,
                eos_token_id=stops,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts


def multiline_or_none(program: str) -> bool | None:
    """`is_multiline`, or None for generated text that does not parse."""
    try:
        return is_multiline(program)
    except (SyntaxError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="base model spec (default: tiny, built if missing)")
    parser.add_argument("--proposals", type=int, default=60, help="teacher proposals per task type")
    parser.add_argument("--tasks", type=int, default=200, help="held-out student tasks per task type (200: a rate near 0.2 is known to +-0.03)")
    parser.add_argument("--samples", type=int, default=4, help="samples per task at temperature 1; the solve rate is their mean (less noise than one)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)

    model, tokenizer = load_base(args.model)
    fmt = prompt_format(tokenizer)
    rng = random.Random(args.seed)
    refs = {t: generate_tasks(90, args.seed, "mixed", [t], namespace=HELDOUT_NAMESPACE + "-refs") for t in task_types()}
    held = {t: generate_tasks(args.tasks, args.seed, "mixed", [t], namespace=HELDOUT_NAMESPACE) for t in task_types()}

    rows = []
    figures: dict[str, float] = {}
    start = time.monotonic()
    with Sandbox(workers=2) as sandbox:
        # teachers
        valid = distinct = total = 0
        programs: list[str] = []
        for t in task_types():
            prompts = [fmt.teacher_prompt(t, rng.sample(refs[t], K_REFERENCES)) for _ in range(args.proposals)]
            texts = sample(model, tokenizer, prompts, temperature=1.0, max_new_tokens=320)
            proposals = [fmt.parse_proposal(x, t) for x in texts]
            parsed = [p for p in proposals if p is not None]
            results = sandbox.verify(parsed) if parsed else []
            ok = [p for p, r in zip(parsed, results) if r.valid]
            n_distinct = len({(p.program, tuple(p.inputs)) for p in ok})
            programs += [p.program for p in ok]
            rows.append((f"teacher {t}", f"parsed {len(parsed)}/{len(texts)}", f"valid {len(ok)}/{len(texts)}", f"distinct {n_distinct}/{len(ok)}"))
            valid += len(ok)
            distinct += n_distinct
            total += len(texts)
        figures["valid_rate"] = valid / max(total, 1)
        figures["distinct_rate"] = distinct / max(valid, 1)
        figures["distinct_programs"] = len(set(programs)) / max(len(programs), 1)
        # reference following: proposals from the shallowest and the deepest third of the references
        visible = getattr(fmt, "max_references", None) or K_REFERENCES  # the compact format shows the last 3
        shown: dict[str, list[float]] = {"shallow": [], "deep": []}
        written: dict[str, list[int]] = {"shallow": [], "deep": []}
        for t in task_types():
            by_depth = sorted(refs[t], key=lambda r: ast_depth(r.program))
            third = len(by_depth) // 3
            for end, pool in (("shallow", by_depth[:third]), ("deep", by_depth[-third:])):
                picks = [rng.sample(pool, K_REFERENCES) for _ in range(args.proposals)]
                texts = sample(model, tokenizer, [fmt.teacher_prompt(t, p) for p in picks], temperature=1.0, max_new_tokens=320)
                shown[end] += [ast_depth(r.program) for p in picks for r in p[-visible:]]
                parsed = (fmt.parse_proposal(x, t) for x in texts)
                written[end] += parsed_depths([p.program for p in parsed if p is not None])
        for end in ("shallow", "deep"):
            depths = written[end]
            figures[f"ref_depth_{end}"] = sum(shown[end]) / len(shown[end])
            figures[f"proposal_depth_{end}"] = sum(depths) / max(len(depths), 1)
            rows.append((f"refs {end} third", f"shown depth {figures[f'ref_depth_{end}']:.2f}",
                         f"proposal depth {figures[f'proposal_depth_{end}']:.2f}", f"parsed {len(depths)}"))
        figures["reference_following"] = (figures["proposal_depth_deep"] - figures["proposal_depth_shallow"]) / (
            figures["ref_depth_deep"] - figures["ref_depth_shallow"])
        # line following: one-line against multi-line references, and how often each kind is valid
        accepted = {True: [0, 0], False: [0, 0]}  # multi-line? -> [valid, parsed]
        for kind in ("oneline", "multiline"):
            multi_shown = kind == "multiline"
            lines_of: list[bool] = []
            for t in task_types():
                pool = [r for r in refs[t] if is_multiline(r.program) is multi_shown]
                picks = [rng.sample(pool, min(K_REFERENCES, len(pool))) for _ in range(args.proposals)]
                texts = sample(model, tokenizer, [fmt.teacher_prompt(t, p) for p in picks], temperature=1.0, max_new_tokens=320)
                parsed = [(p, m) for p in (fmt.parse_proposal(x, t) for x in texts)
                          if p is not None and (m := multiline_or_none(p.program)) is not None]
                for (p, multi), verdict in zip(parsed, sandbox.verify([p for p, _ in parsed]) if parsed else []):
                    lines_of.append(multi)
                    accepted[multi][0] += verdict.valid
                    accepted[multi][1] += 1
            figures[f"multiline_from_{kind}"] = sum(lines_of) / max(len(lines_of), 1)
            rows.append((f"refs {kind}", f"multi-line proposals {figures[f'multiline_from_{kind}']:.2f}",
                         f"parsed {len(lines_of)}", ""))
        for multi, name in ((False, "oneline"), (True, "multiline")):
            figures[f"valid_{name}"] = accepted[multi][0] / max(accepted[multi][1], 1)
            rows.append((f"valid if {name}", f"{figures[f'valid_{name}']:.2f}", f"of {accepted[multi][1]} parsed", ""))
        # students
        for t in task_types():
            for label, temperature, k in (("solve", 1.0, args.samples), ("greedy", 0.0, 1)):
                tasks = [task for task in held[t] for _ in range(k)]
                prompts = [fmt.student_prompt(task) for task in tasks]
                texts = sample(model, tokenizer, prompts, temperature=temperature, max_new_tokens=256 if t == "code_f" else 64)
                judged: list[TaskRecord] = []
                for task, text in zip(tasks, texts):
                    answer = fmt.parse_answer(text, t)
                    if answer is not None:
                        judged.append(TaskRecord(id=task.id, type=task.type, program=task.program, inputs=task.inputs, outputs=task.outputs, message=task.message, answer=answer))
                results = sandbox.verify(judged) if judged else []
                solved = sum(1 for r in results if r.correct)
                figures[f"{label}_{t}"] = solved / len(tasks)
                rows.append((f"student {t}", f"T={temperature:g} x{k}", f"answered {len(judged)}/{len(tasks)}", f"solved {solved}/{len(tasks)}"))
    figures["seconds"] = round(time.monotonic() - start, 1)

    print(f"model: {args.model}  format: {fmt.name}")
    for row in rows:
        print("  ".join(f"{c:<22}" for c in row))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    run_script(main)
