"""Agent harnesses of swerve's own: programs that run inside a task's sandbox and talk to the policy
only through their gateway session, as any third-party harness does (`tool_agent`: the
`env.harness.name=tool-agent` harness). envs/harnesses.py binds their files into the sandbox,
where the sandbox's own python3 runs them.

May import: nothing of swerve, the standard library alone (they run where swerve is not installed;
tests/test_layers.py holds this).
"""
