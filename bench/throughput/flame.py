"""Sampled stacks of one process (py-spy's collapsed "raw" format: `frame;frame;... count` per line):
the share of its samples by kind of work, and a flame graph as a self-contained SVG.

The kinds are ordered rules over a stack's frames (the first that matches wins), so every sample
lands in exactly one kind and the shares add up to 1.
"""
from __future__ import annotations

import html
import zlib
from collections import Counter
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

Stack = Tuple[str, ...]


def read_collapsed(text: str) -> Counter:
    stacks: Counter = Counter()
    for line in text.splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks[tuple(frames.split(";"))] += int(count)
    return stacks


def _has(*names: str) -> Callable[[Stack], bool]:
    return lambda stack: any(name in frame for frame in stack for name in names)


def _all(*tests: Callable[[Stack], bool]) -> Callable[[Stack], bool]:
    return lambda stack: all(test(stack) for test in tests)


# (kind, test) in order: the names are functions and files of this repository, torch and Ray.
RULES: Sequence[Tuple[str, Callable[[Stack], bool]]] = (
    ("trainer backward", _all(_has("_optimizer_step"), _has("backward"))),
    ("trainer optimizer", _all(_has("_optimizer_step"), _has("optim/", "clip_grad_norm", "_all_reduce_grads"))),
    ("trainer forward + loss", _has("_optimizer_step")),
    ("trainer proximal log-probs", _all(_has("train_step"), _has("sequence_logprobs"))),
    ("trainer padding + books", _has("train_step")),
    ("weight export", _has("export_weights", "hf_state_dict")),
    ("checkpoint", _has("save_checkpoint")),
    ("engine prefill", _has("prefill")),
    ("engine decode", _has("decode (")),
    ("engine weight load", _has("load_weights", "update_weights")),
    ("engine HTTP + JSON", _has("handlers.py", "openai_api.py", "app.py", "uvicorn", "starlette", "h11", "json")),
    ("rendering + tokenizing", _has("apply_chat_template", "render", "tokeniz", "encode (", "decode_tokens")),
    ("grading", _has("grade", "hack_detect", "pristine", "workspace_change")),
    ("sandbox calls", _has("exec_channel", "sandbox", "Sandbox")),
    ("engine client", _has("engines/client.py", "engine_router", "http/client", "urllib")),
    ("ray serialization", _has("serialization.py", "pickle", "cloudpickle")),
    ("ray core", _has("ray/_private", "ray/_raylet", "_raylet", "ray/actor.py", "ray/util")),
    ("python (other)", lambda stack: True),
)


# Leaf frames of a thread blocked in C, which py-spy cannot tell from running (Ray's worker loop
# waits for its next task inside Cython): such samples are waiting, not work, and leave the shares.
WAITING_LEAVES = ("Worker.main_loop (", "SocketIO.readinto (", "Popen._wait (", "Condition.wait (", "Event.wait (",
                  "select (selectors", "poll (selectors", "_read_frame (")


def waiting(stack: Stack) -> bool:
    return bool(stack) and stack[-1].startswith(WAITING_LEAVES)


def shares(stacks: Counter, rules: Sequence[Tuple[str, Callable[[Stack], bool]]] = RULES) -> Dict[str, float]:
    """Each kind's share of the working samples (summing to 1; empty when there are none)."""
    stacks = Counter({stack: n for stack, n in stacks.items() if not waiting(stack)})
    total = sum(stacks.values())
    counts: Counter = Counter()
    for stack, n in stacks.items():
        counts[next(kind for kind, test in rules if test(stack))] += n
    return {kind: n / total for kind, n in counts.most_common()} if total else {}


# -- the flame graph ------------------------------------------------------------------------------
WIDTH_PX, ROW_PX = 1200, 16


def flame_svg(stacks: Counter, title: str) -> str:
    """An icicle-style flame graph (callers on top), one rectangle per frame, width by samples;
    hovering a frame shows its name and share (an SVG <title>). No scripts, no network. Waiting
    samples (`waiting`) are left out, as from the shares."""
    stacks = Counter({stack: n for stack, n in stacks.items() if not waiting(stack)})
    total = sum(stacks.values())
    tree = _tree(stacks.items())
    rects: List[str] = []
    depth = _place(tree, 0, 0.0, WIDTH_PX / max(total, 1), total, rects)
    height = (depth + 2) * ROW_PX + 8
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
            f'font-family="monospace" font-size="11"><rect width="100%" height="100%" fill="#fff"/>'
            f'<text x="4" y="12">{html.escape(title)} ({total} samples)</text>')
    return head + "".join(rects) + "</svg>\n"


def _tree(items: Iterable[Tuple[Stack, int]]) -> dict:
    root: dict = {"n": 0, "kids": {}}
    for stack, n in items:
        node = root
        root["n"] += n
        for frame in stack:
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += n
    return root


def _place(node: dict, depth: int, x: float, px_per_sample: float, total: int, out: List[str]) -> int:
    deepest = depth
    for frame, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["n"]):
        width = kid["n"] * px_per_sample
        if width >= 0.5:  # narrower frames are invisible: their samples still count in the parent
            y = (depth + 1) * ROW_PX + 4
            hue = 20 + zlib.crc32(frame.split(" (")[0].encode()) % 40
            label = html.escape(frame)
            text = html.escape(frame.split(" (")[0][: int(width / 7)]) if width > 21 else ""
            out.append(f'<g><title>{label}: {kid["n"] / total:.1%}</title>'
                       f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW_PX - 1}" fill="hsl({hue},85%,62%)"/>'
                       f'<text x="{x + 2:.1f}" y="{y + 11}">{text}</text></g>')
            deepest = max(deepest, _place(kid, depth + 1, x, px_per_sample, total, out))
        x += width
    return deepest
