"""Training a policy: one rank's step (`trainer`), its backends (`trainer_backend` names them:
`torch_backend`, `sim_backend`, `megatron/`), the GRPO loss and advantages (`losses`, `advantages`,
`logprobs`), supervised fine-tuning (`sft`) and crash-safe checkpoints (`checkpoint`).

May import: `policies` (model, tokenizer, device, sample types), `policies.chat` (SFT renders
messages), `configs`; never an engine or the server (tests/test_layers.py holds this).
"""
