"""`swerve pipeline`: the reference run's story in miniature, one stage after another.

    base eval  ->  SFT on expert traces  ->  eval  ->  async GRPO from the SFT policy  ->  eval

Each stage writes under runs/<run.name>/<stage>/; the run directory gets summary.json, the
RL stage's predictions.jsonl and learning_curve.png.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from actors.run_dir import write_json
from configs import Config


def _stage_cfg(cfg: Config, stage: str, model_path: str) -> Config:
    base = Path(cfg.run.dir).expanduser().resolve() / cfg.run.name
    return dataclasses.replace(
        cfg,
        run=dataclasses.replace(cfg.run, dir=str(base), name=stage),
        model=dataclasses.replace(cfg.model, path=model_path),
        tokenizer=dataclasses.replace(cfg.tokenizer, path=model_path or cfg.tokenizer.path),
        eval=dataclasses.replace(cfg.eval, out_dir=str(base / stage)),
    )


def run_pipeline(cfg: Config) -> dict:
    from actors.driver import train
    from actors.evaluate import evaluate
    from envs.expert import write_traces
    from envs.tasks import load_tasks
    from policies.model import ensure_model
    from policies.sft import run_sft
    from policies.tokenizer import ensure_tokenizer

    root = Path(cfg.run.dir).expanduser().resolve() / cfg.run.name
    root.mkdir(parents=True, exist_ok=True)
    tokenizer_path = ensure_tokenizer(cfg.tokenizer)
    base_model = cfg.model.path or ensure_model(cfg.model, tokenizer_path)
    reports: dict[str, dict] = {}
    policy = base_model
    for stage in cfg.pipeline.stages:
        if stage == "sft":
            traces = root / "sft" / "traces.jsonl"
            traces.parent.mkdir(parents=True, exist_ok=True)
            train_tasks = load_tasks(cfg.tasks.source, cfg.tasks.split, cfg.tasks.ids)
            train_tasks = train_tasks[: cfg.pipeline.trace_tasks or len(train_tasks)]
            counts = write_traces(str(traces), train_tasks,
                                  n_per_task=cfg.pipeline.traces_per_task, seed=cfg.run.seed,
                                  system_prompt=cfg.env.system_prompt, env_kwargs=dict(cfg.env.kwargs),
                                  think=cfg.pipeline.expert_thoughts)
            print(f"[swerve] pipeline: {counts['resolved']} expert traces ({counts['with_recovery']} with recovery)",
                  flush=True)
            policy = str(root / "sft" / "policy")
            run_sft(base_model, cfg.tokenizer.path or tokenizer_path, str(traces), policy,
                    dataclasses.replace(cfg.sft, data=str(traces), out_dir=policy))
        elif stage == "rl":
            run_path = train(_stage_cfg(cfg, "rl", policy))
            policy = str(run_path / "policy")
        elif stage != "base":
            raise ValueError(f"pipeline.stages has '{stage}'; allowed: base, sft, rl")
        reports[stage] = evaluate(_stage_cfg(cfg, stage, policy if stage != "base" else cfg.model.path))
        print(f"[swerve] pipeline: {stage} pass@1 = {reports[stage]['pass@1']}", flush=True)
    return _summarize(cfg, root, reports)


def _summarize(cfg: Config, root: Path, reports: dict[str, dict]) -> dict:
    last = list(reports)[-1]
    shutil.copy(root / last / "predictions.jsonl", root / "predictions.jsonl")
    summary = {
        **{f"{stage}_pass_at_1": report["pass@1"] for stage, report in reports.items()},
        "attempts_per_task": cfg.eval.attempts,
        "eval_tasks": reports[last]["num_tasks"],
        "stages": list(reports),
    }
    write_json(root / "summary.json", summary)
    _plot(reports, root / "learning_curve.png")
    print("stage | pass@1 | attempts/task | tasks")
    for stage, report in reports.items():
        print(f"{stage:5} | {report['pass@1']:.3f} | {cfg.eval.attempts} | {report['num_tasks']}")
    return summary


def _plot(reports: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    stages = list(reports)
    ax.plot(stages, [reports[s]["pass@1"] for s in stages], marker="o")
    ax.set(xlabel="stage", ylabel="held-out pass@1", ylim=(0, 1), title="Learning curve")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
