"""A vLLM generation server on its own GPUs (the separate-GPU layout of OpenRLHF and verl), and the trainer's
backend that samples through it.

The server is vLLM's own OpenAI-compatible HTTP server, started by :func:`command` (``python -m
c3_plugin.generation.server --model <folder> --port 8000``) with :class:`WeightLoader` as its worker
extension and vLLM's development endpoints on (``VLLM_SERVER_DEV_MODE=1``: ``/collective_rpc``,
``/reset_prefix_cache``). A config with ``vllm_server_url`` set samples through it
(:class:`ServerBackend`, the colocated backend's rules with HTTP in place of the in-process engine):

* each prompt's samples are one ``/v1/completions`` request with the prompt's token ids, the same sampling
  keywords and per-request seed as in-process, and the sampled token ids and their log-probs returned
  (``return_tokens_as_token_ids``, ``logprobs: 0``; the server runs with ``processed_logprobs``, so they are
  the temperature-scaled behaviour log-probs); the trainer's recomputation and the mismatch metric are as
  in-process;
* weights: before the first request and after every update the trainer writes the policy's weights (the
  engine's dtype, in the checkpoint's naming) to a safetensors file in ``weights_dir`` and asks every worker
  of the server to load it in place (``/collective_rpc`` -> :meth:`WeightLoader.c3_load_weights`), then resets
  the server's prefix cache. ``weights_dir`` must be a folder the server can read at the same path (the
  loopback layout, or a shared file system between the trainer and generation nodes).

Not served: forced JSON skeletons (``grammar``, the travel domain) and LoRA adapters (the merged weights are
pushed instead); one trainer process per server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import torch

from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions, rank_world, retie_output_embeddings

EXTENSION = "c3_plugin.generation.server.WeightLoader"


class WeightLoader:
    """Worker extension of the server (mixed into each vLLM worker): load pushed weights in place."""

    def c3_load_weights(self, path: str) -> None:
        """Load the safetensors file ``path`` into the worker's model through vLLM's in-place reload (each layer's
        post-load processing runs again), then re-tie tied embeddings."""
        from safetensors.torch import load_file

        self.reload_weights(weights_iterator=iter(load_file(path).items()))
        retie_output_embeddings(self.model_runner.model)


def command(model: str, host: str = "127.0.0.1", port: int = 8000, *, dtype: str = "auto",
            kv_cache_gb: float | None = None, max_model_len: int | None = None, gpu_memory_utilization: float = 0.9,
            enforce_eager: bool = True, extra: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start the server on ``model`` (a Hugging Face model folder)."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", host, "--port",
            str(port), "--dtype", dtype, "--worker-extension-cls", EXTENSION, "--enable-prefix-caching",
            "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
            "--gpu-memory-utilization", str(gpu_memory_utilization)]
    if kv_cache_gb is not None:
        argv += ["--kv-cache-memory-bytes", str(int(kv_cache_gb * 2**30))]
    if max_model_len is not None:
        argv += ["--max-model-len", str(int(max_model_len))]
    if enforce_eager:
        argv.append("--enforce-eager")
    # the server's own engine process
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    return argv + list(extra), {**env, "VLLM_SERVER_DEV_MODE": "1"}


def wait_ready(url: str, timeout_s: float = 600.0, process: subprocess.Popen | None = None) -> None:
    """Block until the server at ``url`` answers ``/health`` (or ``process`` exits, or ``timeout_s`` passes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with code {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1.0)
    raise TimeoutError(f"the vLLM server at {url} did not answer /health within {timeout_s:.0f} s")


class Client:
    """The HTTP calls the trainer makes to the server."""

    def __init__(self, url: str, timeout_s: float = 600.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        models = self._call("GET", "/v1/models")["data"]
        self.model = models[0]["id"]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"vLLM server {self.url}{path}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc
        except urllib.error.URLError as exc:
            raise ConnectionError(f"vLLM server {self.url} is not reachable ({exc.reason}); start it with "
                                  "python -m c3_plugin.generation.server --model <folder> --port <port>") from exc
        return json.loads(raw) if raw else None

    def complete(self, prompt_ids: list[int], kwargs: dict[str, Any]) -> list[tuple[list[int], list[float]]]:
        """One prompt's samples: ``(token ids, log-probs)`` per choice, in choice order."""
        body = {"model": self.model, "prompt": list(prompt_ids), "return_tokens_as_token_ids": True, **kwargs}
        choices = sorted(self._call("POST", "/v1/completions", body)["choices"], key=lambda c: c["index"])
        out = []
        for c in choices:
            lp = c.get("logprobs") or {}
            ids = [int(t.split(":", 1)[1]) for t in lp.get("tokens") or []]
            out.append((ids, [float(x) for x in lp.get("token_logprobs") or []]))
        return out

    def load_weights(self, path: str) -> None:
        self._call("POST", "/collective_rpc", {"method": "c3_load_weights", "args": [path]})

    def reset_prefix_cache(self) -> bool:
        self._call("POST", "/reset_prefix_cache")
        return True


class ServerBackend(VLLMBackend):
    """The colocated backend's contract and settings, sampling through a running server (module docstring)."""

    def __init__(self, fallback: Any, url: str, options: VLLMOptions = VLLMOptions(), weights_dir: str | None = None):
        super().__init__(fallback, options)
        self.url = url
        self.weights_dir = weights_dir
        self._pushes = 0

    def _start(self, agent: int) -> None:
        t0 = time.perf_counter()
        self.rank, self.world = rank_world()
        if self.world > 1:
            raise ValueError("vllm_server_url serves one trainer process; under torchrun use the colocated engines "
                             "(generation_backend: vllm without vllm_server_url)")
        if self.fallback.grammar is not None:
            raise ValueError("a vLLM server does not serve forced JSON skeletons (grammar); use the colocated engine")
        self.llm = Client(self.url)
        self._dir = self.weights_dir or tempfile.mkdtemp(prefix="c3-vllm-server-")
        os.makedirs(self._dir, exist_ok=True)
        self.serve_lora = False
        self.timings["engine_start_s"] += time.perf_counter() - t0
        self._push(agent)  # the server started from a folder: it serves the policy only once pushed

    def load_weights(self, weights: Sequence[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save_file

        self._pushes += 1
        path = os.path.join(self._dir, f"push-{os.getpid()}-{self._pushes}.safetensors")
        save_file({n: t.detach().cpu().contiguous() for n, t in weights}, path)
        try:
            self.llm.load_weights(path)
        finally:
            os.remove(path)

    def _engine_generate(self, agent: int, encoded: Sequence[list[int]], kwargs: Sequence[dict[str, Any]],
                         keys: Sequence[int | None]) -> list[list[tuple[list[int], list[float]]]]:
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(encoded)))) as pool:  # the server batches them
            return list(pool.map(self.llm.complete, [list(ids) for ids in encoded], kwargs))

    def sleep(self) -> None:  # the server's GPUs are its own: nothing to free on the trainer's
        pass

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        self.llm = None
        if self._dir is not None and self.weights_dir is None:
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m c3_plugin.generation.server --model <folder> [--host H] [--port P] [vLLM options...]``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="a Hugging Face model folder (the policy's architecture and tokenizer)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    parser.add_argument("--dtype", default="auto", help="engine dtype (default: %(default)s)")
    parser.add_argument("--kv-cache-gb", type=float, default=None,
                        help="KV cache size in GiB (default: vLLM's, from the GPU memory)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                        help="share of each GPU the server takes (default: %(default)s)")
    args, extra = parser.parse_known_args(argv)
    cmd, env = command(args.model, args.host, args.port, dtype=args.dtype, kv_cache_gb=args.kv_cache_gb,
                       gpu_memory_utilization=args.gpu_memory_utilization, extra=extra)
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
