"""Sandbox leases (envs/sandboxes/local_sandbox.py, docker_sandbox.py, e2b_sandbox.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Literal


# Sandbox backends (actors/episodes/sandbox_actor.py builds each from its SandboxConfig).
SandboxBackend = Literal["local", "docker", "e2b"]
SandboxIsolation = Literal["auto", "bwrap", "none"]
SandboxCgroup = Literal["auto", "required", "off"]


@dataclass
class SandboxConfig:
    backend: SandboxBackend = "local"
    # "auto" uses bubblewrap when installed, "bwrap" requires it, "none" runs unisolated.
    isolation: SandboxIsolation = "auto"
    memory_mb: int = 2048
    max_processes: int = 256
    max_file_mb: int = 64
    # Disk one lease's workspace may take on the host (0 = no quota). local: as root with loop
    # devices the workspace is its own ext4 image of this size (the file system's tables come out
    # of it), so a write past it fails in the agent's command; elsewhere the lease is measured after
    # every command and a workspace over it is put back to the task's initial state.
    # docker: --storage-opt size= where the daemon supports it (overlay2 on xfs with pquota);
    # e2b: the template fixes the disk, this is not enforced there.
    disk_mb: int = 512
    # Size cap of each of the jail's memory-backed scratch mounts (/tmp and /dev/shm; the rest of
    # /dev is read-only). What is written there is charged to memory_mb too.
    tmpfs_mb: int = 256
    # Time limit of one agent command (the env passes none of its own); grading has its own
    # limit, env.swe.grade_timeout_s.
    command_timeout_s: float = 20.0
    max_output_bytes: int = 1_000_000
    # Empty uses the system temporary directory (/var/tmp where that one is memory-backed). A
    # memory-backed root (tmpfs, ramfs) is refused: the agent's files would pin memory_mb.
    workdir_root: str = ""
    # Per-lease cgroup (local backend) holding pids.max=max_processes and a memory limit of
    # memory_mb over all of the lease's processes: as root RLIMIT_NPROC is not enforced, so
    # only a cgroup contains a fork bomb. "auto" uses one when the cgroup fs is writable
    # (else warns once), "required" fails the lease without one, "off" never uses one.
    cgroup: SandboxCgroup = "auto"
    # Warm pool: ready leases kept per task (workspace copied, probe run) so start() of a
    # task seen before takes one and refills in the background; 0 turns the pool off.
    pool_size: int = 1
    # How many distinct tasks keep ready leases (least recently started are dropped first).
    pool_tasks: int = 4
    # A ready lease older than this is closed instead of used (remote leases expire).
    pool_max_idle_s: float = 120.0
    # Where the repository lives inside a container (docker, e2b), overriding the task: "" takes
    # the task's own (Harbor's [environment] workdir), else its image's WORKDIR (docker), else
    # /workspace (envs/sandboxes/container_sandbox.py DEFAULT_WORKDIR), where a task without an image is
    # uploaded. Recipes whose images ship the repo elsewhere (SWE-bench: /testbed) set it.
    container_workdir: str = ""
    # E2B template used when a task has no image of its own.
    e2b_template: str = "base"
    # E2B sandbox lifetime in seconds, renewed (set_timeout) while the lease is used, so a
    # sandbox whose owner died expires on its own shortly after.
    e2b_timeout_s: int = 300
    # Outbound internet for E2B sandboxes: off, like the local and docker backends.
    e2b_allow_internet: bool = False
    # vCPUs of one sandbox (the reference run: 2). E2B fixes CPU and memory in the template
    # (`e2b template build --cpu-count 2 --memory-mb 4096`), so this records the recipe and feeds
    # the placement plan (actors/cluster/placement_plan.py); no backend enforces it yet. 0 = unspecified.
    vcpus: int = 0
    # Docker network of every lease: "none" (no network, like the local backend). A task that asks
    # for a network (Harbor's network_mode="public") is refused under "none"; naming a network
    # (e.g. bridge) lets such tasks run, and gives every lease that network.
    docker_network: str = "none"
    # Image for docker leases of tasks without an image of their own.
    docker_image: str = "python:3.11-slim"
    # User commands run as inside the container ("" keeps the image's user).
    docker_user: str = "1000:1000"
    # How long one docker CLI call (inspect, cp, rm; not a command, which has its own timeout)
    # may wait for the daemon before the lease is an infra error.
    docker_cli_timeout_s: float = 120.0
    # Host files or folders (absolute paths) bound read-only into every lease at the same path:
    # what an agent harness needs of the host (env.harness.files, its venv). local with bwrap and
    # docker bind them; e2b cannot (a cloud VM) and refuses a non-empty list. A missing path
    # fails the lease's start.
    ro_binds: List[str] = field(default_factory=list)
