"""The one home of every default. YAML files and `key=value` overrides only change these.

Each actor receives its own section (a typed dataclass), never the whole tree; each section
lives in the module of its part (run, model, engine, trainer, rollout, env, sandbox, stages),
and `Config` puts them together. Import sections from here. May import: nothing of `configs`
but its own modules (configs/loader.py reads YAML into it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from configs.schema.run import RunLogger, RunConfig, RayConfig, FaultsConfig, DeadlinesConfig
from configs.schema.model import ModelConfig, TokenizerConfig
from configs.schema.engine import SimEngineConfig, EngineBackend, EngineConfig
from configs.schema.trainer import LossAggregation, TrainerBackend, TrainerConfig, SFTConfig
from configs.schema.rollout import RolloutConfig
from configs.schema.env import SWEEnvConfig, EnvConfig, HarnessConfig, TasksConfig, SynthConfig
from configs.schema.sandbox import SandboxBackend, SandboxCgroup, SandboxConfig, SandboxIsolation
from configs.schema.stages import EvalConfig, PipelineConfig


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    deadlines: DeadlinesConfig = field(default_factory=DeadlinesConfig)


__all__ = ["RunLogger", "RunConfig", "RayConfig", "FaultsConfig", "DeadlinesConfig", "ModelConfig", "TokenizerConfig", "SimEngineConfig", "EngineBackend", "EngineConfig", "LossAggregation", "TrainerBackend", "TrainerConfig", "SFTConfig", "RolloutConfig", "SWEEnvConfig", "EnvConfig", "HarnessConfig", "TasksConfig", "SynthConfig", "SandboxBackend", "SandboxCgroup", "SandboxConfig", "SandboxIsolation", "EvalConfig", "PipelineConfig", "Config"]
