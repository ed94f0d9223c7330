"""A resolved harness trajectory as SFT rows: one per segment, its tokens beside its messages and tools."""
import pytest

from actors.episodes.trajectory import Trajectory
from actors.stages.harness_traces import trace_rows

BASH = [{"type": "function", "function": {"name": "bash"}}]


def test_each_segment_is_a_row_with_its_own_messages_and_tools():
    earlier = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]
    last = [{"role": "user", "content": "again"}, {"role": "assistant", "content": "done"}]
    traj = Trajectory(0, 0, 0, "t", 0, "resolved", token_ids=[5, 6, 7, 8, 9], loss_mask=[0, 1, 0, 0, 1],
                      segment_starts=[0, 2], segment_messages=[earlier, last], segment_tools=[BASH, None])
    rows = trace_rows(traj)
    assert [(r["token_ids"], r["loss_mask"], r["messages"], r["segment"]) for r in rows] == \
           [([5, 6], [0, 1], earlier, 0), ([7, 8, 9], [0, 0, 1], last, 1)]
    assert rows[0]["tools"] == BASH and "tools" not in rows[1] and all(r["resolved"] for r in rows)


def test_a_trajectory_without_its_segments_messages_is_refused():
    traj = Trajectory(0, 0, 0, "t", 0, "resolved", token_ids=[5, 6], loss_mask=[0, 1], segment_starts=[0])
    with pytest.raises(ValueError, match="1 segments but 0 message lists.*EpisodeActor._take_segments"):
        trace_rows(traj)
