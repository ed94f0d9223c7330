"""The placement plan (actors/cluster/placement_plan.py) made real in Ray: the run's placement groups and
the options every GPU role is created with.

Each engine asks for engine.tp_size GPUs, one bundle of the SPREAD engine group (a bundle is on
one node, as a tensor-parallel SGLang server needs; the engines spread over nodes), each trainer
shard one GPU of the trainer group (PACK), and
Ray sets every such actor's CUDA_VISIBLE_DEVICES to exactly its GPUs; SGLang and torch inherit
that view (policies/device.py). Trainer ranks take the trainer group's bundles node by node in
rank order, so the ranks of one node are consecutive (Megatron's parallel groups assume it).

A plan the cluster cannot hold fails here, before any actor starts, with the shortfall, instead
of actors that wait for GPUs forever.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ray
from ray.exceptions import GetTimeoutError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.cluster.placement_plan import role as plan_role


class PlacementShortfall(RuntimeError):
    """The cluster cannot hold the run's placement plan."""


def _alive_nodes() -> list[tuple[str, dict]]:
    return [(n["NodeID"][:8], n["Resources"]) for n in ray.nodes() if n["Alive"]]


def check_fits(plan: dict, nodes: list[tuple[str, dict]]) -> None:
    """First fit of every GPU bundle onto the nodes' declared GPUs (and custom resources): raises
    PlacementShortfall naming what is missing, or returns when the plan fits."""
    free = {node: dict(resources) for node, resources in nodes}
    # Larger bundles first (engines before trainer shards): first fit then rarely refuses what fits.
    for group in sorted(plan["placement_groups"], key=lambda g: -max(b.get("GPU", 0) for b in g["bundles"])):
        for i, bundle in enumerate(group["bundles"]):
            node = next((n for n, left in free.items()
                         if all(left.get(k, 0.0) >= v - 1e-9 for k, v in bundle.items())), None)
            if node is None:
                have = ", ".join(f"{n}: {left.get('GPU', 0):g} GPU" + "".join(
                    f", {k} {left.get(k, 0):g}" for k in bundle if k != "GPU") for n, left in free.items())
                raise PlacementShortfall(
                    f"the cluster cannot hold the placement plan: {group['name']} bundle {i} needs {bundle} on one "
                    f"node, and after the bundles before it the nodes have left: {have or 'no nodes'}. The plan needs "
                    f"{plan['totals']['num_gpus']:g} GPUs in all (`swerve plan` shows it): add GPU nodes (declaring "
                    f"the role resources ray.engine_resource / ray.trainer_resource), or lower engine.num_engines, "
                    f"engine.tp_size or trainer.num_shards")
            for k, v in bundle.items():
                free[node][k] -= v


@dataclass
class Placement:
    """The run's reserved placement groups; `options(role, index)` are a GPU role's Ray options."""
    plan: dict
    groups: dict = field(default_factory=dict)  # placement-group name -> PlacementGroup
    trainer_bundles: list = field(default_factory=list)  # bundle index of each trainer rank

    @classmethod
    def reserve(cls, plan: dict, timeout_s: float) -> "Placement":
        """Create and wait for the plan's placement groups (none on a CPU run)."""
        self = cls(plan)
        if not plan["placement_groups"]:
            return self
        check_fits(plan, _alive_nodes())
        for spec in plan["placement_groups"]:
            self.groups[spec["name"]] = placement_group(spec["bundles"], strategy=spec["strategy"])
        try:
            ray.get([g.ready() for g in self.groups.values()], timeout=timeout_s)
        except GetTimeoutError:
            self.release()
            raise PlacementShortfall(
                f"the placement groups were not ready after {timeout_s:.0f} s (deadlines.placement_s): the cluster "
                f"declares the GPUs but they are in use (by another job?); nodes: {_alive_nodes()}") from None
        if "trainer-pg" in self.groups:
            self.trainer_bundles = _ranks_by_node(self.groups["trainer-pg"])
        return self

    def options(self, role: str, index: int) -> dict:
        """Ray options placing actor `index` of `role`: its GPUs in its bundle, or (CPU run) the
        sliver of its role resource."""
        entry = plan_role(self.plan, role)
        custom = entry["resources"]["custom"]
        gpus = entry["resources"]["num_gpus"]
        if not gpus:
            return {"resources": custom} if custom else {}
        if role == "engine":
            group, bundle = self.groups["engine-pg"], index
        else:
            group, bundle = self.groups["trainer-pg"], self.trainer_bundles[index]
        return {"num_gpus": gpus, "resources": custom,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)}

    def release(self) -> None:
        for group in self.groups.values():
            remove_placement_group(group)
        self.groups = {}


def _ranks_by_node(group: PlacementGroup) -> list[int]:
    """Bundle indices in rank order: the bundles of the node holding bundle 0 first, then the next
    node's, each node's in bundle order."""
    by_bundle = ray.util.placement_group_table(group)["bundles_to_node_id"]
    node_order: list[str] = []
    for i in sorted(by_bundle):
        if by_bundle[i] not in node_order:
            node_order.append(by_bundle[i])
    return sorted(by_bundle, key=lambda i: (node_order.index(by_bundle[i]), i))
