"""The GPU check's plan: the model size against the time budget, the wheelhouse, what travels."""
import zipfile
from dataclasses import replace

from bench import gpu_plan
from bench.gpu_plan import RUN_BUDGET_S, SIZES, WHEELS, check_estimate


def test_the_full_size_is_a_few_hundred_million_parameters_and_fits_its_budget():
    assert 3e8 < SIZES["full"].parameters() < 1e9 and SIZES["tiny"].parameters() < 1e6
    plan = check_estimate(SIZES["full"])
    assert plan["fits"] and plan["over"] == [] and plan["total_s"] <= RUN_BUDGET_S
    assert set(plan["parts_s"]) == {name for name, _ in gpu_plan.PARTS}


def test_a_model_too_large_for_the_budget_names_the_parts_over_their_limits():
    plan = check_estimate(replace(SIZES["full"], num_layers=280))
    assert not plan["fits"]
    assert any(line.startswith("megatron_trainer:") for line in plan["over"])
    assert any(line.startswith("the parts together:") for line in plan["over"])


def _wheel(folder, name: str, version: str, requires: list[str]) -> None:
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        lines = [f"Name: {name}", *[f"Requires-Dist: {r}" for r in requires], "Requires-Dist: pytest; extra == 'test'"]
        archive.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines))


def test_the_wheelhouse_names_a_missing_wheel_a_second_version_and_a_requirement_the_device_lacks(tmp_path):
    _wheel(tmp_path, "megatron_core", "0.16.1", ["torch>=2.6.0", "numpy"])
    _wheel(tmp_path, "megatron_core", "0.16.0", ["torch"])
    _wheel(tmp_path, "omegaconf", "2.4.0", ["PyYAML>=5.1.0", "antlr4-python3-runtime==4.9.*"])
    _wheel(tmp_path, "gymnasium", "1.4.0", ["numpy>=1.22.0", "farama-notifications>=0.0.1"])
    problems = gpu_plan.wheelhouse_problems(tmp_path)
    assert any("no wheel of farama-notifications" in p for p in problems)
    assert any("megatron-core: several versions" in p for p in problems)
    assert any("omegaconf-2.4.0" in p and "antlr4-python3-runtime" in p for p in problems)
    assert not any("gymnasium-1.4.0" in p for p in problems)  # its farama-notifications: named once, as missing
    assert len(problems) == 3


def test_what_travels_is_the_tree_and_the_wheels(tmp_path):
    (tmp_path / "some-1.0-py3-none-any.whl").write_bytes(b"\0" * 2**20)
    carried = gpu_plan.travel(tmp_path)
    assert carried["wheels"] == "wheels" and carried["wheels_mib"] == 1.0
    assert 0 < carried["tree_mib"] < carried["total_mib"] <= carried["limit_mib"] and carried["fits"]
    bounded = gpu_plan.travel(tmp_path / "none")
    assert bounded["wheels"].startswith("not built") and bounded["wheels_mib"] > 1  # megatron-core's files alone
    assert len(WHEELS) == len(set(WHEELS))
