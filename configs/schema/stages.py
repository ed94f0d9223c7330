"""Evaluation and the base -> SFT -> RL pipeline."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Literal


@dataclass
class EvalConfig:
    # Attempts per task (pass@k is reported for k = 1..attempts).
    attempts: int = 4
    # Split of tasks.source evaluated ("all": every task of the source).
    split: str = "eval"
    temperature: float = 0.3
    # Turns an attempt may take (0: rollout.max_turns). Training rollouts can stop sooner than
    # evals: an episode still unresolved after the turns a fix takes rarely recovers, and its
    # reward is 0 either way, while the eval measures what the policy does with every turn.
    max_turns: int = 0
    # Tasks evaluated: a subset stratified by Task.stratum (proportional), 0 = every task.
    num_tasks: int = 0
    # Seeds the stratified subset and the attempts' sampling seeds.
    seed: int = 0
    # Where eval.json and predictions.jsonl go; "" = runs/<run.name>/ (run.dir).
    out_dir: str = ""
    # `model_name_or_path` in predictions.jsonl; "" = model.path (or "swerve-tiny").
    model_name: str = ""


@dataclass
class PipelineConfig:
    # Expert traces written per training task for the SFT stage.
    traces_per_task: int = 2
    # Training tasks (first by id) that get expert traces; 0 = every task of tasks.split.
    trace_tasks: int = 0
    # Expert replies start with a one-line thought before the bash block (costs ~8 tokens a turn).
    expert_thoughts: bool = True
    # Processes that play expert traces (each runs real commands in a sandbox); 0 = one per CPU.
    trace_workers: int = 0
    # Share of the traces that show a wrong edit, its failing test and the recovery.
    recovery_rate: float = 0.3
    # The RL stage's tasks: "stream" draws fresh ones, each once (tasks.split=stream: never the eval
    # split's, never a traced task's, envs/tasks/stream.py); "unseen" the training tasks that got no
    # expert trace; "all" every training task.
    rl_tasks: Literal["stream", "unseen", "all"] = "unseen"
    # Held-out evals during the RL stage, after these steps (each < trainer.total_steps), besides
    # the one at its end: the RL curve in summary.json and learning_curve.png.
    rl_eval_steps: List[int] = field(default_factory=list)
    # The base model's eval (it is untrained: it shows ~0% and runs every attempt to the caps):
    # tasks (a stratified subset; 0: as eval.num_tasks), attempts (0: eval.attempts) and turns
    # (0: as eval.max_turns). Paired deltas use the tasks both stages share.
    base_eval_tasks: int = 0
    base_eval_attempts: int = 0
    base_max_turns: int = 0
    # Stages run by `swerve pipeline`, in order.
    stages: List[str] = field(default_factory=lambda: ["base", "sft", "rl"])
    # A re-run skips each stage that finished with the same config (its <stage>/done.json) and
    # resumes RL from its newest checkpoint; true runs every stage again from scratch.
    fresh: bool = False
