"""The grading supervisor: runs a task's pytest command in the sandbox and carries its verdict out.

`python3 -I -S - INPUT [DIR PID]` with this source on stdin, the last process of the grader's
command (envs/grading/reported_run.py), so the command's output is this process's own. DIR and
PID: the grader's folder and the hidden cases' runner, which the command started just before.
INPUT, in the workspace, is a JSON object {"plugin_source" (the report plugin's source), "command",
"plugin" (the report plugin's module name),
"tests" (node ids), "changed_paths" (workspace paths
the agent changed), "per_test", "timeout_s", "shown_bytes", "mark", "hidden" (null, or the hidden
cases' limits: {"timeout_s", "max_bytes"})}; it is read, then deleted.

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
writes, is in reach of the code they call; the expected values never enter the sandbox. The
command starts their runner before this interpreter, so the two start side by side.
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
    if not can_seal():
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


def start_pytest(spec, tests, out, gate_fd=None):
    """One pytest process over `tests` (a list of node ids), started; with gate_fd, it waits at the
    gate (the plugin reads it before any conftest or test loads) until this process opens it."""
    tests_path, tests_fd = sealed(spec["dir"], "run-tests.txt", "".join(test + "\n" for test in tests).encode("utf-8"))
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    env.update({"SWERVE_REPORT_FD": str(write_end), "SWERVE_REPORT_TESTS": tests_path,
                "SWERVE_REPORT_CHANGED": spec["changed"], "PYTHONNOUSERSITE": "1",
                "PYTHONPATH": spec["plugin_path"] + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")})
    if gate_fd is not None:
        env["SWERVE_REPORT_GATE_FD"] = str(gate_fd)
    command = "exec {} -p {}".format(spec["command"], spec["plugin"])
    reader = PipeReader(read_end)
    reader.start()
    own = [fd for fd in (write_end, tests_fd, gate_fd) if fd is not None]
    child = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=env, pass_fds=own + [fd for fd in spec["sealed_fds"] if fd is not None],
                             start_new_session=True)
    for fd in own:
        os.close(fd)
    return tests, child, reader


def finish_pytest(started, deadline_s):
    """The started pytest's exit code and what its pipe carried."""
    tests, child, reader = started
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


def run_pytest(spec, tests, out, deadline_s):
    return finish_pytest(start_pytest(spec, tests, out), deadline_s)


def remove_tree(path):
    """Delete a tree the tested code may have made unwritable (chmod 000 folders)."""
    def unlock(function, failed, _):
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
        function(failed)
    shutil.rmtree(path, onerror=unlock)


def wait_for_hidden(hidden, folder, pid):
    """The hidden cases' results (the runner's JSON text, or None). The command started the runner
    (pid, leading a process group of its own) before this interpreter, over a copy of the view in `folder`
    without the test files, so the two started side by side; no test starts before it ended. Past
    hidden["timeout_s"] its group is killed, and so is whatever it left running."""
    deadline_s = time.monotonic() + float(hidden["timeout_s"])
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() >= deadline_s:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.002)
    try:
        os.killpg(pid, signal.SIGKILL)  # what the cases' code left running in the background
    except OSError:
        pass  # the group had ended: nothing was left
    results, text = os.path.join(folder, "results.json"), None
    if os.path.isfile(results):
        with open(results, "rb") as handle:
            text = handle.read(int(hidden["max_bytes"]) + 1).decode("utf-8", "replace")
    remove_tree(os.path.join(folder, "view"))
    remove_tree(os.path.join(folder, "home"))
    return text


def can_seal():
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")


def seal_inputs(spec):
    """The plugin (as a zip) and the changed paths, sealed where the interpreter can (`sealed`)."""
    spec["plugin_path"], plugin_fd = sealed(spec["dir"], "plugin.zip", plugin_archive(spec["plugin"], spec["plugin_source"]))
    changed = "".join(os.path.abspath(path) + "\n" for path in spec.pop("changed_paths")).encode("utf-8")
    spec["changed"], changed_fd = sealed(spec["dir"], "changed.txt", changed)
    spec["sealed_fds"] = [plugin_fd, changed_fd]


def run_all(spec, out, deadline_s):
    """The listed tests' runs: one pytest over all of them, or with per_test one each, refusing a
    run after an earlier one changed test configuration."""
    if not spec["per_test"]:
        return [run_pytest(spec, spec["tests"], out, deadline_s)] if spec["tests"] else []
    runs, start_state = [], config_state(".")
    for test in spec["tests"]:
        if time.monotonic() >= deadline_s:
            runs.append({"tests": [test], "exit_code": 124, "timed_out": True, "report": None, "channel": ""})
            continue
        planted = changed_config(start_state, config_state("."))
        if planted:
            runs.append({"tests": [test], "exit_code": -1, "timed_out": False, "report": None,
                         "channel": "an earlier test's run changed test configuration: {}".format(", ".join(planted[:5]))})
            continue
        out.write("\n== {} ==\n".format(test).encode("utf-8", "replace"))
        out.flush()
        runs.append(run_pytest(spec, [test], out, deadline_s))
    return runs


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
    pending = spec.get("hidden")
    folder = sys.argv[2] if pending else tempfile.mkdtemp(prefix="swerve-grade.", dir="/tmp")
    spec["dir"] = folder
    log = os.path.join(folder, "out.log")
    runs, hidden = [], None
    with open(log, "wb") as out:
        if pending and spec["tests"] and not spec["per_test"] and can_seal():
            # pytest starts beside the hidden cases (its own start-up is most of its time) and
            # waits at the gate, before any conftest or test loads, until they ended.
            seal_inputs(spec)
            gate_read, gate_write = os.pipe()
            started = start_pytest(spec, spec["tests"], out, gate_read)
            hidden = wait_for_hidden(pending, folder, int(sys.argv[3]))
            try:
                os.write(gate_write, b"go")
            except BrokenPipeError:
                pass  # pytest ended before its gate (a start-up error): its run says what it did
            os.close(gate_write)
            runs.append(finish_pytest(started, time.monotonic() + float(spec["timeout_s"])))
        else:
            hidden = wait_for_hidden(pending, folder, int(sys.argv[3])) if pending else None
            seal_inputs(spec)  # after the hidden cases: unsealed files could be rewritten by what they left
            runs = run_all(spec, out, time.monotonic() + float(spec["timeout_s"]))
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
