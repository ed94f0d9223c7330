"""swerve's CPU inference server (`python -m policies.server`, `swerve serve`): a subset of SGLang's
native HTTP API (policies/engines/protocol.py) and its OpenAI routes, over continuous batching on
CPU (`scheduler`, `decoder`, `kv_batch`, `prefix_cache`, `sampler`).

May import: `policies.engines` (the protocol it serves), `policies.chat` (the OpenAI wire), the
model and tokenizer, `configs`; never training (tests/test_layers.py holds this).
"""
