"""Trainer backend `megatron`: megatron-core GPTModel for Qwen3 / Qwen3-MoE (TP, EP).

backend.MegatronBackend is the entry point; convert.py maps weights to and from Hugging Face
names; cpu_shim.py lets megatron-core 0.16 run on CPU (gloo). Nothing here imports megatron
at package import time.
"""
