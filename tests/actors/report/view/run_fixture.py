"""A small pipeline run directory written by hand in the run's own formats (a step's trajectory rows
from real Trajectory and Batch objects, eval reports and attempts as evaluate writes them), with the
run's tokenizer beside its RL policy: what the view's tests read."""
import json
import shutil
from pathlib import Path

from actors.episodes.trajectory import Batch, Trajectory
from actors.report.run_dir import write_json, write_jsonl
from policies.tokenizer import load_tokenizer

REPLY = "ls -la && cat mod.py\n"
HOSTILE = "</script><script>document.title='owned'</script><img src=x onerror=alert(1)>"
PATCH = "diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def write_run(root: Path, tokenizer_dir: str, secret: str = "") -> Path:
    tok = load_tokenizer(tokenizer_dir)
    rl = root / "rl"
    (rl / "trajectories").mkdir(parents=True)
    shutil.copytree(tokenizer_dir, rl / "policy")
    prompt, reply = tok.encode("Fix the bug."), tok.encode(REPLY + secret)
    observation, second = tok.encode("exit code: 0"), tok.encode("submit")
    trajectories = []
    for member, outcome in enumerate(("resolved", "unresolved")):
        ids = prompt + reply + observation + second
        mask = [0] * len(prompt) + [1] * len(reply) + [0] * len(observation) + [1] * len(second)
        # The first reply under v0, the second under v1: staleness 1 and 0 at the update from v1.
        versions = [0] * (len(prompt) + len(reply) + len(observation)) + [1] * len(second)
        trajectories.append(Trajectory(
            7, member, 0, "micro-train-003", 0, outcome, reward=1.0 - member, turns=2, token_ids=ids, loss_mask=mask,
            versions=versions, started_s=100.0 + member, finished_s=103.0 + 2 * member,
            messages=[{"role": "system", "content": "Fix the bug."}, {"role": "user", "content": HOSTILE},
                      {"role": "assistant", "content": REPLY + secret}, {"role": "user", "content": "exit code: 0"},
                      {"role": "assistant", "content": "submit"}],
            model_patch=PATCH if member == 0 else "", test_status={"test_mod.py::test_x": "PASSED" if member == 0 else "FAILED"}))
    masks = [[1] * len(t.token_ids) for t in trajectories]
    batch = Batch(1, [], trajectories, 1.0, advantages=[0.5, -0.5], trained_masks=masks)
    write_jsonl(rl / "trajectories" / "step_000001.jsonl", batch.trajectory_rows(8))
    write_jsonl(rl / "metrics.jsonl", [{"step": 1, "reward_mean": 0.5, "resolved_rate": 0.5, "policy_version": 1,
                                        "trained": 2, "step_time_s": 3.5}])
    for stage, results in (("sft", {"micro-eval-000": ["resolved"], "micro-eval-001": ["truncated"]}),
                           ("rl", {"micro-eval-000": ["truncated"], "micro-eval-001": ["resolved"]})):
        folder = root / stage
        folder.mkdir(exist_ok=True)
        per_task = [{"task_id": task, "family": "off_by_one" if task.endswith("0") else "compare", "stratum": "easy",
                     "n": len(outcomes), "resolved": outcomes.count("resolved"), "infra_error": 0, "outcomes": outcomes}
                    for task, outcomes in results.items()]
        write_json(folder / "eval.json", {"pass@1": 0.5, "pass@k": {"1": 0.5}, "num_tasks": 2, "attempts": 1,
                                          "per_task": per_task, "per_family": {}, "tamper_rate": 0.0})
        write_jsonl(folder / "attempts.jsonl", [
            {"task_id": task, "member": 0, "attempt": 0, "outcome": outcomes[0], "reward": float(outcomes[0] == "resolved"),
             "turns": 3, "error": "", "tampered": {}, "unresolved_reason": "", "test_status": {}, "hidden_status": {},
             "infra_source": None, "messages": [{"role": "assistant", "content": f"{stage} tried {task}"}],
             "model_patch": PATCH if outcomes[0] == "resolved" else ""} for task, outcomes in results.items()])
    (root / "summary.json").write_text(json.dumps({"rl_minus_sft": {"delta": 0.0, "ci95_low": -0.5, "ci95_high": 0.5,
                                                                    "better": 1, "worse": 1, "same": 0}}))
    return root
