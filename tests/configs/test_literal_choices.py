import pytest

from configs import ConfigError, load_config


@pytest.mark.parametrize("override, allowed", [
    ("engine.backend=vllm", "cpu, sglang, sim"),
    ("trainer.backend=jax", "torch, megatron, sim"),
    ("trainer.loss_aggregation=sum", "token_mean, seq_mean"),
    ("engine.pause_mode=drop", "retract, in_place"),
    ("engine.sim.tokens_distribution=zipf", "uniform, pareto"),
    ("sandbox.backend=k8s", "local, docker, e2b"),
    ("sandbox.isolation=chroot", "auto, bwrap, none"),
    ("sandbox.cgroup=maybe", "auto, required, off"),
    ("rollout.mode=eventually", "async, sync"),
    ("rollout.task_selection=best", "uniform, pass_rate"),
    ("rollout.staleness_unit=tokens", "trajectory, token"),
])
def test_a_literal_key_lists_its_allowed_values(override, allowed):
    key, value = override.split("=")
    with pytest.raises(ConfigError, match=rf"'{key}' is '{value}'; allowed: {allowed}$"):
        load_config(None, [override])


def test_a_literal_key_set_in_yaml_lists_its_allowed_values(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rollout:\n  task_selection: hardest\n")
    with pytest.raises(ConfigError, match=r"'rollout\.task_selection' is 'hardest'; allowed: uniform, pass_rate$"):
        load_config(str(path))


def test_the_removed_batch_wait_key_is_unknown():
    with pytest.raises(ConfigError, match="unknown config key 'engine.batch_wait_s'"):
        load_config(None, ["engine.batch_wait_s=0.01"])
