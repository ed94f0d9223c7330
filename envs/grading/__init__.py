"""Grading: how an attempt is judged, on a channel the tested code cannot write.

`grader.grade` runs the task's tests with its own pytest plugin (`grade_report.py`) and the hidden
cases; `pristine_view` grades on the task's own workspace plus only the change the task allows
(`workspace_change`, `protection`); `hack_detect` (with `hack_reach` and `constant_fold`) is the static
check of what added code can reach; `harbor_verifier` and `harbor_reward` judge Harbor tasks.

May import: `envs.outcomes`, `envs.tasks` (what a task says to run) and `envs.sandboxes` (where it
runs); never an env (tests/test_layers.py holds this).
"""
