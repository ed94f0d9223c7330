"""The run directory's trajectory records: every segment's messages written, secrets blanked in each."""
import json

from actors.episodes.trajectory import Trajectory
from actors.report.redact import REDACTED
from actors.report.run_dir import RunDir
from configs import load_config

SECRET = "zq8Vw3Lp0xR7tYk2"  # shaped like no known key: only the environment tells it is a secret


def test_trajectory_records_hold_every_segment_s_messages_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("SWERVE_TEST_API_KEY", SECRET)
    leaked = {"role": "tool", "tool_call_id": "c1", "content": f"$ env\nSWERVE_TEST_API_KEY={SECRET}\n"}
    earlier = [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "env"}'}}]}, leaked]
    last = [{"role": "user", "content": "Summary. Continue."}, {"role": "assistant", "content": "Done."}]
    traj = Trajectory(0, 0, 0, "t", 0, "resolved", token_ids=[1, 2, 3, 4], segment_starts=[0, 2],
                      segment_messages=[earlier, last], segment_tools=[None, None], messages=last)
    run_dir = RunDir(load_config(None, [f"run.dir={tmp_path}", "run.name=segments"]))
    run_dir.write_trajectories(3, [traj.summary()])
    text = (run_dir.path / "trajectories" / "step_000003.jsonl").read_text()
    assert SECRET not in text
    record = json.loads(text)
    assert [len(messages) for messages in record["segment_messages"]] == [3, 2] and record["messages"] == last
    assert record["segment_messages"][0][2]["content"] == f"$ env\nSWERVE_TEST_API_KEY={REDACTED}\n"
    assert record["segment_messages"][0][1]["tool_calls"][0]["function"]["name"] == "bash"
