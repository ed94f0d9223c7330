"""How a policy is reached when it is served: SGLang's native HTTP protocol (`protocol`), its client
(`client`), an engine process of either kind (`process`: our CPU server or a real SGLang one),
SGLang's own code for checking what we send it (`sglang_side`), the sim engine (`sim_engine`) and
weight sync by NCCL broadcast (`weight_broadcast`).

May import: `policies` (sample types, device), `policies.chat`, `configs`; never the CPU server's
internals (it is started by command line) or training (tests/test_layers.py holds this).
"""
