"""The driver's console hint when dynamic sampling drops every group (no batch can ever form)."""
from actors.stages.step_report import UNIFORM_GROUPS_BEFORE_HINT, uniform_groups_hint
from configs.schema import RolloutConfig


def test_the_hint_names_the_fix_once_enough_groups_were_all_dropped():
    rollout = RolloutConfig(drop_uniform_groups=True, group_size=8, groups_per_batch=4)
    enough = UNIFORM_GROUPS_BEFORE_HINT * 4 * 8
    hint = uniform_groups_hint({"filtered_uniform": enough, "trained": 0}, rollout)
    assert hint and "model.path=" in hint and "rollout.drop_uniform_groups=false" in hint
    assert f"{enough // 8} groups" in hint
    assert uniform_groups_hint({"filtered_uniform": enough - 8, "trained": 0}, rollout) is None
    assert uniform_groups_hint({"filtered_uniform": enough, "trained": 32}, rollout) is None  # it learns
    off = RolloutConfig(drop_uniform_groups=False, group_size=8, groups_per_batch=4)
    assert uniform_groups_hint({"filtered_uniform": enough, "trained": 0}, off) is None
