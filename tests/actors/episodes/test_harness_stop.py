"""A harness's `stop` through the session gateway: the openai client on loopback, the gateway, the
HarnessPlayer, the run's router and the real CPU engine. The engine ends generation at the stop
string, so no token past it is generated, trained or billed."""
import threading

import openai
import pytest

from actors.engines.engine_actor import EngineActor
from actors.engines.engine_router import EngineRouter, local_call
from actors.episodes.episode_actor import EpisodeActor
from actors.episodes.gateway import POLICY_MODEL_ID, Gateway
from actors.episodes.harness_player import HarnessPlayer, RequestBooks
from actors.episodes.trajectory import Trajectory, WorkItem
from configs.schema import EngineConfig, HarnessConfig, RolloutConfig
from policies.chat.chat_session import ChatSession
from policies.chat.chat_tokenizer import IM_END, load_chat_tokenizer

pytestmark = pytest.mark.slow  # starts an engine server process

MAX_MODEL_LEN = 4096
MESSAGES = [{"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "List the files, then fix the bug."}]


@pytest.fixture(scope="module")
def engine(model_path):
    engine = EngineActor(0, EngineConfig(), model_path)
    yield engine
    engine.close()


class Recording(EngineRouter):
    """The run's router, keeping what each generate call asked and got."""

    def __init__(self, engines):
        super().__init__(engines, local_call)
        self.calls = []

    def generate(self, request, sticky_key):
        out = super().generate(request, sticky_key)
        self.calls.append((request, out))
        return out


def generated_by_server(engine) -> int:
    # A command runs between two scheduler steps: once it has, the step that finished the last
    # request has counted its tokens.
    engine.client.continue_generation()
    return engine.client.get_server_info()["total_generated_tokens"]


def one_episode(engine, tokenizer, **ask):
    """One harness request answered as a fresh episode (same seed each time, so the same draw):
    what the harness got, the router's record, the server's generated tokens, the trajectory."""
    gateway = Gateway(POLICY_MODEL_ID, MAX_MODEL_LEN, request_deadline_s=120.0)
    gateway.listen_tcp()
    router = Recording([engine])
    rollout = RolloutConfig(max_tokens_per_turn=48)
    harness = HarnessConfig()
    player = HarnessPlayer(tokenizer, harness, rollout, POLICY_MODEL_ID, MAX_MODEL_LEN)
    chat = ChatSession(tokenizer, harness.history, player.max_context_tokens)
    work = WorkItem(None, "task-1", group_id=0, member=0, attempt=0, admitted_version=0, seed=7)
    traj = Trajectory(0, 0, 0, "task-1", 0, outcome="")
    session = gateway.open()
    api = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}/sessions/{session.sid}/v1",
                        api_key=session.api_key, max_retries=0)
    replies = []
    harness_side = threading.Thread(target=lambda: replies.append(
        api.chat.completions.create(model="mine", messages=MESSAGES, **ask)), daemon=True)
    before = generated_by_server(engine)
    try:
        harness_side.start()
        pending = session.next_request(60.0)
        assert pending is not None
        pending.answer(*player.answer(pending.request, chat, work, traj, router, "episode-1", RequestBooks()))
        harness_side.join(60)
    finally:
        gateway.close()
    EpisodeActor._take_segments(chat, traj)
    return replies[0], router.calls, generated_by_server(engine) - before, traj


def test_a_harness_stop_string_ends_generation_at_the_engine(engine, tokenizer_path):
    tokenizer = load_chat_tokenizer(tokenizer_path)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    plain, [(plain_request, plain_out)], plain_generated, _ = one_episode(engine, tokenizer)
    assert plain_request.stop == ()  # without stop strings, none reach the engine
    assert plain_generated == len(plain_out.token_ids)
    text = plain.choices[0].message.content
    assert len(plain_out.token_ids) >= 12 and len(text) >= 12, (plain_out, text)
    stop = text[len(text) // 3:len(text) // 3 + 2]
    # Where the engine must stop: the first token whose text holds the stop string.
    through = next(k for k in range(1, len(plain_out.token_ids) + 1)
                   if stop in tokenizer.decode(plain_out.token_ids[:k], skip_special_tokens=False))
    assert through < len(plain_out.token_ids)

    cut, [(request, out)], generated, traj = one_episode(engine, tokenizer, stop=[stop, "never in this reply"])
    assert request.stop == (stop, "never in this reply")
    # The engine stopped there: it generated the tokens up to and including the stop string's
    # last one (the same draw as the plain reply's), no more, and says it stopped.
    assert generated == len(out.token_ids) == through
    assert out.token_ids == plain_out.token_ids[:through] and out.finish_reason == "stop"
    # The harness gets the text before the stop string, billed for what was generated.
    assert cut.choices[0].message.content == text[:text.find(stop)]
    assert cut.choices[0].finish_reason == "stop" and cut.usage.completion_tokens == through
    # The trajectory: the prompt, the sampled tokens through the stop (trained), the turn closed.
    sampled = [t for t, m in zip(traj.token_ids, traj.loss_mask) if m]
    assert sampled == out.token_ids and traj.token_ids[-through - 1:] == out.token_ids + [im_end]
    assert traj.loss_mask[-1] == 0 and traj.messages[-1] == {"role": "assistant", "content": text[:text.find(stop)]}
