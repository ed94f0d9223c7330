"""The megatron-core trainer backend: a GPTModel driven by the caller's torch optimizer.

One instance per trainer rank. torch.distributed is initialised by the caller; this class
creates megatron's model-parallel groups (tensor parallel TP, expert parallel EP) on top.

Gradient reduction contract (what the caller must do after backward):
- dense parameters are replicated over `data_parallel_group()` (world / TP ranks);
- expert parameters (EP > 1 or expert data parallel) live in `expert_data_parallel_group()`
  (world / (EP x expert-TP) ranks) and already hold the contributions of every rank's
  tokens in their EP group (the allgather dispatcher sums them in backward).
`all_reduce_grads()` does both; `clip_grad_norm_()` computes the norm over the model-parallel
shards (each distinct element counted once, identical on every rank).
With TP or EP > 1 (`requires_lockstep`), every rank of a model-parallel group must call
`sequence_logprobs` and backward the same number of times (they contain collectives), also a
rank with no samples (give it a dummy row with loss mask 0). TP ranks must see the same
batch: the data-parallel rank that picks a rank's share is `data_parallel_rank`. EP ranks may
hold different batch shapes: they are padded to a common shape inside `sequence_logprobs`
(megatron's allgather dispatcher needs equal token counts).
"""
from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist

from policies.device import role_device
from policies.training.megatron import cpu_shim
from policies.training.megatron.convert import (
    REPLICATED, Layout, expert_index, from_hf, is_expert, merge_shards, shard, split_rule, to_hf,
)
from policies.training.megatron.model import (
    MegatronOptions, build_gpt_model, load_hf_config, make_layout, read_hf_weights,
)


class MegatronBackend:
    def __init__(self, cfg, model_path: str, rank: int, world_size: int,
                 options: Optional[MegatronOptions] = None):
        self._own_process_group = False
        if not dist.is_initialized():
            if world_size != 1:
                raise RuntimeError("MegatronBackend: torch.distributed must be initialised by the caller")
            # megatron needs a process group even for one rank; this one is ours to destroy.
            # An in-process store: one rank needs no port (a picked "free" one can be taken first).
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                    store=dist.HashStore(), rank=0, world_size=1)
            self._own_process_group = True
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise RuntimeError(
                f"MegatronBackend: rank/world_size {rank}/{world_size} disagree with torch.distributed "
                f"{dist.get_rank()}/{dist.get_world_size()}")
        self.cfg = cfg
        self.rank, self.world_size = rank, world_size
        self.options = options if options is not None else MegatronOptions.from_trainer_config(cfg)
        self.options.validate()
        tp, ep = self.options.tensor_parallel_size, self.options.expert_parallel_size
        if world_size % tp or world_size % ep:
            raise ValueError(
                f"trainer: tensor_parallel_size {tp} and expert_parallel_size {ep} must divide "
                f"the trainer world size {world_size}")

        from megatron.core import parallel_state as ps

        cpu_shim.apply()
        if ps.model_parallel_is_initialized():
            ps.destroy_model_parallel()
        ps.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep)
        self._ps = ps
        self.hf_config = load_hf_config(model_path)
        self.layout: Layout = make_layout(self.hf_config, self.options)
        if ep > 1 and not self.layout.is_moe:
            raise ValueError(f"trainer.expert_parallel_size={ep} needs a MoE model")
        self.model = build_gpt_model(self.hf_config, self.layout, self.options)
        self.device = torch.device("cpu")
        if torch.cuda.is_available():
            from megatron.core import tensor_parallel

            # GPU: the training RNG tracker needs its model-parallel CUDA states.
            tensor_parallel.model_parallel_cuda_manual_seed(1234 + torch.initial_seed() % 1000)
            self.device = role_device()
            self.model.to(self.device)
        self.model.train()
        self.load_hf_state_dict(read_hf_weights(model_path))

    # ------------------------------------------------------------------ training

    @property
    def optimizer_is_sharded(self) -> bool:
        """False when every rank holds (and steps) the same full model: pure data parallel."""
        return self.layout.tp_size > 1 or self.layout.ep_size > 1

    @property
    def requires_lockstep(self) -> bool:
        """True when forward/backward are collectives over model-parallel groups."""
        return self.layout.tp_size > 1 or self.layout.ep_size > 1

    @property
    def data_parallel_rank(self) -> int:
        return dist.get_rank(self.data_parallel_group())

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        return self.model.parameters()

    def named_parameters(self) -> Iterator[Tuple[str, torch.nn.Parameter]]:
        return self.model.named_parameters()

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    def sequence_logprobs(self, token_ids: torch.Tensor, attention_mask: torch.Tensor,
                          temperature: float = 1.0) -> torch.Tensor:
        """Same contract as `policies.training.logprobs.sequence_logprobs` (right padding only)."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
        attention_mask = attention_mask.long()
        if bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any()):
            raise ValueError("MegatronBackend.sequence_logprobs: batches must be right-padded")
        batch, length = token_ids.shape
        token_ids, attention_mask = self._pad_to_group_shape(token_ids, attention_mask)
        full = self._logprobs(token_ids.to(self.device), attention_mask.to(self.device), temperature)
        return full[:batch, :length]

    def _pad_to_group_shape(self, token_ids, attention_mask):
        """Pad (masked rows / right columns) to the largest [B, T] in the tokens' EP group."""
        if not (self.layout.is_moe and self.layout.ep_size * self.layout.etp_size > 1):
            return token_ids, attention_mask
        shape = torch.tensor(token_ids.shape, dtype=torch.long)
        dist.all_reduce(shape, op=dist.ReduceOp.MAX, group=self._ps.get_expert_tensor_and_model_parallel_group())
        rows, cols = int(shape[0]) - token_ids.shape[0], int(shape[1]) - token_ids.shape[1]
        if rows == 0 and cols == 0:
            return token_ids, attention_mask
        pad = (0, cols, 0, rows)
        return (torch.nn.functional.pad(token_ids, pad), torch.nn.functional.pad(attention_mask, pad))

    def _logprobs(self, token_ids, attention_mask, temperature):
        from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

        batch, length = token_ids.shape
        device = token_ids.device
        # megatron's mask: True = may not attend. Causal, and padded keys hidden.
        causal = torch.ones(length, length, dtype=torch.bool, device=device).triu(1)
        keys_hidden = attention_mask[:, None, None, :] == 0
        mask = causal[None, None] | keys_hidden
        position_ids = torch.arange(length, device=device).unsqueeze(0).expand(batch, length)
        logits = self.model(token_ids, position_ids, mask)  # [B, T, V / TP]
        logits = logits[:, :-1].float() / temperature
        logits = self._mask_padded_vocab(logits)
        targets = token_ids[:, 1:].contiguous()
        # Megatron's cross entropy works on [s, b, v]; it all-reduces over the TP group, so
        # every TP rank gets the full values. It may modify its input in place.
        nll = vocab_parallel_cross_entropy(logits.transpose(0, 1).contiguous(), targets.t().contiguous())
        next_logprobs = -nll.t() * attention_mask[:, 1:].to(nll.dtype)
        return torch.nn.functional.pad(next_logprobs, (1, 0))

    def _mask_padded_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        layout = self.layout
        if layout.padded_vocab_size == layout.vocab_size:
            return logits
        local = logits.shape[-1]
        start = layout.tp_rank * local
        vocab_ids = torch.arange(start, start + local, device=logits.device)
        if int(vocab_ids[-1]) < layout.vocab_size:
            return logits
        return logits.masked_fill(vocab_ids >= layout.vocab_size, float("-inf"))

    def data_parallel_group(self):
        """Group over which the dense parameters' gradients are reduced."""
        return self._ps.get_data_parallel_group()

    def expert_data_parallel_group(self):
        """Group over which the expert parameters' gradients are reduced."""
        return self._ps.get_expert_data_parallel_group()

    def grad_groups(self) -> List[Tuple[List[torch.nn.Parameter], object]]:
        """[(dense params, DP group), (expert params, expert-DP group)]."""
        dense, experts = [], []
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                (experts if is_expert(name) else dense).append(param)
        groups = [(dense, self.data_parallel_group())]
        if experts:
            groups.append((experts, self.expert_data_parallel_group()))
        return groups

    def all_reduce_grads(self, average: bool = False) -> None:
        """Reduce gradients over data-parallel replicas (sum; `average` divides by DP size).

        Expert grads already sum their EP group's tokens; averaging divides them by the
        dense DP size too, so dense and expert grads keep the same scale.
        """
        dp_size = dist.get_world_size(self.data_parallel_group())
        for params, group in self.grad_groups():
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            if dist.get_world_size(group) > 1 and params:
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset: offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
            if average and dp_size > 1:
                for p in params:
                    p.grad.div_(dp_size)

    def grad_norm(self) -> torch.Tensor:
        """Global L2 norm of the gradients, every distinct element counted once."""
        ps = self._ps
        sharded = torch.zeros((), dtype=torch.float64)
        replicated = torch.zeros((), dtype=torch.float64)
        experts = torch.zeros((), dtype=torch.float64)
        for name, p in self.model.named_parameters():
            if p.grad is None:
                continue
            sq = p.grad.detach().double().pow(2).sum()
            if is_expert(name):
                experts += sq
            elif split_rule(name) != REPLICATED and self.layout.tp_size > 1:
                sharded += sq
            else:
                replicated += sq
        if self.layout.tp_size > 1:
            dist.all_reduce(sharded, group=ps.get_tensor_model_parallel_group())
        if self.layout.is_moe and dist.get_world_size(ps.get_expert_tensor_and_model_parallel_group()) > 1:
            dist.all_reduce(experts, group=ps.get_expert_tensor_and_model_parallel_group())
        return (sharded + replicated + experts).sqrt().float()

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Like torch.nn.utils.clip_grad_norm_, over the model-parallel shards."""
        norm = self.grad_norm()
        scale = max_norm / (float(norm) + 1e-6)
        if scale < 1.0:
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(scale)
        return norm

    # ------------------------------------------------------------------ weights

    def hf_state_dict(self) -> Dict[str, torch.Tensor]:
        """Full HF-named tensors (TP shards and EP experts gathered); identical on all ranks."""
        ps = self._ps
        layout = self.layout
        tp_group = ps.get_tensor_model_parallel_group()
        etp_group = ps.get_expert_tensor_parallel_group()
        ep_group = ps.get_expert_model_parallel_group()
        full: Dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                tensor = param.detach().contiguous()
                rule = split_rule(name)
                parts = expert_index(name)
                if parts is None:
                    if layout.tp_size > 1 and rule != REPLICATED:
                        tensor = merge_shards(_all_gather(tensor, tp_group), rule)
                    full[name] = tensor.to("cpu", copy=True)
                    continue
                if layout.etp_size > 1 and rule != REPLICATED:
                    tensor = merge_shards(_all_gather(tensor, etp_group), rule)
                head, j, tail = parts
                pieces = _all_gather(tensor, ep_group) if layout.ep_size > 1 else [tensor]
                for ep_rank, piece in enumerate(pieces):
                    full[f"{head}{ep_rank * layout.num_local_experts + j}{tail}"] = piece.to("cpu", copy=True)
        return to_hf(full, layout)

    def load_hf_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        local = shard(from_hf(state, self.layout), self.layout)
        params = dict(self.model.named_parameters())
        missing = sorted(set(params) - set(local))
        unexpected = sorted(set(local) - set(params))
        if missing or unexpected:
            raise KeyError(f"megatron weights mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        with torch.no_grad():
            for name, param in params.items():
                value = local[name]
                if value.shape != param.shape:
                    raise ValueError(f"{name}: shape {tuple(value.shape)} != model {tuple(param.shape)}")
                param.copy_(value.to(param.dtype))

    def close(self) -> None:
        if self._ps.model_parallel_is_initialized():
            self._ps.destroy_model_parallel()
        if self._own_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._own_process_group = False


def _all_gather(tensor: torch.Tensor, group) -> List[torch.Tensor]:
    size = dist.get_world_size(group)
    if size == 1:
        return [tensor]
    out = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(out, tensor, group=group)
    return out
