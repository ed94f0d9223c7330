"""actors/fleet/launch.py on a real local Ray: the end of a run with an episode actor that died."""
import os

import ray

from actors.fleet.launch import Fleet, shutdown
from actors.fleet.remote import RemoteCollector
from actors.cluster.roles import CollectorRole, EpisodeLoops, TrainerGroup
from configs.schema import DeadlinesConfig, RolloutConfig


@ray.remote(num_cpus=0)
class TakesWorkThenDies:
    """Stands in for an episode actor on a node removed after the last batch: it holds one work
    item when its process ends."""

    def __init__(self, collector):
        self.collector = collector

    def run(self):
        ray.get(self.collector.acquire.remote("episode-0"))
        os._exit(1)


@ray.remote(num_cpus=0)
class Finishes:
    def run(self):
        return {"actor": "episode-1", "episodes": 3}


def test_shutdown_ends_a_dead_episode_actors_work_as_infra_errors(ray_session):
    tasks = ["task-0", "task-1"]
    collector = RemoteCollector.options(num_cpus=0).remote(RolloutConfig(group_size=2, groups_per_batch=1),
                                                           tasks, tasks, 0)
    episodes = [TakesWorkThenDies.remote(collector), Finishes.remote()]
    fleet = Fleet(engine_set=None, trainers=TrainerGroup([], DeadlinesConfig()),
                  collector=CollectorRole(collector, DeadlinesConfig()), episodes=episodes,
                  episode_runs=EpisodeLoops([e.run.remote() for e in episodes]))
    ray.wait(fleet.episode_runs.refs[:1])  # the first one has died holding its item
    assert ray.get(collector.accounting.remote())["in_flight"] == 1

    results = shutdown(fleet, grace_s=30)

    assert results == [{"actor": "episode-1", "episodes": 3}]
    books = ray.get(collector.accounting.remote())  # raises if the identity breaks
    assert (books["admitted"], books["in_flight"], books["infra_excluded"]) == (1, 0, 1)
    for actor in [collector, *episodes]:
        ray.kill(actor)
