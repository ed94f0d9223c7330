"""`swerve bench turn_overhead`: the control plane's cost of one agent turn.

One episode runs the real path, episode -> router -> engine actor -> sandbox actor and back,
against a zero-work engine (engine.backend=sim with no decode time) and a no-op command
(`true`). The per-turn cost is the difference between episodes of 2 and 2 + EXTRA_TURNS turns
(the fastest of EPISODES_PER_LENGTH each) over EXTRA_TURNS, so the sandbox start and the
end-of-episode patch capture cancel out. Beside it, the parts: a warm Ray actor call (the
baseline), one zero-work generate through the router, one `exec` through the sandbox actor, and
the same command run by LocalSandbox in-process.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

from configs import Config

# 60, not 20: at 20 the extra turns (~1-3 ms each) were smaller than the noise of an episode's fixed
# costs (its sandbox start and patch capture) on a loaded machine, and a CI run measured -1.9 ms.
EXTRA_TURNS = 60
# Episodes of each length per repetition, the fastest kept: a turn's cost is a difference of two
# episodes' walls, and one sample each went negative once on a loaded machine (other work only adds).
EPISODES_PER_LENGTH = 3
CALLS = 50  # per part, per repetition


def _median_call_s(fn, calls: int = CALLS) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def turn_overhead(cfg: Config, repetitions: int) -> dict:
    import ray

    from actors.engines.engine_router import EngineRouter
    from actors.episodes.episode_actor import EpisodeActor
    from actors.fleet.launch import init_ray, namespace
    from actors.fleet.remote import NamedEngines, SandboxLease, create_engine, engine_call
    from actors.episodes.trajectory import WorkItem
    from envs.sandboxes.local_sandbox import LocalSandbox
    from envs.validate import trainable_tasks
    from policies.chat.chat_tokenizer import load_chat_tokenizer
    from policies.chat.conversation import Conversation
    from actors.stages.policy_setup import ensure_policy
    from policies.sample_types import SampleRequest

    init_ray(cfg)
    ns = namespace(cfg)
    tokenizer_path, model_path = ensure_policy(cfg)
    task = trainable_tasks(cfg.tasks)[0][0]
    sim = replace(cfg.engine.sim, step_base_s=0.0, step_per_request_s=0.0, cap_fraction=1.0, command="true",
                  tokens_per_turn_min=24, tokens_per_turn_max=24)
    engine = create_engine(replace(cfg.engine, backend="sim", sim=sim), 0, model_path, ns)
    router = EngineRouter([engine], engine_call, lookup=NamedEngines(ns))
    lease = SandboxLease(0, cfg.sandbox, ns, label="turn-bench")  # no fault plan: nothing injected
    local = LocalSandbox(cfg.sandbox)
    episodes = {turns: EpisodeActor(0, replace(cfg.rollout, max_turns=turns, max_tokens_per_turn=64,
                                               max_total_tokens=32768, max_episode_seconds=600.0),
                                    cfg.env, cfg.sandbox, tokenizer_path, router, None, lease)
                for turns in (2, 2 + EXTRA_TURNS)}
    prompt = Conversation(load_chat_tokenizer(tokenizer_path), cfg.env.system_prompt, task.problem_statement).token_ids
    request = SampleRequest(list(prompt), 64, seed=1)
    runs = []
    try:
        lease.start(task)
        local.start(task)
        for rep in range(repetitions):
            episode_s = {turns: [] for turns in episodes}
            for sample in range(EPISODES_PER_LENGTH):  # interleaved: a busy moment touches both lengths
                for turns, episode in episodes.items():
                    work = WorkItem(task, task.id, rep, sample, 0, 0, seed=rep)
                    started = time.perf_counter()
                    traj = episode.run_episode(work)
                    episode_s[turns].append(time.perf_counter() - started)
                    if traj.turns != turns or traj.is_infra_error:
                        raise RuntimeError(f"the benchmark episode ended after {traj.turns} of {turns} turns "
                                           f"({traj.outcome}: {traj.error})")
            episode_s = {turns: min(times) for turns, times in episode_s.items()}
            runs.append({
                "turn_s": (episode_s[2 + EXTRA_TURNS] - episode_s[2]) / EXTRA_TURNS,
                "ray_call_s": _median_call_s(lambda: ray.get(engine.ping.remote(1.0))),
                "generate_s": _median_call_s(lambda: router.generate(request, "bench")),
                "sandbox_exec_s": _median_call_s(lambda: lease.exec("true")),
                "local_exec_s": _median_call_s(lambda: local.exec("true")),
            })
    finally:
        lease.close()
        local.close()
        ray.kill(engine)
    parts = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    median_s = parts.pop("turn_s")
    return {
        "figure": "one agent turn (zero-work engine, no-op command) / one warm Ray actor call",
        "ratio": median_s / parts["ray_call_s"], "baseline": parts["ray_call_s"], "bound": None,
        "target": "median <= 0.003 s", "met": median_s <= 0.003,
        "median_s": median_s, "parts_median_s": parts, "runs": runs,
        "setup": {"extra_turns": EXTRA_TURNS, "calls_per_part": CALLS, "sandbox": cfg.sandbox.backend,
                  "isolation": cfg.sandbox.isolation, "task": task.id},
    }
