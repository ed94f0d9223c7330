"""Harbor's verifier (Task.harbor): run the task's tests/test.sh on the attempt and read its reward.

shared: in the agent's own container, after the workspace holds the graded view
(envs/grading/pristine_view.py). What the agent left outside the workspace is emptied first (/tests,
/logs/verifier, /solution and /tmp: a reward it planted, a test it wrote there); then tests/ is
copied to /tests and `bash /tests/test.sh` runs in the workspace as the agent's user. Its
leftover processes end with the command (the docker lease ends every process of that user), so
the reward files are read afterwards by a command of ours alone.

separate: the agent's container never holds the tests. Its artifacts (Harbor's /logs/artifacts
and task.toml's `artifacts`) are packed there after the graded view is laid, copied out in
chunks through the sandbox's own exec (at most env.swe.max_change_bytes), stripped of links,
devices and set-id bits, and unpacked into a fresh container of the verifier image
(envs/sandboxes/verifier_container.py), where test.sh runs; nothing else of the agent's container gets there.

Either way the reward is read by envs/grading/harbor_reward.py, and only from the reward files the
verifier's own files name (HarborVerifier.reward_files). The limit is [verifier] timeout_sec
times env.swe.harbor_timeout_multiplier; a run that hits it scores what its reward file says
(usually nothing: 0).
"""
from __future__ import annotations

import base64
import io
import posixpath
import re
import secrets
import shlex
import tarfile
from typing import Optional

from configs.schema import SandboxConfig, SWEEnvConfig
from envs.grading.grader import SHOWN_OUTPUT_BYTES, GradeResult
from envs.grading.harbor_reward import MAX_REWARD_BYTES, read_reward
from envs.tasks.loaders.harbor import SOLUTION_DIR, VERIFIER_LOGS_DIR, VERIFIER_TESTS_DIR
from envs.outcomes import InfraError, InfraSource
from envs.sandboxes.sandbox import Sandbox
from envs.tasks.task import HarborVerifier, Task
from envs.sandboxes.verifier_container import VerifierContainer

# Bytes of one upload command (base64 of a file piece): well under Linux's 128 KiB per argument.
UPLOAD_PIECE_BYTES = 64 * 1024
# Bytes of the artifacts' tar read back by one command (base64 grows it by a third: it must fit
# sandbox.max_output_bytes, 1 MB by default).
READ_PIECE_BYTES = 512 * 1024
_AGENT_SCRATCH = (VERIFIER_TESTS_DIR, VERIFIER_LOGS_DIR, SOLUTION_DIR, "/tmp")


def verify(sandbox: Sandbox, task: Task, swe: SWEEnvConfig, sandbox_cfg: SandboxConfig) -> GradeResult:
    spec = task.harbor
    if spec is None:
        raise ValueError(f"{task.id} is not a Harbor task")
    timeout_s = spec.timeout_s * swe.harbor_timeout_multiplier
    try:
        if spec.mode == "shared":
            ran = _shared(sandbox, spec, timeout_s)
        else:
            ran = _separate(sandbox, spec, timeout_s, swe, sandbox_cfg)
    except InfraError as error:
        raise InfraError(InfraSource.GRADER, f"verifying {task.id}: {error}") from error
    if isinstance(ran, str):  # what the agent left could not be carried to the verifier
        return GradeResult(resolved=False, test_status={}, exit_code=-1, output="", problems=[ran], reward=0.0)
    output, exit_code, files = ran
    reward = read_reward(files, swe.harbor_reward_key)
    problems = [reward.problem] if reward.problem else []
    shown = output[-SHOWN_OUTPUT_BYTES:] + f"\nreward: {reward.value:g}" + "".join(f"\ngrading: {p}" for p in problems)
    return GradeResult(resolved=reward.value >= 1.0, test_status={}, exit_code=exit_code, output=shown,
                       problems=problems, reward=reward.value)


def upload_files(sandbox: Sandbox, folder: str, files: tuple[tuple[str, str], ...]) -> None:
    """Write (relative path, base64 bytes) files under an absolute folder through exec, in pieces
    that fit one command line (the sandbox's write_file reaches the workspace only)."""
    for path, encoded in files:
        target = shlex.quote(posixpath.join(folder, path))
        data = base64.b64decode(encoded)
        pieces = [data[i:i + UPLOAD_PIECE_BYTES] for i in range(0, len(data), UPLOAD_PIECE_BYTES)] or [b""]
        for index, piece in enumerate(pieces):
            write = ">" if index == 0 else ">>"
            head = f"mkdir -p \"$(dirname {target})\" && " if index == 0 else ""
            _system(sandbox, f"{head}printf %s {base64.b64encode(piece).decode()} | base64 -d {write} {target}",
                    f"write {posixpath.join(folder, path)}")
    executable = [shlex.quote(posixpath.join(folder, path)) for path, _ in files if path.endswith(".sh")]
    if executable:
        _system(sandbox, "chmod +x " + " ".join(executable), "make the scripts executable")


def _system(sandbox: Sandbox, command: str, what: str) -> str:
    result = sandbox.exec(command)  # within sandbox.command_timeout_s
    if result.exit_code != 0:
        raise InfraError(InfraSource.GRADER, f"cannot {what} (exit {result.exit_code}): {result.output[-500:]}")
    return result.output


def _test_command(spec: HarborVerifier, tests_dir: str = VERIFIER_TESTS_DIR) -> str:
    env = " ".join(f"{key}={shlex.quote(value)}" for key, value in spec.env)
    return f"{'env ' + env + ' ' if env else ''}bash {tests_dir}/test.sh </dev/null 2>&1"


def _shared(sandbox: Sandbox, spec: HarborVerifier, timeout_s: float):
    # The agent's user owns all it left there, so it can always remove it (after chmod); /tmp and
    # /solution may also hold what the image's set-up left (another user's): only the agent's goes.
    folders, verifier = " ".join(_AGENT_SCRATCH), f"{VERIFIER_TESTS_DIR} {VERIFIER_LOGS_DIR}"
    emptied = sandbox.exec(f"chmod -R u+rwx {folders} 2>/dev/null; find {folders} -mindepth 1 -user \"$(id -u)\" "
                           f"-delete 2>/dev/null; find {verifier} -mindepth 1 -delete && mkdir -p {verifier}")
    if emptied.exit_code != 0:
        return f"grading could not empty {verifier} of what the agent left: {emptied.output[-300:]}"
    upload_files(sandbox, VERIFIER_TESTS_DIR, spec.tests)
    run = sandbox.exec(_test_command(spec), timeout_s=timeout_s)
    return run.output, run.exit_code, _read_rewards(sandbox, spec)


def _read_rewards(sandbox: Sandbox, spec: HarborVerifier) -> dict[str, Optional[bytes]]:
    """The reward files, by one command of ours (no process of the agent's or the tests' lives
    on), each framed by a nonce so nothing else in the output can pass for one."""
    nonce = secrets.token_hex(8)
    lines = [f"f={VERIFIER_LOGS_DIR}/{name}; if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then "
             f"printf '{nonce} {name} %s\\n' \"$(head -c {MAX_REWARD_BYTES + 1} \"$f\" | base64 -w0)\"; fi"
             for name in spec.reward_files]
    output = _system(sandbox, "; ".join(lines), "read the reward files")
    found = dict(re.findall(rf"^{nonce} (\S+) ([A-Za-z0-9+/=]*)$", output, re.MULTILINE))
    return {name: base64.b64decode(found[name]) if name in found else None for name in spec.reward_files}


def _separate(sandbox: Sandbox, spec: HarborVerifier, timeout_s: float, swe: SWEEnvConfig, sandbox_cfg: SandboxConfig):
    packed = export_artifacts(sandbox, spec.artifacts, swe.max_change_bytes)
    if isinstance(packed, str):
        return packed
    with VerifierContainer(sandbox_cfg, spec.image, spec.build_context) as box:
        box.root_sh(f"rm -rf {VERIFIER_LOGS_DIR} && mkdir -p {VERIFIER_LOGS_DIR} && chmod 777 {VERIFIER_LOGS_DIR}")
        if packed:
            box.put_tar(packed)
        if not spec.tests_in_image:
            box.root_sh(f"rm -rf {VERIFIER_TESTS_DIR}")
            box.put_tar(_tar_of(spec.tests), VERIFIER_TESTS_DIR)
        run = box.exec(_test_command(spec), timeout_s, {})
        files = {name: box.read(f"{VERIFIER_LOGS_DIR}/{name}", MAX_REWARD_BYTES) for name in spec.reward_files}
    return run.output, run.exit_code, files


def export_artifacts(sandbox: Sandbox, artifacts: tuple[str, ...], max_bytes: int):
    """The artifacts as a clean tar (b"" when none exists), or why they cannot be carried over
    (the agent's doing: too large, unreadable)."""
    nonce = secrets.token_hex(8)
    # Relative artifacts are the workspace's: the command starts there.
    names = " ".join(shlex.quote(path.lstrip("/")) if path.startswith("/") else f"\"${{wd#/}}\"/{shlex.quote(path)}"
                     for path in artifacts)
    script = (f"wd=$(pwd); t=$(mktemp /tmp/swerve-artifacts.XXXXXXXX) || exit 97; cd / && "
              f"tar -cf \"$t\" --ignore-failed-read {names} 2>/dev/null; s=$?; "
              f"printf '{nonce} %s %s %s\\n' \"$s\" \"$(stat -c %s \"$t\")\" \"$t\"")
    packed = sandbox.exec(script)
    if packed.timed_out:  # what the agent left takes that long to read (millions of files)
        return "the artifacts could not be packed within sandbox.command_timeout_s"
    head = re.search(rf"^{nonce} (\d+) (\d+) (\S+)$", packed.output, re.MULTILINE)
    if head is None:
        raise InfraError(InfraSource.GRADER, f"packing the artifacts printed no size: {packed.output[-300:]}")
    status, size, path = int(head.group(1)), int(head.group(2)), head.group(3)
    try:
        if status != 0:  # an artifact not made is no error (--ignore-failed-read): a file too large is
            return f"the artifacts could not be packed (tar exit {status}; sandbox.max_file_mb bounds one file)"
        if size > max_bytes:
            return f"the artifacts hold {size} bytes, over env.swe.max_change_bytes ({max_bytes})"
        data = b"".join(
            base64.b64decode(_system(sandbox, f"tail -c +{offset + 1} {path} | head -c {READ_PIECE_BYTES} | base64 -w0",
                                     "read the artifacts").strip())
            for offset in range(0, size, READ_PIECE_BYTES))
    finally:
        sandbox.exec(f"rm -f {path}")
    return clean_tar(data, artifacts)


def clean_tar(data: bytes, artifacts: tuple[str, ...]) -> bytes:
    """Only folders and regular files, with plain modes and root's ownership (no links, devices,
    FIFOs or set-id bits reach the verifier), each under an artifact path, named relative to /."""
    if not data:
        return b""
    out = io.BytesIO()
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as source, tarfile.open(fileobj=out, mode="w") as target:
            for member in source:
                name = posixpath.normpath(member.name.lstrip("/"))
                if name.startswith("..") or not (member.isfile() or member.isdir()):
                    continue
                info = tarfile.TarInfo(name)
                info.type, info.size, info.mtime = member.type, member.size, member.mtime
                info.mode = member.mode & 0o777
                target.addfile(info, source.extractfile(member) if member.isfile() else None)
    except tarfile.TarError as error:  # tar wrote it whole and nothing ran since: the copy broke it
        raise InfraError(InfraSource.GRADER, f"the artifacts' tar came back unreadable: {error}") from error
    return out.getvalue()


def _tar_of(files: tuple[tuple[str, str], ...]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path, encoded in files:
            data = base64.b64decode(encoded)
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755 if path.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
