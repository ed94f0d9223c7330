"""The policy: model, tokenizer and corpus, devices, seeds and the sample types every part shares;
`chat/` (templates, token-in token-out sessions, OpenAI's wire format), `engines/` (how a served
policy is reached), `server/` (the CPU inference server) and `training/` (the trainer step, its
backends, losses, SFT, checkpoints). No Ray, nothing of `envs`.
"""
