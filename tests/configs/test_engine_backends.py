"""Registries keyed by engine.backend check themselves against EngineBackend when imported."""
import pytest

from configs.schema.engine import ENGINE_BACKENDS, SERVER_BACKENDS, SERVERLESS_BACKENDS, check_backend_registry


def test_every_backend_runs_a_server_or_in_its_actor():
    assert sorted(SERVER_BACKENDS + SERVERLESS_BACKENDS) == sorted(ENGINE_BACKENDS)


def test_a_registry_with_one_entry_per_backend_passes():
    check_backend_registry(dict.fromkeys(ENGINE_BACKENDS), "a registry")
    check_backend_registry(dict.fromkeys(SERVER_BACKENDS), "a registry", SERVER_BACKENDS)


def test_a_registry_missing_a_backend_names_it_and_where():
    with pytest.raises(RuntimeError, match=r"^REG must have an entry for each of cpu, sglang, sim .*"
                                           r"but it has no entry for sim$"):
        check_backend_registry({"cpu": 1, "sglang": 2}, "REG")


def test_a_registry_with_an_unknown_backend_names_it():
    with pytest.raises(RuntimeError, match=r"no entry for sglang and an entry for vllm, not one of them$"):
        check_backend_registry({"cpu": 1, "vllm": 2}, "REG", SERVER_BACKENDS)
