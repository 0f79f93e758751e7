"""Torch definitions of the bundled decoder language models with a key/value cache, random
weights (a Llama's head predicts a fixed successor of each token), in the merged layout of
Hugging Face exports: one forward serves the prefill (an empty past) and each decode step.
Its arguments are `input_ids`, `attention_mask` (over past and new tokens), `position_ids`
and, per layer, the past key and value; it returns the logits and, per layer, the present
key and value (past and new, concatenated)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def _allowed(attention_mask: torch.Tensor, sequence: int) -> torch.Tensor:
    """Which keys each new token sees, [batch, 1, sequence, total_sequence]: the past and the
    new tokens up to itself, less padding. Sizes come from the shapes, so an empty past works."""
    total = attention_mask.shape[1]
    queries = torch.arange(sequence, device=attention_mask.device) + (total - sequence)
    keys = torch.arange(total, device=attention_mask.device)
    causal = keys[None, :] <= queries[:, None]
    return causal[None, None] & attention_mask[:, None, None, :].bool()


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            allowed: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention, [batch, heads, sequence, head_dim]. Masked scores take
    the lowest finite value, not -inf, so a padding query that sees nothing stays finite."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    out: torch.Tensor = F.softmax(scores, dim=-1) @ v
    return out


def _heads(x: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """[batch, sequence, heads * head_dim] to [batch, heads, sequence, head_dim]."""
    return x.reshape(x.shape[0], x.shape[1], heads, head_dim).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """[batch, heads, sequence, head_dim] to [batch, sequence, heads * head_dim]."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3])


def _outputs(logits: torch.Tensor, presents: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (logits, *presents)


# -- GPT-2 ------------------------------------------------------------------------------------
class GPT2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, past_key: torch.Tensor,
                past_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = (_heads(t, self.heads, self.head_dim)
                   for t in self.c_attn(x).split(x.shape[-1], dim=-1))
        key = torch.cat([past_key, k], dim=2)
        value = torch.cat([past_value, v], dim=2)
        out: torch.Tensor = self.c_proj(_merge(_attend(q, key, value, allowed)))
        return out, key, value


class GPT2Layer(nn.Module):
    """Pre-LayerNorm block: attention, then a 4x GELU MLP, each around a residual."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = GPT2Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, intermediate)
        self.c_proj = nn.Linear(intermediate, hidden)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, past_key: torch.Tensor,
                past_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attended, key, value = self.attn(self.ln_1(x), allowed, past_key, past_value)
        x = x + attended
        x = x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x, key, value


class GPT2Decoder(nn.Module):
    """GPT-2: learned absolute positions, pre-LayerNorm blocks, a final LayerNorm and an LM
    head tied to the token embedding (the export's constant folding stores the head's
    transposed copy beside the embedding)."""

    def __init__(self, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 intermediate: int, vocab: int, max_positions: int) -> None:
        super().__init__()
        assert kv_heads == heads and head_dim * heads == hidden
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        self.h = nn.ModuleList(GPT2Layer(hidden, heads, intermediate) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        allowed = _allowed(attention_mask, input_ids.shape[1])
        x = self.wte(input_ids) + self.wpe(position_ids)
        presents: list[torch.Tensor] = []
        for i, layer in enumerate(self.h):
            x, key, value = layer(x, allowed, past[2 * i], past[2 * i + 1])
            presents += [key, value]
        return _outputs(F.linear(self.ln_f(x), self.wte.weight), presents)


# -- Llama ------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * out


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


class Rotary(nn.Module):
    """RoPE's cos and sin at the given positions, [batch, 1, sequence, head_dim]."""

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq: torch.Tensor = self.inv_freq  # type: ignore[assignment]
        freqs = position_ids[:, :, None].float() * inv_freq
        angles = torch.cat([freqs, freqs], dim=-1)[:, None]
        return angles.cos(), angles.sin()


class LlamaAttention(nn.Module):
    """Grouped-query attention: kv_heads keys and values, each shared by heads // kv_heads
    query heads; keys are cached after RoPE."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                allowed: torch.Tensor, past_key: torch.Tensor, past_value: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cos, sin = rope
        q = _heads(self.q_proj(x), self.heads, self.head_dim)
        k = _heads(self.k_proj(x), self.kv_heads, self.head_dim)
        v = _heads(self.v_proj(x), self.kv_heads, self.head_dim)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        key = torch.cat([past_key, k], dim=2)
        value = torch.cat([past_value, v], dim=2)
        attended = _attend(q, self._repeat(key), self._repeat(value), allowed)
        out: torch.Tensor = self.o_proj(_merge(attended))
        return out, key, value

    def _repeat(self, x: torch.Tensor) -> torch.Tensor:
        """kv_heads to heads, each key/value head repeated for its group of query heads."""
        b, _, t, d = x.shape
        group = self.heads // self.kv_heads
        return x[:, :, None].expand(b, self.kv_heads, group, t, d).reshape(b, self.heads, t, d)


class LlamaLayer(nn.Module):
    """RMSNorm, attention, RMSNorm, SwiGLU MLP (down(silu(gate(x)) * up(x))), residuals."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 intermediate: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaAttention(hidden, heads, kv_heads, head_dim)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                allowed: torch.Tensor, past_key: torch.Tensor, past_value: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attended, key, value = self.self_attn(self.input_layernorm(x), rope, allowed, past_key,
                                              past_value)
        x = x + attended
        y = self.post_attention_layernorm(x)
        x = x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))
        return x, key, value


class LlamaDecoder(nn.Module):
    """Llama: RoPE from position_ids, RMSNorm, grouped-query attention, SwiGLU MLPs, a final
    RMSNorm and an untied LM head."""

    def __init__(self, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 intermediate: int, vocab: int, max_positions: int) -> None:
        super().__init__()
        assert heads % kv_heads == 0
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.rotary = Rotary(head_dim)
        self.layers = nn.ModuleList(LlamaLayer(hidden, heads, kv_heads, head_dim, intermediate)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        allowed = _allowed(attention_mask, input_ids.shape[1])
        rope = self.rotary(position_ids)
        x = self.embed_tokens(input_ids)
        presents: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            x, key, value = layer(x, rope, allowed, past[2 * i], past[2 * i + 1])
            presents += [key, value]
        return _outputs(self.lm_head(self.norm(x)), presents)


FAMILIES: dict[str, type[nn.Module]] = {"gpt2": GPT2Decoder, "llama": LlamaDecoder}


# The Llama's weights: drawn as Llama-family training starts (normal, standard deviation
# 0.02, the residual projections' divided by sqrt(2 * layers)), then given a next-token rule.
# A head of random rows scores every token alike and a random body scrambles which token it
# read (on the 0.5B decoder the same token in two contexts ends at cosine 0.008), so the
# winner is decided by noise: even an f16 form then disagreed on 4% of steps, and no 8-bit
# form of any runtime kept 0.87. Here the embeddings outweigh what the layers add, and the
# head scores each token's successor highest, as training would make it. The embeddings'
# scale sets the margins: on the 0.5B decoder, over 8 prompts of 64 tokens and 24 greedy
# steps, at 0.05 the smallest top-1 margin is 0.001 and OpenVINO's int8 and int4 forms
# change 3 and 6 of the 192 tokens; at 0.06 the smallest margin is 1.6 and they change none.
LLAMA_INIT_STD = 0.02
LLAMA_EMBED_STD = 0.06


def _llama_weights(module: nn.Module, spec: Any) -> None:
    """Draw a Llama's weights in place, in module order, and make its head predict each
    token's successor under a fixed random permutation: the head's row for a token is the
    embedding of the token it follows, so the last position's hidden state, which resembles
    its own token's embedding, scores that token's successor highest."""
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):
            std = LLAMA_INIT_STD
            if name.endswith(("o_proj", "down_proj")):
                std /= math.sqrt(2 * spec.layers)
            sub.weight.normal_(0.0, std)
        elif isinstance(sub, nn.Embedding):
            sub.weight.normal_(0.0, LLAMA_EMBED_STD)
    successor = torch.randperm(spec.vocab)
    follows = torch.empty_like(successor)
    follows[successor] = torch.arange(spec.vocab)
    head: nn.Linear = module.lm_head  # type: ignore[assignment]
    embed: nn.Embedding = module.embed_tokens  # type: ignore[assignment]
    head.weight.copy_(embed.weight[follows])


def build(spec: Any, seed: int = 0) -> nn.Module:
    """The decoder a `DecoderSpec` describes, in eval mode, its weights drawn from `seed`
    alone (the global generator is left as it was). GPT-2's embeddings have standard
    deviation hidden**-0.5, so the tied head's logits are of order one; a Llama's weights
    are drawn by `_llama_weights`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = FAMILIES[spec.family](
            spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.head_dim,
            spec.intermediate, spec.vocab, spec.max_positions)
        with torch.no_grad():
            if spec.family == "llama":
                _llama_weights(module, spec)
            else:
                for sub in module.modules():
                    if isinstance(sub, nn.Embedding):
                        sub.weight.normal_(0.0, spec.hidden ** -0.5)
    return module.eval()
