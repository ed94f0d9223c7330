"""What the policy's first edit was, family by family and stage by stage (fix_patterns.json).

An "easy" micro task's issue names the suspected edit ("Probably `old` should be `new` in mod.py",
envs/tasks/micro.py), so each attempt's first `sed -i` edit can be set against it. Measured on
issue 39's runs: every attempt whose first edit copied the hint exactly was resolved, and almost
every other one was not (the recovery after a wrong edit rarely works); the off_by_one and
variable families fail on copying one-letter names (`x - 1)` typed as `p - 1)`), and RL that lowered
off_by_one lowered its exact copies. Tasks without a hint (the "hard" stratum, other sources) are
left out: there is nothing to set the edit against.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Mapping, Optional

HINT = re.compile(r"Probably `(?P<old>[^`]*)` should be `(?P<new>[^`]*)`")
# The line-addressed substitution the expert traces teach: sed -i 'Ns/old/new/' FILE.
SED = re.compile(r"sed -i '(?:\d+)?s/(?P<old>[^/']*)/(?P<new>[^/']*)/'")
# A fenced command: ```bash (SWE-v0's replies) or a harness's own tag, e.g. mini-swe-agent's text
# configuration's ```mswea_bash_command.
BASH = re.compile(r"```[\w-]*bash[\w-]*[ \t]*\n(?P<cmd>.*?)\n```", re.S)

KINDS = ("copies the hint", "hint's old text, other new text", "hint's shape, other names",
         "other edit", "no sed edit")


def _shape(text: str) -> str:
    return re.sub(r"\w+", "w", text)


def _text(content) -> str:
    """A message's text: a string, the text parts of a list of parts, or nothing (a reply that is
    only tool calls has content None)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _command(message: Mapping) -> str:
    """What an assistant turn ran: its fenced bash block, or its tool calls' arguments (harness
    replies); "" when it ran nothing."""
    block = BASH.search(_text(message.get("content")))
    calls = [str((call.get("function") or {}).get("arguments", "")) for call in message.get("tool_calls") or []]
    return "\n".join(([block.group("cmd")] if block else []) + calls)


def first_edit_kind(messages: Iterable[Mapping]) -> Optional[str]:
    """One of KINDS for an attempt's conversation, None when its issue names no suspected edit."""
    messages = list(messages)
    issue = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    hint = HINT.search(issue)
    if hint is None:
        return None
    for message in messages:
        command = _command(message) if message["role"] == "assistant" else ""
        if "sed -i" not in command:
            continue
        edit = SED.search(command)
        if edit is None:
            return "other edit"
        old, new = edit.group("old"), edit.group("new")
        if (old, new) == (hint.group("old"), hint.group("new")):
            return "copies the hint"
        if old == hint.group("old"):
            return "hint's old text, other new text"
        if (_shape(old), _shape(new)) == (_shape(hint.group("old")), _shape(hint.group("new"))):
            return "hint's shape, other names"
        return "other edit"
    return "no sed edit"


def fix_patterns(attempts: Iterable[Mapping], families: Mapping[str, str]) -> dict:
    """family -> kind -> {"attempts", "resolved"} over the attempts whose issue names a hint."""
    out: dict = {}
    for attempt in attempts:
        kind = first_edit_kind(attempt["messages"])
        if kind is None or attempt.get("infra_source"):
            continue
        cell = out.setdefault(families.get(attempt["task_id"], ""), {}).setdefault(
            kind, {"attempts": 0, "resolved": 0})
        cell["attempts"] += 1
        cell["resolved"] += attempt["outcome"] == "resolved"
    return {family: {kind: kinds[kind] for kind in KINDS if kind in kinds} for family, kinds in sorted(out.items())}


def stage_fix_patterns(stage_dir: Path) -> dict:
    """fix_patterns of one evaluated stage (its attempts.jsonl and eval.json)."""
    report = json.loads((stage_dir / "eval.json").read_text())
    families = {row["task_id"]: row.get("family", "") for row in report["per_task"]}
    with (stage_dir / "attempts.jsonl").open() as f:
        return fix_patterns((json.loads(line) for line in f if line.strip()), families)


def table(by_stage: Mapping[str, dict]) -> str:
    """One line per family and kind: attempts (resolved) in each stage."""
    stages = list(by_stage)
    families = sorted({family for patterns in by_stage.values() for family in patterns})
    lines = [f"first edit of the tasks whose issue names the fix: attempts (resolved) by stage: {' | '.join(stages)}"]
    for family in families:
        for kind in KINDS:
            cells = [by_stage[s].get(family, {}).get(kind) for s in stages]
            if any(cells):
                shown = " | ".join(f"{c['attempts']:3d} ({c['resolved']:3d})" if c else "  0 (  0)" for c in cells)
                lines.append(f"{family:12} {kind:34} {shown}")
    return "\n".join(lines)
