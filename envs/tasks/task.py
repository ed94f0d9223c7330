"""The format-independent task record, and what a load returns (tasks and the rows it skipped).

The loaders that fill them, one per format, and `load_tasks` / `load_task_set`, which read any
supported source, are in `envs/tasks/loaders/`.

Splits: a row (or Harbor task.toml [metadata]) may carry a `split` field; a task without one
is in split "train". `split="all"` selects every task whatever its split.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Literal, Optional

ALL_SPLITS = "all"
DEFAULT_SPLIT = "train"


@dataclass(frozen=True)
class HiddenCase:
    """One call the trusted grader makes on the fixed repository, never shown to the agent:
    `module.function(*args)` must return `expected`. Both are JSON of plain values (null, bool,
    int, float, str, lists, objects with str keys; an exact tuple travels as {"__tuple__": [...]}),
    compared by the host after the call, outside the tested process: an object that compares equal
    to anything, or one that reads the expected value from a test's frame, cannot pass
    (envs/tasks/hidden_cases.py, envs/tasks/hidden_runner.py).

    The fields after the first four reach bugs in methods and in raised exceptions; their defaults
    keep a four-field case (micro tasks build them positionally) a plain function call."""
    # Dotted module importable from the workspace root, and a function defined in it (a dotted
    # path inside the module, e.g. "Money.parse", is resolved attribute by attribute).
    module: str
    function: str
    # JSON text of the positional arguments (a list) and of the expected return value: with
    # `raises`, the JSON of `result_attrs` read from the exception ("null" without them).
    args_json: str
    expected_json: str
    # JSON list of constructor arguments: `function` is then "Class.method", called on
    # `Class(*init)`; "" for no receiver ("[]" is a receiver built without arguments).
    init_json: str = ""
    # JSON list of [method, args] calls made on the receiver, in order, before the graded one
    # (stock added before it is counted); their results are not graded.
    steps_json: str = ""
    # Attributes read from the result (from each item of an exact list) or from the raised
    # exception, graded as {name: value}: an object's own __eq__ or __str__ is never trusted.
    result_attrs: tuple[str, ...] = ()
    # Whether {"new": "Class", "args": [...]} in args, init and steps is built as
    # module.Class(*args); off, such a dict is a plain argument.
    objects: bool = False
    # "module.qualname" of the exception class the call must raise (exact class, resolved by
    # name in the sandbox and checked by identity); "" when it must return.
    raises: str = ""

    def __post_init__(self) -> None:
        if self.steps_json and not self.init_json:
            raise ValueError(f"hidden case {self.module}:{self.function}: steps need a receiver (init_json)")


@dataclass(frozen=True)
class HarborVerifier:
    """How a Harbor task is verified (envs/grading/harbor_verifier.py), read from its task.toml and tests/
    by envs/tasks/loaders/harbor.py. `shared`: tests/ is copied to /tests in the agent's own container
    after the episode and `bash /tests/test.sh` runs there, in the workspace. `separate`: the
    agent's container never holds the tests; its artifacts are copied into a fresh container of
    the verifier image, where test.sh runs. Either way the reward is read from /logs/verifier."""
    mode: Literal["shared", "separate"]
    # Files of tests/ as (path relative to tests/, base64 of the bytes): tool leftovers left out.
    tests: tuple[tuple[str, str], ...]
    # separate: the verifier image, built from build_context when that is set (tests/ holding a
    # Dockerfile, which bundles the tests itself: tests_in_image), else pulled by name.
    image: str = ""
    build_context: str = ""
    tests_in_image: bool = False
    # separate: absolute paths (or workspace-relative ones) copied from the agent's container.
    artifacts: tuple[str, ...] = ()
    # Reward files read, in Harbor's order: those the verifier's own files name (a reward file its
    # scripts never write is one only the tested code could have written).
    reward_files: tuple[str, ...] = ("reward.json", "reward.txt")
    # [verifier] timeout_sec (times env.swe.harbor_timeout_multiplier).
    timeout_s: float = 600.0
    # [verifier.env]: set for test.sh.
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Task:
    id: str
    repo: str
    # Directory holding the buggy repository state, copied into each sandbox lease; "" when
    # the repository lives in `image` (container backends only).
    workspace_dir: str
    problem_statement: str
    test_command: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    # Unified diff (a/ b/ prefixes) that fixes the bug; applies with `patch -p1`.
    gold_patch: str
    stratum: str
    # (relative path, pristine content): restored before grading so edited tests cannot cheat.
    test_files: tuple[tuple[str, str], ...]
    # Shell commands a container backend runs once at lease start, as root, in one shell in the
    # workspace, before it is snapshot (SWE-smith: apply the bug); the variables they set (an
    # activated conda env) reach every later command and the grader (envs/sandboxes/container_sandbox.py).
    setup: tuple[str, ...] = ()
    split: str = ""
    # Where the task came from: "builtin", "swebench", "swesmith", "harbor", ...
    source: str = "builtin"
    # Container image holding the repository, for container backends (docker, e2b); "" when
    # workspace_dir alone is enough (local sandbox).
    image: str = ""
    # SWE-bench test_patch: applied (git apply) before grading instead of restoring test_files.
    test_patch: str = ""
    # Directory with a Dockerfile that builds `image` when it cannot be pulled (Harbor's
    # environment/); "" when the image is pulled by name.
    build_context: str = ""
    # Shell script that solves the task when the fix is a script, not a diff (Harbor's
    # solution/solve.sh); the sanity gate runs it when gold_patch is empty.
    gold_script: str = ""
    # The kind of bug (micro and built-in tasks: their generator's family), for per-family
    # tables; "" when the source does not say (eval then groups by repository).
    family: str = ""
    # Globs (fnmatch, workspace-relative) the agent may not change beyond the format's policy
    # (envs/grading/protection.py), and globs exempted from it.
    protected_paths: tuple[str, ...] = ()
    unprotected_paths: tuple[str, ...] = ()
    # Absolute folders outside the workspace that grading writes (Harbor's verifier: its tests
    # and its reward file); a container with a read-only root gets them as fresh tmpfs.
    scratch_dirs: tuple[str, ...] = ()
    # Calls graded beside the tests, on swerve's own task families (micro, built-in, synthesized):
    # never in the workspace, so no test, frame or file in the agent's reach holds their answers.
    hidden_cases: tuple[HiddenCase, ...] = ()
    # The agent's working directory in a container when the task says (Harbor's [environment]
    # workdir); "" leaves it to sandbox.container_workdir, else the image's WORKDIR.
    workdir: str = ""
    # Harbor's verifier: graded by its reward file instead of the SWE-bench rule; None otherwise.
    harbor: Optional[HarborVerifier] = None
    # Files the gold script needs beside it (Harbor's solution/, at /solution), as (path relative
    # to the folder, base64 of the bytes).
    gold_files: tuple[tuple[str, str], ...] = ()
    # Harbor's [agent] timeout_sec: the episode's wall-clock cap (times
    # env.swe.harbor_timeout_multiplier, at most rollout.max_episode_seconds); 0 = the run's cap.
    agent_timeout_s: float = 0.0
    # Network the task asks for: "none", or "public" (Harbor's network_mode), which only a sandbox
    # with a network (sandbox.docker_network) may run.
    network: Literal["none", "public"] = "none"


@dataclass(frozen=True)
class SkippedRow:
    # Which row: "<file>:<line>" (JSONL), "<file> row <n>" (JSON/parquet) or a Harbor task
    # directory, followed by "(<instance id>)" when the id could be read.
    row: str
    # The offending field, e.g. "FAIL_TO_PASS", "instance_id", "json", "task.toml".
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.row}: field {self.field!r}: {self.reason}"


@dataclass
class TaskSet:
    tasks: List[Task] = field(default_factory=list)
    skipped: List[SkippedRow] = field(default_factory=list)
    # Every split present in the source (before filtering), to name them when a split is empty.
    splits: set = field(default_factory=set)
