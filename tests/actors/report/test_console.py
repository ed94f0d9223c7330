"""The console: progress lines with rate and ETA, warnings once, and in a quiet session
everything else in runs/<name>/logs/console.log, whoever writes it (this process, its stderr, a
child process)."""
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from actors.report.console import Console

REPO = Path(__file__).resolve().parents[3]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_a_stage_prints_at_each_quarter_with_rate_and_eta():
    out = io.StringIO()
    bar = Console(out).progress("base eval", 8, "attempts")
    for done in range(1, 9):
        bar.update(done, f"pass@1 so far 0.{done}")
    bar.finish()
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [f"[swerve] base eval: {n}/8 attempts" for n in (2, 4, 6, 8)]
    assert all("attempts/" in line for line in lines)  # the rate
    assert "ETA" in lines[0] and "took" in lines[-1] and lines[-1].endswith("pass@1 so far 0.8")


def test_on_a_terminal_the_line_is_redrawn_in_place_and_a_message_does_not_break_it():
    out = Terminal()
    console = Console(out, live=True)
    bar = console.progress("rl train", 4, "steps")
    bar.update(1, "reward 0.25")
    console.say("checkpoint saved")
    bar.finish("reward 0.50")
    text = out.getvalue()
    screen = _render(text)
    assert screen == ["[swerve] checkpoint saved", screen[1]] and screen[1].startswith("[swerve] rl train: 4/4 steps")
    assert screen[1].endswith("reward 0.50") and text.endswith("\n")


def _render(text: str) -> list[str]:
    """What a terminal shows: \\r returns to the line's start, ESC[K clears it."""
    lines, current = [], ""
    for part in text.replace("\x1b[K", "").split("\n"):
        current = part.split("\r")[-1]
        lines.append(current)
    return [line for line in lines if line]


def test_a_resumed_stage_measures_its_rate_from_where_it_resumed():
    out = io.StringIO()
    bar = Console(out).progress("rl train", 4, "steps", done=2)
    assert "2/4 steps" in bar.text(bar.started + 10) and "so far" in bar.text(bar.started + 10)
    bar.done = 3
    assert "ETA 10s" in bar.text(bar.started + 10)  # one step in 10 s, one left


def test_a_warning_reaches_the_console_once_naming_the_log(tmp_path):
    out = io.StringIO()
    console = Console(out, log_path=tmp_path / "console.log")
    console.warn("every group had one reward")
    console.warn("every group had one reward")
    assert out.getvalue() == f"[swerve] warning: every group had one reward (details: {tmp_path}/console.log)\n"


QUIET_RUN = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    from actors.report import console, redact
    redact.install()
    with console.session(Path(sys.argv[1]), verbose=sys.argv[2] == "verbose"):
        print("chatter of the driver")
        os.write(2, b"raw chatter on fd 2\\n")
        subprocess.run(["sh", "-c", "echo child chatter; echo 'WARNING: disk almost full' >&2"], check=True)
        print("(raylet) WARNING: 8 PYTHON worker processes have been started on node: x", flush=True)
        print("secret " + os.environ["DEMO_API_KEY"], flush=True)
        console.say("stage done")
        subprocess.run(["sh", "-c", "echo 'WARNING: disk almost full' >&2"], check=True)
        if sys.argv[3] == "fail":
            raise ValueError("the stage broke")
    print("after the session")
""")


def _run(tmp_path: Path, mode: str, end: str = "ok") -> subprocess.CompletedProcess:
    env = {**os.environ, "DEMO_API_KEY": "demo-secret-value-123", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", QUIET_RUN, str(tmp_path / "logs"), mode, end],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_quiet_session_sends_everything_but_its_own_lines_and_new_warnings_to_the_log(tmp_path):
    run = _run(tmp_path, "quiet")
    assert run.returncode == 0, run.stderr
    log = tmp_path / "logs" / "console.log"
    assert run.stdout.splitlines() == [
        "[swerve] stage done",
        f"[swerve] warning: WARNING: disk almost full (details: {log})",
        f"[swerve] the whole log: {log}",
        "after the session",
    ]
    assert run.stderr == ""
    text = log.read_text()
    for line in ("chatter of the driver", "raw chatter on fd 2", "child chatter", "WARNING: disk almost full",
                 "PYTHON worker processes", "[swerve] stage done", "secret [REDACTED]"):
        assert line in text, line
    assert "demo-secret-value-123" not in text


def test_a_failed_quiet_session_shows_the_error_and_where_the_log_is(tmp_path):
    run = _run(tmp_path, "quiet", "fail")
    assert run.returncode == 1
    assert "ValueError: the stage broke" in run.stderr  # Python's own report, on the terminal
    assert f"its whole log: {tmp_path / 'logs' / 'console.log'}" in run.stdout


def test_verbose_leaves_every_stream_on_the_terminal(tmp_path):
    run = _run(tmp_path, "verbose")
    assert run.returncode == 0, run.stderr
    assert "chatter of the driver" in run.stdout and "child chatter" in run.stdout
    assert "raw chatter on fd 2" in run.stderr and "[swerve] stage done" in run.stdout
    assert not (tmp_path / "logs").exists()
