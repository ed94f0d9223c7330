"""Problem statements of synthesized tasks: a GitHub-issue-like report of the failing behaviour.

Written from what the tests showed (test names, the failing test line, the assertion or
exception pytest printed), never from the edit itself, and with no language model.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from envs.tasks.synth.pytest_run import PytestRun


def _headline(node_id: str) -> str:
    """The name pytest prints above a test's failure block (``Class.test_x[param]``)."""
    parts = node_id.split("::")
    return ".".join(parts[1:]) if len(parts) > 1 else node_id


def _summary_message(node_id: str, failed_lines: set[str]) -> str:
    for rest in sorted(failed_lines):
        if rest == node_id:
            return ""
        if rest.startswith(node_id + " - "):
            return rest[len(node_id) + 3 :].strip()
    return ""


_FRAME_RE = re.compile(r"^(\S.*?):(\d+): in (\S+)$")


@dataclass
class _Failure:
    node_id: str
    test_line: str = ""  # the test-file source line that failed
    error_lines: list[str] = field(default_factory=list)  # pytest's "E" lines
    raised_in: str = ""  # "func (path)" of the innermost non-test frame
    message: str = ""


def _parse_failure(node_id: str, body: str, message: str) -> _Failure:
    test_file = node_id.split("::")[0]
    fail = _Failure(node_id, message=message)
    frames: list[tuple[str, str, list[str]]] = []
    for line in body.splitlines():
        m = _FRAME_RE.match(line)
        if m:
            frames.append((m.group(1), m.group(3), []))
        elif line.startswith("E ") or line == "E":
            fail.error_lines.append(line[1:].rstrip()[3:] if line.startswith("E   ") else
                                    line[1:].strip())
        elif frames and line.startswith("    ") and not set(line.strip()) <= set("^~ "):
            frames[-1][2].append(line[4:].rstrip())
    test_frames = [f for f in frames if f[0] == test_file or f[0].endswith("/" + test_file)]
    if test_frames:
        code = [c for c in test_frames[-1][2] if c.strip()]
        fail.test_line = "\n".join(code[-3:]) if code else ""
    if frames and frames[-1] not in test_frames:
        path, func, _ = frames[-1]
        if "site-packages" not in path and not path.startswith("/"):
            fail.raised_in = f"`{func}` (`{path}`)"
    return fail


def _module_hint(node_ids: list[str]) -> str:
    mods = []
    for nid in node_ids:
        stem = Path(nid.split("::")[0]).stem
        stem = re.sub(r"^test_|_test$", "", stem)
        if stem and stem not in mods:
            mods.append(stem)
    return ", ".join(f"`{m}`" for m in mods[:3])


def problem_statement(f2p: list[str], run: PytestRun, repo_name: str, max_details: int, max_listed: int) -> str:
    """A GitHub-issue-like report of the failing behaviour (no LM, no fix revealed)."""
    failures = []
    for nid in f2p:
        body = run.sections.get(_headline(nid)) or next(
            (v for k, v in run.sections.items() if k.endswith(" " + _headline(nid))), "")
        failures.append(_parse_failure(nid, body, _summary_message(nid, run.failed)))
    first = failures[0]
    test_name = _headline(first.node_id)
    detail = ""
    if first.test_line and first.error_lines:
        err = first.error_lines[0].strip()
        got = _got_value(first.error_lines)
        detail = f": `{_one_line(first.test_line)}` fails" + (f" ({got})" if got else f" with `{_clip(err, 80)}`")
    elif first.message:
        detail = f": {_clip(first.message, 100)}"
    area = _module_hint(f2p)
    title = f"`{test_name}`{detail}" if detail else f"`{test_name}` fails"
    n = len(f2p)
    lines = [f"# {title}", ""]
    lines.append(
        f"In `{repo_name}`, {'a test that used to pass now fails' if n == 1 else f'{n} tests that used to pass now fail'}"
        + (f" (behaviour exercised by the {area} tests)" if area else "") + "."
        + " The rest of the test suite still passes."
    )
    lines += ["", "Failing test" + ("s:" if n > 1 else ":")]
    for nid in f2p[:max_listed]:
        lines.append(f"- `{nid}`")
    if n > max_listed:
        lines.append(f"- ... and {n - max_listed} more")
    for fail in failures[:max_details]:
        lines += ["", f"## `{_headline(fail.node_id)}`", ""]
        if fail.test_line:
            lines += ["The test does:", "", "```python", fail.test_line, "```", ""]
        if fail.error_lines:
            shown = [e for e in fail.error_lines if e.strip()][:12]
            lines += ["and it fails with:", "", "```", *shown, "```"]
        elif fail.message:
            lines += ["and it fails with:", "", "```", _clip(fail.message, 300), "```"]
        if fail.raised_in:
            lines += ["", f"The error is raised from {fail.raised_in}."]
    lines += [
        "",
        "## Expected behaviour",
        "",
        "These tests should pass, as they did before; the other tests must keep passing.",
        "",
        "## How to reproduce",
        "",
        "```",
        "python -m pytest " + " ".join(_shell_quote(n) for n in f2p[:3]),
        "```",
    ]
    return "\n".join(lines) + "\n"


def _got_value(error_lines: list[str]) -> str:
    """'got 5' from an ``assert 5 == 4`` explanation, when there is one."""
    for line in error_lines:
        m = re.match(r"\s*(?:AssertionError: )?assert (.+?) (==|!=|is|is not|in|not in|<=|>=|<|>) (.+)$",
                     line.strip())
        if m:
            left = m.group(1)
            if len(left) <= 60 and m.group(2) == "==":
                return f"got `{left}`"
            return f"`{_clip(line.strip(), 80)}`"
        if line.strip() and not line.strip().startswith("assert"):
            return f"`{_clip(line.strip(), 80)}`"
    return ""


def _one_line(text: str) -> str:
    return _clip(" ".join(text.splitlines()[-1].split()), 80)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shell_quote(text: str) -> str:
    return text if re.fullmatch(r"[\w./:\-\[\]]+", text) else "'" + text.replace("'", "'\\''") + "'"
