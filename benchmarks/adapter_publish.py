"""What publishing the population's new adapter versions costs a step: on its path, or beside the next play.

Why (issue 38): after every learner step `popula run` saves a new version of each adapter
(8 for 4 teachers + 4 students). At Qwen2.5-Coder-1.5B's shapes (rank 8 on every projection)
a version is 392 tensors, 37 MB of float32, and on the GPU the population's learn phase was
about 1.1 s longer than the single agent's, most of it these saves (docs/results/step-cost
§ On a GPU). With the torch engine serving the learner's own tensors no file is read within
a step, so the run checks each version's values at once and writes its files on the store's
writer thread during the next play (`AdapterStore.save(background=True)`, flushed before
the next step's saves).

Per mode and round: the 8 saves, then a stand-in for the next play (matrix products on the
main thread, about `--play-s` seconds alone), then the flush in background mode. Figures,
medians over rounds: time on the step's path (synchronous: the saves; background: the saves'
return plus whatever the flush still waits for after the play) and the play's own time (the
writer thread runs beside it). Modes alternate round by round; the first round of each is
a warm-up.

    python3 benchmarks/adapter_publish.py [--shapes qwen1.5b|smollm2-135m] [--adapters 8] [--rounds 5] [--play-s 2]

Last line: {"shapes", "adapter_mb", "adapters", "on_path_ms": {"sync", "background"},
"play_s": {"sync", "background"}, "step_s": {...}, "step_ratio_sync_vs_background"}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_step import QWEN_CODER_1_5B  # noqa: E402  (this folder)

from popula.adapters.store import AdapterStore  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.lora import DEFAULT_TARGET_MODULES, fresh_peft_state_dict  # noqa: E402

SHAPES = {  # config.json numbers that shape the LoRA tensors (no weights are built)
    "qwen1.5b": ("qwen2", QWEN_CODER_1_5B),
    "smollm2-135m": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)),
}


def base_config(kind: str, path: Path) -> Path:
    from transformers import AutoConfig

    model_type, shape = SHAPES[kind]
    AutoConfig.for_model(model_type, **shape).save_pretrained(path)
    return path


def play(matrices: int) -> float:
    """The stand-in play: `matrices` 768 x 768 products on this thread; its seconds."""
    a = torch.randn(768, 768)
    start = time.perf_counter()
    for _ in range(matrices):
        a = torch.tanh(a @ a * 1e-3)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="qwen1.5b")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--play-s", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = base_config(args.shapes, root / "base")
        store = AdapterStore(root / "adapters", base, rank=8, alpha=16.0, target_modules=DEFAULT_TARGET_MODULES)
        names = [f"A{k}" for k in range(args.adapters)]
        states = [fresh_peft_state_dict(store.shapes, 8, torch.Generator().manual_seed(k)) for k in range(len(names))]
        for name in names:
            store.create(name)
        mb = sum(t.numel() * 4 for t in states[0].values()) / 2**20
        per = play(20) / 20
        matrices = max(1, round(args.play_s / per))

        rows: dict[str, list[dict[str, float]]] = {"sync": [], "background": []}
        for rnd in range(args.rounds + 1):
            for mode in ("sync", "background"):
                background = mode == "background"
                start = time.perf_counter()
                for name, state in zip(names, states):
                    store.save(name, state, background=background)
                saves = time.perf_counter() - start
                play_s = play(matrices)
                start = time.perf_counter()
                store.flush()
                waited = time.perf_counter() - start
                if rnd:
                    rows[mode].append({"on_path_s": saves + waited, "play_s": play_s})
                    print(f"round {rnd} {mode:>10}: on the step's path {1000 * (saves + waited):7.1f} ms, "
                          f"play {play_s:.3f} s", flush=True)
        store.close()

    med = {mode: {k: statistics.median(r[k] for r in rs) for k in ("on_path_s", "play_s")} for mode, rs in rows.items()}
    step = {mode: m["on_path_s"] + m["play_s"] for mode, m in med.items()}
    print(f"\n{args.adapters} adapters of {args.shapes}'s LoRA shapes (rank 8, {mb:.1f} MB float32 each), "
          f"play stand-in {med['sync']['play_s']:.2f} s; medians of {args.rounds} rounds")
    print(f"{'mode':<12}{'on path ms':>12}{'play s':>9}{'step s':>9}")
    for mode in rows:
        print(f"{mode:<12}{1000 * med[mode]['on_path_s']:>12.1f}{med[mode]['play_s']:>9.3f}{step[mode]:>9.3f}")
    ratio = step["sync"] / step["background"]
    print(f"step, synchronous / background: {ratio:.3f}x")
    print(json.dumps({"shapes": args.shapes, "adapter_mb": round(mb, 2), "adapters": args.adapters, "rounds": args.rounds,
                      "on_path_ms": {m: round(1000 * med[m]["on_path_s"], 1) for m in med},
                      "play_s": {m: round(med[m]["play_s"], 4) for m in med},
                      "step_s": {m: round(s, 4) for m, s in step.items()},
                      "step_ratio_sync_vs_background": round(ratio, 4)}))


if __name__ == "__main__":
    run_script(main)
