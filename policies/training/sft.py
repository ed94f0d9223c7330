"""Supervised fine-tuning on agent traces: OpenAI-style `messages` JSONL -> an HF model directory.

Each line: {"messages": [{"role", "content"}, ...], "tools": [...]?, "resolved": bool?}, or a
token row {"token_ids": [...], "loss_mask": [...], "resolved": bool?}: a trajectory recorded
token-exactly (an agent harness's, actors/stages/harness_traces.py), trained as it is. Messages
keep what the chat template renders: an assistant's `tool_calls` (arguments as a JSON string, as
OpenAI writes them, or an object), a tool result's `tool_call_id`, `name`, `reasoning_content`.
Conversations are rendered with the tokenizer's chat template and tokenized piece by piece
exactly as rollout sees them (policies/chat/conversation.py, chat_session.py): each assistant
reply through its end-of-turn token on its own, the text between replies on its own. So SFT trains the same token sequences the policy later samples and is trained on by RL.
By default the loss covers the assistant's tokens (reply + end-of-turn); `loss_on_all_tokens`
covers everything (LEARNING.md: part of what made SFT work for the tiny model).

The output directory (weights, config, tokenizer files) is what `model.path` points to next.
"""
from __future__ import annotations

import json
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch


from configs.schema import SFTConfig
from policies.chat.conversation import neutralize_json, neutralize_special_tokens
from policies.hf_dir import write_hf_dir
from policies.training.logprobs import sequence_logprobs
from policies.training.precision import autocast, use_bf16
from policies.model import load_model
from policies.tokenizer import load_tokenizer


@dataclass
class Example:
    token_ids: list[int]
    loss_mask: list[int]


def read_traces(path: str, filter_resolved: bool) -> tuple[list[dict], int]:
    """Rows of the JSONL file; with filter_resolved, rows flagged resolved=false are skipped
    (rows without the flag are kept). Returns (rows, skipped)."""
    rows, skipped = [], 0
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "token_ids" in row:
                ids, mask = row["token_ids"], row.get("loss_mask")
                if not isinstance(ids, list) or not ids or not isinstance(mask, list) or len(mask) != len(ids):
                    raise ValueError(f"{path}:{number}: a token row needs non-empty 'token_ids' and a 'loss_mask' "
                                     "of the same length")
            elif not isinstance(row.get("messages"), list) or not row["messages"]:
                raise ValueError(f"{path}:{number}: a trace needs a non-empty 'messages' list, or 'token_ids' "
                                 "and 'loss_mask'")
            if filter_resolved and row.get("resolved") is False:
                skipped += 1
                continue
            rows.append(row)
    return rows, skipped


def _clean(message: dict) -> dict:
    """The message as a session hands it to the template (policies/chat/openai_wire.template_messages):
    trace text must not open or close chat turns (as rollout guarantees for observations), and a
    tool call's arguments are an object, so the template writes them as rollout's replies were."""
    cleaned = {"role": message["role"], "content": neutralize_special_tokens(message.get("content") or "")}
    for key in ("name", "tool_call_id", "reasoning_content"):
        if message.get(key) is not None:
            cleaned[key] = neutralize_special_tokens(message[key])
    if message.get("tool_calls"):
        cleaned["tool_calls"] = [_clean_call(call) for call in message["tool_calls"]]
    return cleaned


def _clean_call(call: dict) -> dict:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            raise ValueError(f"tool call {function.get('name')!r}: its arguments are not JSON ({error}); write them "
                             f"as a JSON object or a string holding one, as OpenAI's tool_calls do") from None
    cleaned = {"type": "function", "function": {"name": neutralize_special_tokens(function["name"]),
                                                "arguments": neutralize_json(arguments)}}
    return {"id": call["id"], **cleaned} if "id" in call else cleaned


def render_example(tokenizer, messages: list[dict], tools: Optional[list] = None,
                   loss_on_all_tokens: bool = False, max_tokens: int = 0) -> Example:
    """The trace's ids as a session holds them (policies/chat/chat_session.py): each assistant reply
    through its end-of-turn token on its own, and the text between replies in one piece, rendered
    once they have all arrived (the template joins consecutive tool results in one turn)."""
    messages = [_clean(m) for m in messages]
    extra = {"tools": tools} if tools else {}

    def render(prefix: list[dict], generation_prompt: bool = False) -> str:
        if not prefix and not generation_prompt:
            return ""
        return tokenizer.apply_chat_template(prefix, tokenize=False, add_generation_prompt=generation_prompt, **extra)

    ids: list[int] = []
    mask: list[int] = []
    done = ""

    def append(text: str, loss: int) -> None:
        if text:
            piece = tokenizer.encode(text, add_special_tokens=False)
            ids.extend(piece)
            mask.extend([loss] * len(piece))

    def advance(rendered: str) -> str:
        if not rendered.startswith(done):
            raise ValueError("the chat template does not render conversations prefix by prefix; "
                             "cannot find each message's tokens")
        return rendered[len(done):]

    eos = tokenizer.eos_token or ""
    after = ""  # the template's text after the last reply's end-of-turn token: it opens the next piece
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue  # rendered with what follows it, up to the next generation prompt or the end
        head = render(messages[:i], generation_prompt=True)
        append(after + advance(head), 0)
        done = head
        full = render(messages[: i + 1])
        reply = advance(full)
        cut = reply.rfind(eos) + len(eos) if eos and eos in reply else len(reply)
        append(reply[:cut], 1)  # the reply through its end-of-turn token: what is sampled
        after, done = reply[cut:], full
    if messages and messages[-1]["role"] != "assistant":
        append(after + advance(render(messages)), 0)
    if loss_on_all_tokens:
        mask = [1] * len(ids)
    if ids:
        mask[0] = 0  # nothing predicts the first token
    if max_tokens:
        ids, mask = ids[:max_tokens], mask[:max_tokens]
    return Example(ids, mask)


def token_example(token_ids: list[int], loss_mask: list[int], loss_on_all_tokens: bool = False,
                  max_tokens: int = 0) -> Example:
    """A token row as an Example: its ids as recorded, its mask (or all of it)."""
    ids = [int(t) for t in token_ids]
    mask = [1] * len(ids) if loss_on_all_tokens else [int(m) for m in loss_mask]
    mask[0] = 0  # nothing predicts the first token
    if max_tokens:
        ids, mask = ids[:max_tokens], mask[:max_tokens]
    return Example(ids, mask)


def _batches(examples: list[Example], batch_size: int, rng: random.Random, pool_batches: int = 8):
    """Shuffled batches of similar lengths: padding is wasted compute, so each pool of
    `pool_batches` batches is sorted by length before it is cut; the batches are shuffled."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    batches = []
    pool = batch_size * pool_batches
    for start in range(0, len(order), pool):
        chunk = sorted(order[start: start + pool], key=lambda i: len(examples[i].token_ids))
        batches += [chunk[j: j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    for batch in batches:
        yield [examples[i] for i in batch]


def _pad(batch: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    length = max(len(e.token_ids) for e in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), length), dtype=torch.long)
    mask = torch.zeros((len(batch), length), dtype=torch.float32)
    for row, e in enumerate(batch):
        n = len(e.token_ids)
        ids[row, :n] = torch.tensor(e.token_ids)
        attention[row, :n] = 1
        mask[row, :n] = torch.tensor(e.loss_mask, dtype=torch.float32)
    return ids, attention, mask


def lr_factor(schedule: str, total_steps: int) -> Callable[[int], float]:
    """The multiple of sft.lr that step `done` (0-based) trains at."""
    if schedule == "constant":
        return lambda done: 1.0
    if schedule == "cosine":
        return lambda done: 0.5 * (1.0 + math.cos(math.pi * min(done, total_steps) / total_steps))
    raise ValueError(f"sft.lr_schedule={schedule!r}; allowed: constant, cosine")


def run_sft(model_path: str, tokenizer_path: str, data_file: str, out_dir: str, cfg: SFTConfig,
            on_step: Optional[Callable[[int, int, float], None]] = None) -> dict:
    """Fine-tune the model at model_path on the traces in data_file; write an HF model
    directory (with tokenizer files) to out_dir. Returns a summary with the per-step losses.
    on_step(done, total, loss) after each step (a progress line); every 10th step is printed."""
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(tokenizer_path)
    rows, skipped = read_traces(data_file, cfg.filter_resolved)
    examples = [token_example(r["token_ids"], r["loss_mask"], cfg.loss_on_all_tokens, cfg.max_seq_tokens)
                if "token_ids" in r else
                render_example(tokenizer, r["messages"], r.get("tools"), cfg.loss_on_all_tokens, cfg.max_seq_tokens)
                for r in rows]
    examples = [e for e in examples if sum(e.loss_mask) > 0]
    if not examples:
        raise ValueError(f"{data_file}: no trace left to train on ({skipped} unresolved skipped)")
    model = load_model(model_path)
    model.train()
    device = model.get_input_embeddings().weight.device
    bf16 = use_bf16(cfg.mixed_precision, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    steps_per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    if cfg.max_steps:
        total = min(total, cfg.max_steps) if cfg.epochs else cfg.max_steps
    if total < 1:
        raise ValueError(f"sft: nothing to run (sft.epochs={cfg.epochs}, sft.max_steps={cfg.max_steps})")
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg.lr_schedule, total))
    rng = random.Random(cfg.seed)
    losses: list[float] = []
    lrs: list[float] = []
    started = time.perf_counter()
    while len(losses) < total:
        for batch in _batches(examples, cfg.batch_size, rng):
            ids, attention, mask = _pad(batch, pad_id)
            with autocast(bf16, device):
                logprobs = sequence_logprobs(model, ids, attention)
            loss = -(logprobs * mask).sum() / mask.sum().clamp(min=1.0)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            if len(losses) % 10 == 0 or len(losses) == total:
                print(f"[swerve sft] step {len(losses)}/{total} loss={losses[-1]:.4f}", flush=True)
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
            if len(losses) >= total:
                break
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # Config and generation config come from the model, tokenizer files from the tokenizer.
    with tempfile.TemporaryDirectory() as tokenizer_files:
        tokenizer.save_pretrained(tokenizer_files)
        write_hf_dir(out_dir, state, [model_path, tokenizer_files],
                     bool(getattr(model.config, "tie_word_embeddings", False)))
    summary = {
        "out_dir": os.path.abspath(out_dir), "examples": len(examples), "skipped_unresolved": skipped,
        "steps": len(losses), "loss_first": losses[0], "loss_last": losses[-1], "losses": losses,
        "lrs": lrs,
        "loss_tokens": sum(sum(e.loss_mask) for e in examples), "time_s": time.perf_counter() - started,
        "bf16_autocast": bf16,
    }
    with open(os.path.join(out_dir, "sft_summary.json"), "w") as handle:
        json.dump(summary, handle, indent=2)
    return summary
