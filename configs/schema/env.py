"""The environment and its tasks (envs/)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal

GradeIsolation = Literal["suite", "per_test"]


@dataclass
class SWEEnvConfig:
    """swerve/SWE-v0's own settings (env.swe). Its sandbox is the run's: every command runs under
    sandbox.command_timeout_s, in a lease built from sandbox.*; the tasks it picks when reset gets
    none are tasks.source / tasks.split. env.kwargs entries with these names override them."""
    # Observations (command output, the grading report) are cut in the middle to this many characters.
    max_observation_chars: int = 2000
    # This many replies in a row without one bash block end the episode as format_error.
    max_consecutive_format_errors: int = 3
    # Time limit of the grading test run (FAIL_TO_PASS + PASS_TO_PASS, and applying test_patch).
    # A real repository's suite can take minutes (SWE-bench's harness allows 1800 s); a run that
    # hits the limit scores unresolved. A recipe of small suites lowers it, so an edit that makes
    # the tests loop forever costs a minute, not half an hour.
    grade_timeout_s: float = 1800.0
    # Time limit of listing the workspace (system side: before the agent's first command, and
    # when its change is read at grading). A repository too big to list in it is an infra error
    # at the start; a workspace the agent made unlistable scores 0 at grading.
    listing_timeout_s: float = 60.0
    # A change to a protected path (envs/grading/protection.py) scores 0 outright; false grades the
    # rest of the change. Either way the attempt records the paths (info["tampered"]).
    tamper_scores_zero: bool = True
    # How the listed tests run: "suite", one pytest process for all (SWE-bench's way); "per_test",
    # each in a pytest process of its own, so what one test's code does to pytest cannot reach
    # another's report (costs a pytest start per test: measured in BENCHMARKS.md).
    grade_isolation: GradeIsolation = "suite"
    # Bounds on what the agent can leave in its workspace for the system to read (the listing,
    # the change's capture, the graded view). Beyond any of them the attempt is the agent's own
    # outcome: unresolved, with the reason, never an infra error. Entries (files, folders, links)
    # and folder depth the listing walks, bytes of one path:
    listing_max_entries: int = 200_000
    listing_max_depth: int = 128
    max_path_bytes: int = 1024
    # A changed file larger than this, more changed files than this, or more changed bytes in all
    # than this: no fix needs them (SWE-bench's largest gold patches are ~100 kB), and reading
    # them back would cost the host their size in memory (a sparse file is cheap to make).
    max_file_bytes: int = 4 * 1024 * 1024
    max_changed_files: int = 2000
    max_change_bytes: int = 16 * 1024 * 1024
    # Harbor tasks: their [agent] and [verifier] timeout_sec are multiplied by this (a slow host,
    # a loaded one); the agent's is also capped by rollout.max_episode_seconds.
    harbor_timeout_multiplier: float = 1.0
    # Harbor tasks: the key of reward.json trained on ("reward" is Harbor's documented one; a file
    # with one key gives that key's value whatever its name).
    harbor_reward_key: str = "reward"


@dataclass
class HarnessConfig:
    """swerve/Harness-v0 (env.harness): an unmodified agent harness runs in the task's sandbox and
    talks to the policy through its own OpenAI-compatible session (actors/episodes/gateway.py)."""
    # "mini-swe-agent" (pinned 2.4.6, installed by the set-up), "tool-agent" (swerve's own small
    # harness, envs/harness_agents/tool_agent.py: tools run and finish) or "command" (env.harness.command).
    name: Literal["mini-swe-agent", "tool-agent", "command"] = "mini-swe-agent"
    # mini-swe-agent's configuration: its default (tool calling) or its text-based one.
    mini_swe_agent_config: Literal["default", "text"] = "default"
    # For name=command: a shell command run in the task's workspace inside the sandbox. It reads
    # OPENAI_BASE_URL / OPENAI_API_KEY and the task statement from SWERVE_TASK_FILE.
    command: str = ""
    # Host files or folders the harness needs, bound read-only into the sandbox at the same paths.
    files: List[str] = field(default_factory=list)
    # A request that does not extend the session's history: "split" starts a new segment (the
    # trajectory trains as several samples sharing its reward), "strict" refuses it (400).
    history: Literal["split", "strict"] = "split"
    # The harness's own limit on one model call (it must outlast the policy's reply under load).
    # Under swerve/Harness-v0 it must lie between sandbox.command_timeout_s and
    # rollout.max_episode_seconds (configs/loader.py), and the defaults do.
    step_timeout_s: float = 120.0
    # Model calls a harness gets: the last one's reply still acts (a harness that then ends is
    # graded); asking for one more ends the episode truncated.
    max_requests: int = 30
    # A request's own temperature differs from the rollout's: "record" it (sampling stays at the
    # rollout temperature), or "refuse" it (400).
    temperature_mismatch: Literal["record", "refuse"] = "record"


@dataclass
class EnvConfig:
    # Any id gymnasium.make accepts, including "module:Env-v0".
    id: str = "swerve/SWE-v0"
    # Handed to the env's constructor (envs/make.py). For swerve/SWE-v0 they override env.swe.
    kwargs: Dict[str, Any] = field(default_factory=dict)
    system_prompt: str = (
        "You are a software engineer fixing a bug in a Python repository. "
        "Reply with exactly one ```bash block holding one command. "
        "Run `submit` in a bash block when the tests pass."
    )
    swe: SWEEnvConfig = field(default_factory=SWEEnvConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)


@dataclass
class SynthConfig:
    """SWE-smith-style bug tasks made from a local repository (envs/tasks/synth): `swerve tasks synth`'s
    flags take their defaults from here, and a run's repository stream reads tasks.synth."""
    # Tasks to keep (validated mutations).
    num_tasks: int = 10
    # Seeds which mutations are tried, in what order, and the PASS_TO_PASS sample.
    seed: int = 0
    # Bound on the whole synthesis, the two baseline runs of the suite included.
    timeout_s: float = 1800.0
    # Bound on one test run of a mutated copy; 0: run_timeout_factor x the slower baseline run
    # + run_timeout_margin_s (a mutation that makes the suite loop is cut off, not waited for).
    per_run_timeout_s: float = 0.0
    run_timeout_factor: float = 3.0
    run_timeout_margin_s: float = 10.0
    # PASS_TO_PASS tests kept per task (a seeded sample when more still pass).
    max_p2p: int = 20
    # Mutator families tried (envs/tasks/synth/mutators.py FAMILIES); empty: every family.
    families: List[str] = field(default_factory=list)
    # Interpreter that runs the repository's tests; "": the one running swerve.
    python: str = ""
    # Stop after trying this many mutations; 0: no limit (only num_tasks and timeout_s stop it).
    max_candidates: int = 0
    # The problem statement details this many failing tests and lists at most max_listed.
    max_detailed_failures: int = 3
    max_listed_failures: int = 10


@dataclass
class TasksConfig:
    # "builtin" (hand-written suite), "micro" (generated one-function tasks for tiny models), or a
    # path to a task file or directory (SWE-bench / SWE-smith rows, Harbor tasks).
    source: str = "builtin"
    # Format of a path source; "" detects it from the path.
    format: str = ""
    split: str = "train"
    # Written by `swerve tasks validate`; training skips the tasks it lists. "" = the default
    # location for the source (under the swerve cache).
    quarantine_file: str = ""
    # Empty means every task of the split.
    ids: List[str] = field(default_factory=list)
    # tasks.split=stream (envs/tasks/stream.py): endless fresh tasks, each drawn once. Sources with a
    # stream: "micro", and a local Python repository with format "synth" (bugs injected into it).
    # The stream's seed: another seed draws other tasks.
    stream_seed: int = 0
    # A repository stream: how its bugs are made (its seed is stream_seed), and how many are made
    # ahead of the training run's demand, in the background.
    synth: SynthConfig = field(default_factory=SynthConfig)
    stream_lookahead: int = 8
    # Row files (`swerve tasks synth --out`) of a repository's held-out tasks: their bugs are never
    # handed out by its stream (compared by patch), so they can evaluate what RL on it learned.
    stream_held_out: List[str] = field(default_factory=list)
