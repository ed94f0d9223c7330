"""Outcome classes of an episode, and the error type that marks infrastructure failures.

Agent-caused outcomes are scored; infra errors never are (docs/contracts.md, "Outcome classes").
"""
from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    TRUNCATED = "truncated"
    FORMAT_ERROR = "format_error"
    INFRA_ERROR = "infra_error"


class InfraSource(str, Enum):
    SANDBOX = "sandbox"
    ENGINE = "engine"
    ENV = "env"
    GRADER = "grader"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"


SCORED = (Outcome.RESOLVED, Outcome.UNRESOLVED, Outcome.TRUNCATED, Outcome.FORMAT_ERROR)


class InfraError(RuntimeError):
    """A failure of the machinery, not of the agent: never scored, the member is re-run."""

    def __init__(self, source: InfraSource, message: str):
        super().__init__(f"infra_error({source.value}): {message}")
        self.source = source


class ActorLost(InfraError):
    """The process behind a call is gone: its actor died or missed the call's deadline
    (actors/fleet/remote.py `ray_call`). Never the agent's doing, whatever the call was: a grader that
    forgives a failed workspace reset as the agent's must not forgive this one."""


class LeaseLost(InfraError):
    """The lease behind a call died under it (its container killed, its init OOM-killed, its VM or
    the connection to it gone): as ActorLost, never the agent's doing, so a grader that forgives a
    failed workspace reset as the agent's must not forgive this one."""

    def __init__(self, message: str):
        super().__init__(InfraSource.SANDBOX, message)


class TaskRefused(InfraError):
    """A task this run's settings cannot run as it asks (a network the sandboxes lack): never the
    agent's, so never scored; the task is re-run and, refused again, quarantined with this reason."""

    def __init__(self, message: str):
        super().__init__(InfraSource.ENV, message)


class WorkspaceError(Exception):
    """What the agent left cannot be graded as it is (a file where grading needs a folder, a
    change beyond env.swe's bounds, a test_patch its change breaks): the attempt's own outcome,
    unresolved with this reason, never an infra error."""
