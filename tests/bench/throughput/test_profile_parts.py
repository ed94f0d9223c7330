"""The profile bench's parts without a run: CPU books by process kind, stack shares, flame graphs, the floor."""
import os
import subprocess
import sys
import time

from bench.throughput.flame import flame_svg, read_collapsed, shares
from bench.throughput.process_cpu import DRIVER, ENGINE_SERVER, RAY_SYSTEM, ProcessSampler, commands_of, kind_of
from bench.throughput.profile import profile_table, step_table
from bench.throughput.profile_floor import step_floor

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_processes_are_kinded_by_title_and_command_line():
    me = os.getpid()
    assert kind_of("", [], me, me) == DRIVER
    assert kind_of("ray::EpisodeActor.run", ["ray::EpisodeActor.run"], me, 1) == "episode actors"
    assert kind_of("ray::TrainerShard", [], me, 1) == "trainer"
    assert kind_of("ray::IDLE", [], me, 1) == RAY_SYSTEM  # a worker of Ray's own pool
    assert kind_of("python", ["python", "-m", "policies.server", "--port", "1"], me, 1) == ENGINE_SERVER
    assert kind_of("raylet", ["/x/ray/core/src/ray/raylet/raylet", "--x"], me, 1) == RAY_SYSTEM
    assert kind_of("bwrap", ["bwrap", "--ro-bind", "/", "/", "sh"], me, 1) is None  # only its ancestry tells


def test_a_grandchild_that_ends_between_samples_is_counted_once_under_its_ancestor():
    sampler = ProcessSampler(os.getpid())
    before = sampler.sample().get(commands_of(DRIVER), 0.0)
    # A child that burns 0.3 s itself, then starts a grandchild that burns 0.3 s and ends.
    script = BURN.format(s=0.3) + f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN.format(s=0.3)!r}])\n"
    child = subprocess.Popen([sys.executable, "-c", script])
    while child.poll() is None:
        sampler.sample()
        time.sleep(0.05)
    spent = sampler.sample().get(commands_of(DRIVER), 0.0) - before
    assert 0.55 <= spent <= 1.2, spent  # both burns (plus two interpreters' start), neither twice


def test_a_child_and_its_grandchild_ending_together_are_counted_once():
    """The grandchild is sampled alive, then both end between two samples: what was seen of the
    grandchild must not come back through the child's children times."""
    sampler = ProcessSampler(os.getpid())
    before = sampler.sample().get(commands_of(DRIVER), 0.0)
    grandchild = BURN.format(s=0.6)
    script = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {grandchild!r}])\n"
    child = subprocess.Popen([sys.executable, "-c", script])
    time.sleep(0.4)
    sampler.sample()  # the grandchild is alive and part-way through its burn
    child.wait()
    spent = sampler.sample().get(commands_of(DRIVER), 0.0) - before
    assert 0.55 <= spent <= 0.95, spent


COLLAPSED = """\
<module> (a.py:1);train_step (trainer.py:10);_optimizer_step (trainer.py:20);backward (torch/_tensor.py:5) 6
<module> (a.py:1);train_step (trainer.py:10);sequence_logprobs (trainer.py:30) 3
<module> (a.py:1);idle_loop (a.py:9) 1
<module> (default_worker.py:323);Worker.main_loop (ray/_private/worker.py:1069) 40
not a line
"""


def test_stack_shares_follow_the_first_matching_rule_and_sum_to_one():
    stacks = read_collapsed(COLLAPSED)
    assert sum(stacks.values()) == 50
    got = shares(stacks)  # Ray's worker loop waiting for a task is not work
    assert got == {"trainer backward": 0.6, "trainer proximal log-probs": 0.3, "python (other)": 0.1}
    svg = flame_svg(stacks, "trainer")
    assert svg.startswith("<svg") and "backward" in svg and "60.0%" in svg and "<script" not in svg


def test_the_floor_counts_eight_flops_per_parameter_per_trained_token():
    floor = step_floor({"tokens_trained": 1000}, params=1_000_000, flops_per_core_s=1e9, env_cpu_s=2.0, cores=2)
    assert floor["floor_engine_cpu_s"] == 2.0 and floor["floor_trainer_cpu_s"] == 6.0
    assert floor["floor_cpu_s"] == 10.0 and floor["floor_wall_s"] == 5.0


def test_steps_are_cut_between_consecutive_samples_and_tabled():
    cuts = [{"t": 0.0, "busy_s": 0.0, "cpu": {"trainer": 1.0}},
            {"t": 10.0, "busy_s": 15.0, "cpu": {"trainer": 4.0, "engine servers": 8.0}}]
    row = {"step": 1, "time_rollout_wait_s": 6.0, "time_actor_update_s": 3.0, "time_logprob_s": 1.0,
           "time_weight_sync_s": 0.1, "tokens_trained": 100, "tokens_generated_trained": 40,
           "tokens_generated_finished": 80, "filtered_uniform": 8, "trained": 8}
    [step] = step_table(cuts, [row])
    assert step["cpu_s"] == {"trainer": 3.0, "engine servers": 8.0} and step["run_cpu_s"] == 11.0
    assert step["wall_s"] == 10.0 and step["idle_core_s"] == os.cpu_count() * 10.0 - 15.0 or os.cpu_count() != 2
    step.update(floor_cpu_s=4.0)
    table = profile_table({"engine servers": 8.0, "trainer": 3.0}, {"trainer": {"trainer backward": 0.7}},
                          [step], wall_s=10.0, floor_s=2.0)
    assert table[2] == "| engine servers | - | 8.0 |" and "trainer backward 70%" in table[3]
    assert table[-1].endswith("**2.0 s** |") and "50% of them" in table[-3]
