"""The grading supervisor: runs a task's pytest command in the sandbox and carries its verdict out.

`python3 -I -S - INPUT` with this source on stdin, the grader's whole command
(envs/grading/reported_run.py), so the command's output is this process's own. INPUT, in the
workspace, is a JSON object {"plugin_source", "runner_source" (the report plugin's and the hidden
runner's sources), "command", "plugin" (the report plugin's module name),
"tests" (node ids), "changed_paths" (workspace paths
the agent changed), "per_test", "timeout_s", "shown_bytes", "mark", "hidden" (null, or the hidden
cases to run first: {"cases_json", "exclude", "timeout_s", "max_bytes"})}; it is read, then deleted.

Why a process of its own: the report must come through a channel the tested code cannot write.
This process makes itself non-dumpable first (so a process of the same user cannot open
/proc/<pid>/fd or attach to it), then for each run opens a pipe, hands only its write end to pytest
(SWERVE_REPORT_FD) and reads the other until every writer is gone. No path names the pipe; the
plugin closes its end once the report is written; a second writer (a process that kept a copy of
the descriptor) shows as bytes beyond the one report, and one still holding it after the run as a
channel left open: both make the run's report untrusted. With per_test, each listed test runs in a
pytest process of its own, so what one test's code does to pytest cannot reach another's report.

It prints the tail of the runs' output, then the frame "<mark> result", one line of base64 of the
zlib-compressed JSON {"runs": [{"tests": [...], "exit_code", "timed_out", "report" (the plugin's
text or null), "channel" ("" or why it cannot be trusted)}], "hidden": the hidden runner's results
text or null}, and "<mark> end".

Hidden cases (envs/tasks/hidden_runner.py) run first, before any test, in a process of their own
over a copy of the view without the test files: nothing the tests expect, and nothing their run
writes, is in reach of the code they call; the expected values never enter the sandbox.
Standard library only, Python 3.6+: it runs on the task's interpreter (a SWE-bench image's).
"""
import base64
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
import zlib

# A report larger than this is not one the plugin wrote for any real list of tests.
MAX_REPORT_BYTES = 64 << 20
# After pytest ended, how long a copy of the pipe's write end may stay open in something it started.
HOLD_GRACE_S = 2.0


def not_dumpable():
    """PR_SET_DUMPABLE 0: /proc/<pid>/fd and ptrace of this process need root from now on."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass  # an interpreter without ctypes: the pipe is still unnamed, only /proc stays open


def sealed(folder, name, data):
    """(path, fd) through which a child reads `data`: a memfd sealed against writing, growing and
    shrinking, named /proc/self/fd/N in the child (so nothing the tests or the hidden cases start
    can change what a later pytest process loads: the plugin, the ids, the changed paths). Where
    the interpreter cannot seal (Python < 3.8), a file in `folder` and fd None: same user, so an
    earlier run's leftover could rewrite it."""
    if not hasattr(os, "memfd_create") or not hasattr(fcntl, "F_ADD_SEALS"):
        path = os.path.join(folder, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path, None
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return "/proc/self/fd/{}".format(fd), fd


def plugin_archive(module, source):
    """The report plugin as a zip archive: a PYTHONPATH entry that can be a sealed memfd."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(module + ".py", source)
    return buffer.getvalue()


class PipeReader(threading.Thread):
    def __init__(self, fd):
        super().__init__(daemon=True)
        self.fd, self.chunks, self.size, self.overflow = fd, [], 0, False

    def run(self):
        while True:
            block = os.read(self.fd, 1 << 16)
            if not block:
                break
            self.size += len(block)
            if self.size > MAX_REPORT_BYTES:
                self.overflow = True
            else:
                self.chunks.append(block)
        os.close(self.fd)


# What a pytest process reads at start besides the tests: in per_test, one test's run must not
# leave any of them for the next (compiled modules too: a planted .pyc beside its source is used).
CONFIG_NAMES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py",
                "usercustomize.py"}
CONFIG_SUFFIXES = (".pth", ".pyc")


def config_state(root):
    """Path -> (mtime ns, size) of every file under `root` a pytest start reads as configuration."""
    state = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [name for name in dirs if name not in (".git", ".hg")]
        for name in files:
            if name in CONFIG_NAMES or name.endswith(CONFIG_SUFFIXES):
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue  # gone between the listing and the look: a change the next walk shows
                state[path] = (info.st_mtime_ns, info.st_size)
    return state


def changed_config(before, after):
    """The configuration files added, removed or rewritten between two states (sorted)."""
    return sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))


def run_pytest(spec, tests, out, deadline_s):
    """One pytest process over `tests` (a list of node ids): its exit code and what its pipe carried."""
    tests_path, tests_fd = sealed(spec["dir"], "run-tests.txt", "".join(test + "\n" for test in tests).encode("utf-8"))
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    env.update({"SWERVE_REPORT_FD": str(write_end), "SWERVE_REPORT_TESTS": tests_path,
                "SWERVE_REPORT_CHANGED": spec["changed"], "PYTHONNOUSERSITE": "1",
                "PYTHONPATH": spec["plugin_path"] + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")})
    command = "exec {} -p {}".format(spec["command"], spec["plugin"])
    reader = PipeReader(read_end)
    reader.start()
    inherited = [fd for fd in (write_end, tests_fd, *spec["sealed_fds"]) if fd is not None]
    child = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=env, pass_fds=inherited, start_new_session=True)
    os.close(write_end)
    if tests_fd is not None:
        os.close(tests_fd)
    timed_out = False
    try:
        code = child.wait(timeout=max(0.1, deadline_s - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(child.pid, signal.SIGKILL)
        code = child.wait()
    reader.join(HOLD_GRACE_S)
    channel = ""
    if reader.is_alive():
        channel = "a process the tests started still held the result channel after the run"
    elif reader.overflow:
        channel = "the result channel carried more than {} bytes".format(MAX_REPORT_BYTES)
    text = b"".join(reader.chunks).decode("utf-8", "replace") if not channel and reader.chunks else None
    return {"tests": tests, "exit_code": code, "timed_out": timed_out, "report": text, "channel": channel}


def remove_tree(path):
    """Delete a tree the tested code may have made unwritable (chmod 000 folders)."""
    def unlock(function, failed, _):
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
        function(failed)
    shutil.rmtree(path, onerror=unlock)


def run_hidden(hidden, folder, runner_source):
    """The hidden cases' results (the runner's JSON text, or None), run before any test: in a
    process of their own, over a copy of the view without the test files (hidden["exclude"]), with
    HOME and TMPDIR in a folder of their own; the copy is deleted once the runner ended."""
    view, home = os.path.join(folder, "view"), os.path.join(folder, "home")
    shutil.copytree(".", view, symlinks=True, ignore=shutil.ignore_patterns(".git", ".hg"))
    os.mkdir(home)
    for path in hidden["exclude"]:
        target = os.path.join(view, path)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.remove(target)
    cases, results = os.path.join(folder, "cases.json"), os.path.join(folder, "results.json")
    with open(cases, "w", encoding="utf-8") as handle:
        handle.write(hidden["cases_json"])
    runner_path = os.path.join(folder, "hidden_runner.py")
    with open(runner_path, "w", encoding="utf-8") as handle:
        handle.write(runner_source)
    env = dict(os.environ, HOME=home, TMPDIR=home, PYTHONNOUSERSITE="1")
    runner = subprocess.Popen([sys.executable, "-I", runner_path, cases, results],
                              cwd=view, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        runner.wait(timeout=float(hidden["timeout_s"]))
    except subprocess.TimeoutExpired:
        runner.kill()
        runner.wait()
    try:
        os.killpg(runner.pid, signal.SIGKILL)  # what the cases' code left running in the background
    except OSError:
        pass  # the group had ended: nothing was left
    text = None
    if os.path.isfile(results):
        with open(results, "rb") as handle:
            text = handle.read(int(hidden["max_bytes"]) + 1).decode("utf-8", "replace")
    remove_tree(view)
    remove_tree(home)
    return text


def main():
    not_dumpable()
    input_path = sys.argv[1]
    with open(input_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    try:
        os.remove(input_path)
    except OSError:
        pass  # written by another user (a container backend): it stays, read-only to the tests
    # Written by this process's own user, outside the workspace: a container backend's write_files
    # writes as another user, and the tests must not find the grader's files beside theirs.
    folder = tempfile.mkdtemp(prefix="swerve-grade.", dir="/tmp")
    spec["dir"] = folder
    hidden = run_hidden(spec["hidden"], folder, spec["runner_source"]) if spec.get("hidden") else None
    # Made after the hidden cases ran, sealed: nothing their code left running can alter them.
    spec["plugin_path"], plugin_fd = sealed(folder, "plugin.zip", plugin_archive(spec["plugin"], spec["plugin_source"]))
    changed = "".join(os.path.abspath(path) + "\n" for path in spec.pop("changed_paths")).encode("utf-8")
    spec["changed"], changed_fd = sealed(folder, "changed.txt", changed)
    spec["sealed_fds"] = [plugin_fd, changed_fd]
    deadline_s = time.monotonic() + float(spec["timeout_s"])
    log = os.path.join(folder, "out.log")
    runs = []
    with open(log, "wb") as out:
        if spec["per_test"]:
            start_state = config_state(".")
            for test in spec["tests"]:
                if time.monotonic() >= deadline_s:
                    runs.append({"tests": [test], "exit_code": 124, "timed_out": True, "report": None, "channel": ""})
                    continue
                planted = changed_config(start_state, config_state("."))
                if planted:
                    runs.append({"tests": [test], "exit_code": -1, "timed_out": False, "report": None,
                                 "channel": "an earlier test's run changed test configuration: {}".format(
                                     ", ".join(planted[:5]))})
                    continue
                out.write("\n== {} ==\n".format(test).encode("utf-8", "replace"))
                out.flush()
                runs.append(run_pytest(spec, [test], out, deadline_s))
        elif spec["tests"]:  # none: a command that runs the hidden cases alone
            runs.append(run_pytest(spec, spec["tests"], out, deadline_s))
    with open(log, "rb") as handle:
        handle.seek(max(0, os.path.getsize(log) - int(spec["shown_bytes"])))
        shown = handle.read()
    payload = base64.b64encode(zlib.compress(json.dumps({"runs": runs, "hidden": hidden}).encode("utf-8"))).decode("ascii")
    shutil.rmtree(folder, ignore_errors=True)
    sys.stdout.buffer.write(shown)
    sys.stdout.buffer.write("\n{0} result\n{1}\n{0} end\n".format(spec["mark"], payload).encode("ascii"))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
