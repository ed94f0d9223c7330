"""`swerve bench` writes its JSON and the table; structure only, never timing asserts."""
import json

from actors.cli import main


def test_bench_writes_results_and_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "sandbox_start", "--repetitions", "1"]) == 0
    result = json.loads((tmp_path / "bench" / "results" / "sandbox_start.json").read_text())
    assert {"figure", "baseline", "ratio", "target", "met", "machine", "date"} <= set(result)
    assert set(result["details"]) == {f"{m}_c{c}" for m in ("cold", "warm") for c in (1, 16, 64)}
    table = (tmp_path / "BENCHMARKS.md").read_text()
    assert "| sandbox_start |" in table


def test_unknown_benchmark_names_the_choices(tmp_path, monkeypatch):
    import pytest

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="engine_throughput"):
        main(["bench", "nope"])


def test_overrides_after_options_are_accepted():
    from actors.cli import parser

    args, extra = parser().parse_known_args(["bench", "sandbox_start", "--repetitions", "2", "sandbox.pool_size=2"])
    assert args.name == "sandbox_start" and extra == ["sandbox.pool_size=2"]
