"""Chat as token ids: the chat template and its incremental rendering (`chat_tokenizer`,
`chat_render`, `qwen3_style_template`), a conversation and one trajectory's session kept token-in,
token-out (`conversation`, `chat_session`), the check that a template renders incrementally as in
one piece (`tito_check`, `swerve tito-check`), and OpenAI's chat-completions wire format
(`openai_wire`, with `openai_messages` and `openai_reply`).

May import: `policies.sample_types` and its own modules; no torch, no model, no server (episode
actors import it; tests/test_layers.py holds this).
"""
