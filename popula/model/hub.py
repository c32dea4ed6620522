"""A Hugging Face id that cannot be had fails in seconds, not after a minute of retries.

transformers retries a hub download several times before it gives up, which on a machine
without network is 40 s or more of silence and then a traceback-shaped error. A hub id is
therefore checked once, before anything loads: found in the local hub cache, fine; else the
hub must be reachable (a name lookup and a TCP connection, a few seconds at most).
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

from popula.errors import PopulaError

PROBE_SECONDS = 3.0
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def check_hub_id(repo_id: str) -> None:
    """PopulaError unless `repo_id`'s config is in the local hub cache or the hub can be reached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # transformers brings it; without it nothing could load the id anyway
        return
    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    if offline:
        why = "HF_HUB_OFFLINE is set"
    elif any(os.environ.get(name) for name in _PROXIES):
        return  # through a proxy the hub's own address says nothing; let the download try
    elif not _reachable(host, 443):
        why = f"{host} cannot be reached from this machine"
    else:
        return
    raise PopulaError(f"base_model {repo_id!r}: not in the local Hugging Face cache and {why}; use a registry model "
                      "(`popula models list`), `tiny`, or a local model directory, or download it where there is network")


def _reachable(host: str, port: int, seconds: float = PROBE_SECONDS) -> bool:
    """Whether a TCP connection to host:port opens within `seconds`, the name lookup included
    (which `socket`'s own timeout does not bound, hence the thread)."""
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=seconds):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(result and result[0])
