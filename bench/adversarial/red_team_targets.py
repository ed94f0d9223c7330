"""The tasks the red-team catalogues are played on: one of each shape grading has to hold for.

- builtin: textkit-003 (a one-character bug in textkit.wrap.truncate; hidden cases, detectors);
- micro: a generated one-function task (mod.py; hidden cases, detectors);
- swebench: textkit-003 made SWE-bench-shaped: a git repository at the base commit whose tests
  arrive with the task's test_patch, graded under the swebench policy (no hidden cases, no
  detectors: real repositories use reflection legitimately);
- image: textkit-003's row of the built-in suite as SWE-bench-style image rows
  (envs/tasks/builtin/image_tasks.jsonl): its repository in its own image at /testbed, its tests
  only in the row's test_patch, played in a docker container (`python -m envs.image_suite build`
  builds the image; `Target.lease` opens the container).
Each target names the source file and function an attempt aims at, and the gold fix as a shell
command, so the catalogues can check that an honest episode still resolves after an attempt.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, Optional

from configs.schema import SandboxConfig
from envs import image_suite

from envs.grading.grader import patched_files
from envs.tasks.loaders import load_tasks
from envs.tasks.task import Task

BUILTIN_TASK_ID = "textkit-003"
MICRO_TASK_ID = "micro-eval-003"


@dataclass(frozen=True)
class Target:
    format: str
    task: Task
    # The file and function holding the bug, and a command that applies the gold fix.
    source: str
    function: str
    # The sandbox section this shape is played under, over the caller's (image rows: a container).
    sandbox: Dict[str, object] = field(default_factory=dict)

    @property
    def fix_command(self) -> str:
        # The image rows' base image holds git but not patch(1); git apply needs no repository.
        tool = "git apply" if self.format == "image" else "patch -p1"
        return f"{tool} <<'SWERVE_GOLD'\n{self.task.gold_patch}SWERVE_GOLD"

    def sandbox_config(self, workdir_root: str) -> SandboxConfig:
        return SandboxConfig(**{"workdir_root": workdir_root, **self.sandbox})

    def lease(self, workdir_root: str):
        """The sandbox the env must be handed for this shape, or None where the env's own local
        one serves (SWEEnv alone only ever builds a local sandbox)."""
        if self.sandbox.get("backend") != "docker":
            return None
        from envs.sandboxes.docker_sandbox import DockerSandbox

        return DockerSandbox(self.sandbox_config(workdir_root))


def _swebench_shaped(builtin: Task, root: Path) -> Task:
    """The built-in task as SWE-bench ships one: the repository without the tests the task adds,
    committed, and the tests as a test_patch applied at grading."""
    repo = root / "swebench-textkit"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(builtin.workspace_dir, repo)
    test_file = builtin.fail_to_pass[0].split("::", 1)[0]
    content = (repo / test_file).read_text()
    (repo / test_file).unlink()
    git = ["git", "-c", "user.name=swerve", "-c", "user.email=swerve@localhost", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    lines = content.splitlines(keepends=True)
    test_patch = (f"diff --git a/{test_file} b/{test_file}\nnew file mode 100644\n--- /dev/null\n+++ b/{test_file}\n"
                  f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}" for line in lines))
    assert patched_files(test_patch) == [test_file]
    return dataclasses.replace(builtin, id="swebench-textkit-003", workspace_dir=str(repo), source="swebench",
                               test_files=(), test_patch=test_patch, hidden_cases=())


@contextmanager
def image_engine() -> Iterator[Optional[str]]:
    """A Docker engine while the block runs, with the image target's image built: yields None, or
    why the image target cannot be played here. An engine started here (none answered) is
    stopped after, by its pid."""
    from envs.sandboxes import docker_engine

    pid, reason = docker_engine.start_engine()
    try:
        if reason is None:
            docker_engine.ensure_base_image()
            image_suite.build([BUILTIN_TASK_ID])
        yield reason
    finally:
        if pid is not None:
            docker_engine.stop_engine(pid)


def targets(root: Path) -> Dict[str, Target]:
    """Format -> target; the SWE-bench-shaped repository is built under `root`. The image target
    needs its image built (`image_engine`, or `python -m envs.image_suite build`) before it is played."""
    builtin = load_tasks("builtin", "all", [BUILTIN_TASK_ID])[0]
    micro = load_tasks("micro", "eval", [MICRO_TASK_ID])[0]
    micro_function = micro.fail_to_pass[0].split("::test_", 1)[1][:-len("_bug")]
    return {
        "builtin": Target("builtin", builtin, "textkit/wrap.py", "truncate"),
        "micro": Target("micro", micro, "mod.py", micro_function),
        "swebench": Target("swebench", _swebench_shaped(builtin, root), "textkit/wrap.py", "truncate"),
        "image": Target("image", load_tasks(str(image_suite.ROWS_FILE), "all", [BUILTIN_TASK_ID])[0], "textkit/wrap.py",
                        "truncate", {"backend": "docker", "container_workdir": image_suite.WORKDIR}),
    }
