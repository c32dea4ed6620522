"""What the teachers' sampling temperature does to the bare base's proposals, one-line and multi-line.

    python3 benchmarks/proposal_temperature.py [--model tiny|DIR|SPEC] [--temperatures 1.0 0.85 0.7]
                                               [--proposals 60] [--references 6] [--seed 1]

Why: a self-play curriculum keeps multi-line programs only if the base writes them validly, and the
teacher reward's -1 for an invalid task prices out whatever is often broken. A model of a few
million parameters sampled at temperature 1 drops stray tokens into its programs (`returnzdde`, an
unmatched parenthesis); the longer the program, the likelier one is, so the temperature sets how
much more often multi-line programs are rejected than one-liners.

For each temperature the base proposes `--proposals` tasks per task type from `--references`
one-line references (default K=6, the tiny base's prompt; configs/smollm2-cpu.yaml shows 2) and as
many from multi-line ones (generated tasks from a namespace that neither the
held-out tasks nor the base's corpus use), and the sandbox judges every proposal. A proposal counts
as multi-line by `written_multiline` (`is_multiline`, or, for a program that does not parse, its body lines):
a syntax error is the commonest way a long program fails, and counting only parsed programs would
hide it. Reported per temperature: the valid rate, the multi-line share of parsed proposals, the
acceptance of one-line and of multi-line ones, the valid multi-line tasks per proposal, and the
rejection reasons by kind.

Last line: {"temperatures": {"1.0": {"valid_rate", "multiline_share", "valid_oneline", "valid_multiline",
"valid_multiline_per_proposal", "reasons": {"oneline": {...}, "multiline": {...}}}, ...}, "proposals", "references", "model"}
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from popula.exits import run_script  # noqa: E402
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads
import torch  # noqa: E402

from popula.complexity import is_multiline, written_multiline  # noqa: E402
from popula.tasks.prompts import K_REFERENCES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_base import sample  # noqa: E402


@dataclass(frozen=True)
class Judged:
    """One proposal: parsed at all, multi-line (None when it did not parse), and the sandbox's verdict."""

    parsed: bool
    multiline: bool | None
    valid: bool
    reason: str | None


def summarize(judged: Sequence[Judged]) -> dict:
    """The figures of one temperature (see the module docstring)."""
    parsed = [j for j in judged if j.parsed]
    kinds = {"oneline": [j for j in parsed if not j.multiline], "multiline": [j for j in parsed if j.multiline]}

    def rate(group: list[Judged]) -> float | None:
        return sum(j.valid for j in group) / len(group) if group else None

    return {
        "proposals": len(judged),
        "valid_rate": sum(j.valid for j in judged) / max(len(judged), 1),
        "multiline_share": len(kinds["multiline"]) / max(len(parsed), 1),
        "valid_oneline": rate(kinds["oneline"]),
        "valid_multiline": rate(kinds["multiline"]),
        "valid_multiline_per_proposal": sum(j.valid for j in kinds["multiline"]) / max(len(judged), 1),
        "reasons": {k: dict(Counter(j.reason for j in group if not j.valid)) for k, group in kinds.items()},
        "unparsed": len(judged) - len(parsed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="base model spec (default: tiny, built if missing)")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.85, 0.7])
    parser.add_argument("--proposals", type=int, default=60,
                        help="proposals per task type and reference kind (one-line, multi-line) at each temperature")
    parser.add_argument("--references", type=int, default=K_REFERENCES,
                        help=f"references in each teacher prompt (default {K_REFERENCES}; match the config's tasks.references)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if any(t <= 0 for t in args.temperatures):
        parser.error("temperatures must be positive: a teacher is trained on what it samples")
    if args.references < 1:
        parser.error("--references must be at least 1: a teacher prompt shows examples of the type")
    torch.set_num_threads(2)

    from popula.model.base import load_base
    from popula.kinds import task_types
    from popula.sandbox import Sandbox
    from popula.tasks.generator import HELDOUT_NAMESPACE, generate_tasks
    from popula.tasks.prompts import prompt_format

    model, tokenizer = load_base(args.model)
    fmt = prompt_format(tokenizer)
    refs = {t: generate_tasks(300, 4321, "mixed", [t], namespace=HELDOUT_NAMESPACE + "-refs") for t in task_types()}
    pools = {(multi, t): [r for r in refs[t] if is_multiline(r.program) is multi]  # one-line / multi-line references
             for multi in (False, True) for t in task_types()}
    figures: dict[str, dict] = {}
    start = time.monotonic()
    with Sandbox(workers=2) as sandbox:
        for temperature in args.temperatures:
            torch.manual_seed(args.seed)
            rng = random.Random(args.seed)  # the same reference draws at every temperature
            judged: list[Judged] = []
            for multi_refs in (False, True):
                for t in task_types():
                    picks = [rng.sample(pools[multi_refs, t], args.references) for _ in range(args.proposals)]
                    texts = sample(model, tokenizer, [fmt.teacher_prompt(t, p) for p in picks],
                                   temperature=temperature, max_new_tokens=192)
                    proposals = [fmt.parse_proposal(x, t) for x in texts]
                    parsed = [p for p in proposals if p is not None]
                    judged += [Judged(False, None, False, None)] * (len(proposals) - len(parsed))
                    for p, verdict in zip(parsed, sandbox.verify(parsed) if parsed else []):
                        judged.append(Judged(True, written_multiline(p.program), verdict.valid, verdict.reason))
            figures[f"{temperature:g}"] = summarize(judged)

    def cell(x: float | None, width: int) -> str:
        return f"{x:{width}.2f}" if x is not None else f"{'-':>{width}}"

    print(f"{'temperature':>11} | {'valid':>5} | {'multi-line share':>16} | {'valid if one-line':>17} | "
          f"{'valid if multi-line':>19} | {'valid multi-line per proposal':>29}")
    for name, f in figures.items():
        print(f"{name:>11} | {f['valid_rate']:5.2f} | {f['multiline_share']:16.2f} | {cell(f['valid_oneline'], 17)} | "
              f"{cell(f['valid_multiline'], 19)} | {f['valid_multiline_per_proposal']:29.2f}")
    for name, f in figures.items():
        print(f"rejections at {name}: one-line {f['reasons']['oneline']}, multi-line {f['reasons']['multiline']}, "
              f"unparsed {f['unparsed']}")
    print(f"{len(args.temperatures) * 2 * len(task_types()) * args.proposals} proposals in {time.monotonic() - start:.0f} s")
    print(json.dumps({"model": args.model, "proposals": args.proposals, "references": args.references, "seed": args.seed,
                      "temperatures": figures}))


if __name__ == "__main__":
    run_script(main)
