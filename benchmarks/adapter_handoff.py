"""How a new adapter version reaches vLLM: through the run directory's disk, or through tmpfs.

Why (issue 16): vLLM 0.32 loads a LoRA only from a path (`LoRARequest` carries no tensors,
and its engine runs in another process), so after every learner step each new version
travels learner -> safetensors file -> vLLM worker. This measures that hand-off where the
run writes it (`adapters/` on the run directory's filesystem) against a RAM-backed tmpfs
(/dev/shm), with the engine and store a run uses (`AdapterStore.save`, then the next
`generate` that names the version, which validates and `add_lora`s it).

Per location (one engine each, one after the other) and round: every one of 8 adapters gets
a new version (`save`, timed), one 1-token generation over all 8 loads them (timed), and the
same generation again with nothing to load gives the baseline subtracted from it. Figures
are medians over rounds, per adapter version.

    python3 benchmarks/adapter_handoff.py [--model smollm2-135m] [--rounds 5] [--disk-dir DIR] [--tmpfs-dir /dev/shm]

Last line: {"save_ms_disk", "save_ms_tmpfs", "load_ms_disk", "load_ms_tmpfs", "handoff_ratio_tmpfs_vs_disk", ...}
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

from multilora_generation import ALPHA, N_ADAPTERS, RANK, build_base  # noqa: E402  (this folder)

from popula.adapters.store import AdapterStore  # noqa: E402
from popula.engines import create_engine  # noqa: E402
from popula.engines.base import GenerationRequest  # noqa: E402
from popula.exits import run_script  # noqa: E402
from popula.lora import fresh_peft_state_dict  # noqa: E402


def new_versions(store: AdapterStore, round_no: int) -> tuple[list, list[float]]:
    """Save a new version of every adapter (B off zero, so nothing is trivially compressible)."""
    refs, seconds = [], []
    for k in range(N_ADAPTERS):
        name = f"member{k}"
        g = torch.Generator().manual_seed(1000 * round_no + k)
        # the shapes of a fresh adapter, without reading the previous version back from the store
        state = {n: torch.randn(t.shape, generator=g) * 0.05
                 for n, t in fresh_peft_state_dict(store.shapes, store.rank, g).items()}
        start = time.perf_counter()
        refs.append(store.save(name, state))
        seconds.append(time.perf_counter() - start)
    return refs, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, metavar="SPEC",
                    help="a real base (`smollm2-135m`, a model directory, a .gguf); default: a built 4M Llama")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--disk-dir", type=Path, default=Path.cwd(),
                    help="a folder on the filesystem runs write to (default: the current directory)")
    ap.add_argument("--tmpfs-dir", type=Path, default=Path("/dev/shm"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="handoff_base_") as tmp, \
            tempfile.TemporaryDirectory(prefix=".handoff_", dir=args.disk_dir) as disk, \
            tempfile.TemporaryDirectory(prefix="handoff_", dir=args.tmpfs_dir) as shm:
        if args.model:
            from popula.model.base import resolve_base_model

            base = Path(resolve_base_model(args.model))
        else:
            base = build_base(Path(tmp) / "base")
        stores = {where: AdapterStore(Path(root) / "adapters", base, rank=RANK, alpha=ALPHA, seed=0)
                  for where, root in (("disk", disk), ("tmpfs", shm))}
        for store in stores.values():
            for k in range(N_ADAPTERS):
                store.create(f"member{k}")
        save_ms: dict[str, list[float]] = {w: [] for w in stores}
        load_ms: dict[str, list[float]] = {w: [] for w in stores}
        for where, store in stores.items():
            # One engine per location: both stores number versions from the same uids, and vLLM
            # must never see one uid twice.
            engine = create_engine("vllm", base, max_adapters=N_ADAPTERS, max_rank=RANK, seed=0, dtype="float32")

            def generate(refs: list) -> float:
                requests = [GenerationRequest([1, 2, 3, 4], adapter=ref, n=1, temperature=0.0, max_tokens=1)
                            for ref in refs]
                start = time.perf_counter()
                engine.generate(requests)
                return time.perf_counter() - start

            for round_no in range(args.rounds + 1):  # round 0 warms up
                refs, seconds = new_versions(store, round_no)
                first, again = generate(refs), generate(refs)
                if round_no:
                    save_ms[where].append(1000 * statistics.mean(seconds))
                    load_ms[where].append(1000 * max(first - again, 0.0) / N_ADAPTERS)
            engine.close()
        size_mb = sum(f.stat().st_size for f in refs[0].path.iterdir()) / 1e6

    med = {f"{kind}_{w}": statistics.median(v) for kind, d in (("save", save_ms), ("load", load_ms))
           for w, v in d.items()}
    print(f"model={args.model or 'built 4M Llama'}  {N_ADAPTERS} adapters of rank {RANK} ({size_mb:.2f} MB each), "
          f"{args.rounds} rounds; disk: {args.disk_dir}, tmpfs: {args.tmpfs_dir}")
    print(f"{'where':<8}{'save ms':>10}{'load ms':>10}{'hand-off ms':>13}   (median per adapter version)")
    for where in stores:
        print(f"{where:<8}{med['save_' + where]:>10.1f}{med['load_' + where]:>10.1f}"
              f"{med['save_' + where] + med['load_' + where]:>13.1f}")
    handoff = {w: med["save_" + w] + med["load_" + w] for w in stores}
    print(json.dumps({
        "model": args.model or "built-4M-llama", "adapter_mb": round(size_mb, 2), "rounds": args.rounds,
        **{f"{k}_ms_{w}": round(med[f"{k}_{w}"], 2) for k in ("save", "load") for w in stores},
        "handoff_ratio_tmpfs_vs_disk": round(handoff["tmpfs"] / handoff["disk"], 3) if handoff["disk"] else None,
    }))
    return 0


if __name__ == "__main__":
    run_script(main)
