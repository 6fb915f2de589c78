"""A rollout tree's prompts through the colocated vLLM engine at the tree's cost: each shared prefix computed once.

vLLM's prefix cache shares whole KV blocks only (its rule for a single-group model:
``KVCacheManager.get_computed_blocks`` caps a hit at ``request.num_tokens - 1`` and
``UnitaryKVCacheCoordinator.find_longest_cache_hit`` aligns it down to a block; a block is hashed only once full),
so each of a prompt's ``n`` samples (vLLM fans ``n`` out into ``n`` requests) recomputes the prompt's last partial
block, and a prompt that shares a trace with another one recomputes the shared part of the block where they part.
Two pieces remove that:

* :func:`share_partial_blocks` wraps the engine's scheduler (in-process engines only): a waiting request whose
  tokens go on matching, past its block-aligned hit, tokens a running request computed in an earlier step adopts that
  request's block as a partial hit. vLLM's own copy-on-write for partial hits (``add_local_computed_blocks`` records
  it, ``allocate_new_blocks`` redirects it to a private block, the worker copies the block before the step's forward)
  does the rest, so the request computes only its tokens past the match (a sample of an already computed prompt: its
  last token, for the logits).
* :func:`generate_in_waves` submits the requests in waves so that a source is computed before the requests that
  can adopt its block: a prompt after the earlier prompt it shares a partial block with, a prompt's samples after its
  first. Each sample is its own ``n=1`` request with the seed vLLM gives that child of an ``n`` request
  (``seed + index``), so the samples are the ones ``llm.generate`` with ``n`` draws.
"""

from __future__ import annotations

from typing import Any, Sequence


def _scheduler(llm: Any) -> Any:
    """The in-process engine core's scheduler, or None (a multiprocess engine)."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    return getattr(getattr(client, "engine_core", None), "scheduler", None)


def share_partial_blocks(llm: Any) -> bool:
    """Let the engine's waiting requests adopt a running request's partial block (see the module). Returns whether it
    is on: it needs an in-process engine with prefix caching and one full-attention KV cache group (the models this
    project serves); elsewhere the engine is left as it is."""
    sched = _scheduler(llm)
    manager = getattr(sched, "kv_cache_manager", None)
    coordinator = getattr(manager, "coordinator", None)
    if manager is None or not manager.enable_caching or getattr(sched, "_c3_partial", False):
        return bool(getattr(sched, "_c3_partial", False))
    managers = getattr(coordinator, "single_type_managers", ())
    if len(managers) != 1 or type(managers[0]).__name__ != "FullAttentionManager":
        return False
    single = managers[0]
    block = int(single.block_size)
    computed: dict[str, tuple[Any, int]] = {}  # running at the start of this step: request, tokens computed
    schedule, lookup = sched.schedule, manager.get_computed_blocks

    def counted_schedule(*args: Any, **kwargs: Any) -> Any:
        computed.clear()
        computed.update({r.request_id: (r, int(r.num_computed_tokens)) for r in sched.running})
        return schedule(*args, **kwargs)

    def get_computed_blocks(request: Any) -> Any:
        blocks, hit, boundary = lookup(request)
        k = int(hit) // block
        # still running with its blocks (a request preempted earlier in this step has freed them)
        live = [(r, c) for r, c in computed.values() if len(single.req_to_blocks.get(r.request_id, ())) > k
                and not single.req_to_blocks[r.request_id][k].is_null]
        found = _partial_source(request, int(hit), block, live)
        if found is None:
            return blocks, hit, boundary
        source, length = found
        adopted = type(blocks)((list(blocks.blocks[0]) + [single.req_to_blocks[source.request_id][k]],))
        return adopted, length, boundary

    sched.schedule, manager.get_computed_blocks = counted_schedule, get_computed_blocks
    sched._c3_partial = True
    return True


def _partial_source(request: Any, hit: int, block: int, running: Any) -> tuple[Any, int] | None:
    """The running request whose computed tokens match ``request``'s furthest past its block-aligned ``hit`` (within
    the next block, short of its last token), and the length of the match; None when none goes past ``hit``."""
    want = int(request.num_tokens) - 1
    if hit % block or hit >= want:
        return None
    k = hit // block
    end = min(want, (k + 1) * block)
    tokens = request.all_token_ids
    best, found = hit, None
    for other, done in running:
        if other is request or min(done, end) <= best:
            continue
        if k:  # the same chain of full blocks (the hash takes in the LoRA adapter and the cache salt)
            if len(other.block_hashes) < k or other.block_hashes[k - 1] != request.block_hashes[k - 1]:
                continue
        elif (_lora_id(other) != _lora_id(request)) or other.cache_salt != request.cache_salt:
            continue
        theirs, j, stop = other.all_token_ids, hit, min(done, end)
        while j < stop and theirs[j] == tokens[j]:
            j += 1
        if j > best:
            best, found = j, other
    return None if found is None else (found, best)


def _lora_id(request: Any) -> int | None:
    lora = getattr(request, "lora_request", None)
    return None if lora is None else int(lora.lora_int_id)


def wave_plan(prompts: Sequence[Sequence[int]], n: Sequence[int], block: int) -> list[list[int]]:
    """Per prompt, the wave of each of its samples: a prompt goes one wave after the earlier prompt it shares the most
    tokens with, when that share ends inside a block (a whole-block share is found in the same wave); its first sample
    in that wave, the others in the next."""
    first: list[int] = []
    for i, ids in enumerate(prompts):
        wave, best = 0, 0
        for j in range(i):
            other = prompts[j]
            m, stop = 0, min(len(ids) - 1, len(other))
            while m < stop and ids[m] == other[m]:
                m += 1
            if m > best and m % block:
                best, wave = m, first[j] + 1
            elif m > best:
                best, wave = m, first[j]
        first.append(wave)
    return [[w] + [w + 1] * (int(k) - 1) for w, k in zip(first, n)]


def generate_in_waves(llm: Any, prompts: Sequence[Any], params: Sequence[Any], lora: Sequence[Any] | None,
                      block: int) -> list[list[Any]]:
    """``llm.generate(prompts, params, lora_request=lora)``'s completions (per prompt, its ``n`` outputs in order),
    submitted in the waves of :func:`wave_plan`: each wave is enqueued once the engine has computed the prompts of the
    waves before it. Each sample is an ``n=1`` request seeded as vLLM seeds that child of the ``n`` request."""
    sched = _scheduler(llm)
    plan = wave_plan([p["prompt_token_ids"] for p in prompts], [int(sp.n) for sp in params], block)
    waves: dict[int, list[tuple[int, int]]] = {}
    for i, samples in enumerate(plan):
        for s, w in enumerate(samples):
            waves.setdefault(w, []).append((i, s))
    owner: dict[str, tuple[int, int]] = {}
    done: dict[tuple[int, int], Any] = {}
    for w in sorted(waves):
        items = waves[w]
        child = [_child(params[i], s) for i, s in items]
        ids = llm.enqueue([prompts[i] for i, _ in items], child, use_tqdm=False,
                          lora_request=None if lora is None else [lora[i] for i, _ in items])
        # enqueue gives the engine's ids (the request counter's number and a random suffix); outputs carry the number
        owner.update((rid.rsplit("-", 1)[0], item) for rid, item in zip(ids, items))
        owner.update(zip(ids, items))
        while not _prefilled(sched) and llm.llm_engine.has_unfinished_requests():
            _collect(llm.llm_engine.step(), owner, done)
    while llm.llm_engine.has_unfinished_requests():
        _collect(llm.llm_engine.step(), owner, done)
    return [[done[(i, s)] for s in range(len(samples))] for i, samples in enumerate(plan)]


def _child(params: Any, index: int) -> Any:
    """The ``n=1`` parameters of child ``index`` of an ``n`` request (vLLM's ``ParentRequest``: seed + index)."""
    child = params.clone()
    child.n = 1
    if params.seed is not None:
        child.seed = int(params.seed) + index
    return child


def _prefilled(sched: Any) -> bool:
    """Whether every request the scheduler holds has its prompt computed (none waiting, none mid-prefill)."""
    running, waiting = sched.get_request_counts()
    return not waiting and all(r.num_computed_tokens >= r.num_prompt_tokens for r in sched.running)


def _collect(outputs: Any, owner: dict[str, tuple[int, int]], done: dict[tuple[int, int], Any]) -> None:
    for out in outputs:
        if out.finished:
            done[owner[out.request_id]] = out.outputs[0]
