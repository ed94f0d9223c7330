"""Which stages a re-run of `swerve pipeline` skips, resumes or runs again, from markers written by
hand (no Ray); the pipeline's own re-runs are tests/actors/stages/test_pipeline.py's."""
import pytest

from actors.report.run_dir import write_json
from actors.stages.stage_cache import (MARKER, NOT_FINGERPRINTED, STARTED, UNREAD_BY_STAGE, plan_stages, stage_config,
                                stage_fingerprints)
from configs import flat_config, load_config


def _cfg(tmp_path, *extra):
    return load_config(None, [f"run.dir={tmp_path}", "run.name=plan", *extra])


def _finish(root, cfg, stages=("base", "sft", "rl")):
    """Completion markers as the pipeline writes them, with their outputs on disk."""
    fingerprints = stage_fingerprints(cfg)
    previous = None
    for stage in stages:
        outputs = {"eval": f"{stage}/eval.json"}
        (root / stage).mkdir(parents=True, exist_ok=True)
        (root / outputs["eval"]).write_text("{}")
        write_json(root / stage / MARKER, {"stage": stage, "fingerprint": fingerprints[stage], "after": previous,
                                          "config": stage_config(cfg, stage), "outputs": outputs})
        previous = fingerprints[stage]


def _actions(root, cfg):
    return [(p.stage, p.action) for p in plan_stages(root, cfg)]


def test_every_fingerprint_exclusion_names_a_config_key():
    import fnmatch

    keys = list(flat_config(load_config(None, [])))
    for pattern in NOT_FINGERPRINTED + tuple(p for patterns in UNREAD_BY_STAGE.values() for p in patterns):
        assert fnmatch.filter(keys, pattern), f"{pattern} matches no config key (renamed?)"


def test_the_staleness_unit_is_read_by_the_rl_stage_alone(tmp_path):
    cfg = _cfg(tmp_path, "rollout.staleness_unit=token")
    assert stage_config(cfg, "rl")["rollout.staleness_unit"] == "token"
    assert all("rollout.staleness_unit" not in stage_config(cfg, stage) for stage in ("base", "sft"))


@pytest.mark.slow
def test_fingerprints_follow_what_each_stage_reads(tmp_path):
    base = stage_fingerprints(_cfg(tmp_path))
    # Where files and processes go does not change results.
    assert stage_fingerprints(_cfg(tmp_path / "elsewhere", "run.name=other", "ray.num_cpus=3", "run.resume=true",
                                   "trainer.checkpoint_interval=1", "model.cache_dir=/c")) == base
    rl_only = stage_fingerprints(_cfg(tmp_path, "trainer.lr=0.5"))
    assert rl_only["base"] == base["base"] and rl_only["sft"] == base["sft"] and rl_only["rl"] != base["rl"]
    sft_on = stage_fingerprints(_cfg(tmp_path, "sft.lr=0.5"))
    assert sft_on["base"] == base["base"] and sft_on["sft"] != base["sft"] and sft_on["rl"] != base["rl"]
    everything = stage_fingerprints(_cfg(tmp_path, "eval.attempts=2"))
    assert all(everything[s] != base[s] for s in base)
    # The evals take eval.max_turns, or rollout.max_turns when it is 0: shorter training rollouts
    # keep base and SFT; the turns an eval takes, however they are set, decide its fingerprint.
    evals_at_8 = stage_fingerprints(_cfg(tmp_path, "rollout.max_turns=8"))
    train_at_6 = stage_fingerprints(_cfg(tmp_path, "rollout.max_turns=6", "eval.max_turns=8"))
    assert train_at_6["base"] == evals_at_8["base"] and train_at_6["sft"] == evals_at_8["sft"]
    assert train_at_6["rl"] != evals_at_8["rl"]
    assert stage_fingerprints(_cfg(tmp_path, "rollout.max_turns=8", "eval.max_turns=6"))["sft"] != evals_at_8["sft"]
    # Without the base stage before it, SFT's chain differs: the stages before a stage are its inputs.
    assert stage_fingerprints(_cfg(tmp_path, "pipeline.stages=[sft,rl]"))["sft"] != base["sft"]
    with pytest.raises(ValueError, match="allowed: base, sft, rl"):
        stage_fingerprints(_cfg(tmp_path, "pipeline.stages=[base,dpo]"))


def test_plan_skips_finished_stages_up_to_the_first_that_changed(tmp_path):
    root = tmp_path / "plan"
    cfg = _cfg(tmp_path)
    assert _actions(root, cfg) == [("base", "run"), ("sft", "run"), ("rl", "run")]
    _finish(root, cfg)
    assert _actions(root, cfg) == [("base", "skip"), ("sft", "skip"), ("rl", "skip")]
    changed = plan_stages(root, _cfg(tmp_path, "trainer.lr=0.5"))
    assert [(p.stage, p.action) for p in changed] == [("base", "skip"), ("sft", "skip"), ("rl", "run")]
    assert "trainer.lr: 1e-05 -> 0.5" in changed[2].note
    assert _actions(root, _cfg(tmp_path, "pipeline.fresh=true")) == [("base", "run"), ("sft", "run"), ("rl", "run")]
    # A stage's directory without its marker (killed mid-SFT: half a policy) is not done, nor what follows.
    (root / "sft" / MARKER).unlink()
    (root / "sft" / "policy").mkdir()
    plans = plan_stages(root, cfg)
    assert [(p.stage, p.action) for p in plans] == [("base", "skip"), ("sft", "run"), ("rl", "run")]
    assert "did not finish" in plans[1].note and "sft before it runs again" in plans[2].note
    # An output the marker lists that is gone: run again.
    _finish(root, cfg)
    (root / "base" / "eval.json").unlink()
    assert _actions(root, cfg)[0] == ("base", "run")


def test_plan_resumes_rl_only_from_a_checkpoint_of_this_config(tmp_path):
    root = tmp_path / "plan"
    cfg = _cfg(tmp_path)
    _finish(root, cfg, ("base", "sft"))
    checkpoint = root / "rl" / "checkpoints" / "step-00000002"
    checkpoint.mkdir(parents=True)
    # No started record: whose checkpoints these are is unknown, so RL starts over.
    assert _actions(root, cfg)[2] == ("rl", "run")
    (checkpoint / "meta.json").write_text("{}")
    assert _actions(root, cfg)[2] == ("rl", "run")
    write_json(root / "rl" / STARTED, {"stage": "rl", "fingerprint": stage_fingerprints(cfg)["rl"],
                                       "config": stage_config(cfg, "rl")})
    plans = plan_stages(root, cfg)
    assert plans[2].action == "resume" and "rl/checkpoints/step-00000002" in plans[2].note
    other = plan_stages(root, _cfg(tmp_path, "trainer.kl_coef=0.5"))
    assert other[2].action == "run" and "trainer.kl_coef: 0.0 -> 0.5" in other[2].note
    assert _actions(root, _cfg(tmp_path, "pipeline.fresh=true"))[2] == ("rl", "run")
