"""Two small models written in plain PyTorch for the tests and the example:
a Llama-style decoder (RMSNorm, rotary, grouped-query attention, SwiGLU) and
a DiT-style diffusion transformer (bidirectional attention, adaLN-zero
modulation by a per-sequence timestep). Both work on packed tokens [T, ...]
and take their attention function as `attention(q, k, v, causal=...)`, so
that the same weights run under dcp_torch.attention and under a naive
per-sequence reference."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def naive_attention(q, k, v, causal=True):
    """One whole sequence, written out: q [L, H, D], k and v [L, Hkv, D]."""
    repeat = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(repeat, dim=1)
    v = v.repeat_interleave(repeat, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.shape[2])
    if causal:
        length = q.shape[0]
        mask = torch.ones(length, length, dtype=torch.bool,
                          device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.einsum("hij,jhd->ihd", scores.softmax(-1), v)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) \
            * self.weight


def rotary(x, positions, base=10000.0):
    """Rotary embedding of x [T, H, D] at positions [T] (rotate-half form)."""
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, dtype=x.dtype, device=x.device)
                     / half)
    angles = positions.to(x.dtype)[:, None] * freqs[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn, attention,
                 head_dim=None):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = head_dim or hidden // heads
        self.attention = attention
        self.attention_norm = RMSNorm(hidden)
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden)
        self.w_gate = nn.Linear(hidden, ffn, bias=False)
        self.w_up = nn.Linear(hidden, ffn, bias=False)
        self.w_down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x, positions):
        tokens = x.shape[0]
        h = self.attention_norm(x)
        q = rotary(self.wq(h).view(tokens, self.heads, self.head_dim),
                   positions)
        k = rotary(self.wk(h).view(tokens, self.kv_heads, self.head_dim),
                   positions)
        v = self.wv(h).view(tokens, self.kv_heads, self.head_dim)
        a = self.attention(q, k, v, causal=True).reshape(tokens, -1)
        x = x + self.wo(a)
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, vocab=64, hidden=32, layers=2, heads=8, kv_heads=4,
                 ffn=64, attention=None, head_dim=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            LlamaBlock(hidden, heads, kv_heads, ffn, attention, head_dim)
            for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, position_ids)
        return self.lm_head(self.norm(x))

    def per_token_loss(self, inputs):
        logits = self(inputs["input_ids"], inputs["position_ids"])
        return F.cross_entropy(logits, inputs["labels"], reduction="none")


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=t.dtype,
                                                        device=t.device)
                      / half)
    angles = t[:, None] * freqs[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, ffn, attention):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.attention = attention
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.modulation = nn.Linear(hidden, 6 * hidden)

    def forward(self, x, c):
        tokens = x.shape[0]
        shift1, scale1, gate1, shift2, scale2, gate2 = \
            self.modulation(F.silu(c)).chunk(6, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).view(tokens, 3, self.heads,
                                   self.head_dim).unbind(1)
        a = self.attention(q, k, v, causal=False).reshape(tokens, -1)
        x = x + gate1 * self.proj(a)
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.fc2(F.gelu(self.fc1(h)))


class DiT(nn.Module):
    """Tokens are patch features [T, patch_dim]; each sequence (a clip) has
    one diffusion timestep t. Predicts the noise of each patch."""

    def __init__(self, patch_dim=6, hidden=32, layers=2, heads=4, ffn=64,
                 attention=None):
        super().__init__()
        self.hidden = hidden
        self.patch_embed = nn.Linear(patch_dim, hidden)
        self.time_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(),
                                      nn.Linear(hidden, hidden))
        self.layers = nn.ModuleList(DiTBlock(hidden, heads, ffn, attention)
                                    for _ in range(layers))
        self.final_norm = nn.LayerNorm(hidden, elementwise_affine=False)
        self.final_modulation = nn.Linear(hidden, 2 * hidden)
        self.out = nn.Linear(hidden, patch_dim)
        # Not adaLN-zero: zero gates would leave the blocks' gradients zero
        # and the test weaker.

    def forward(self, x, position_ids, t, sequence_index):
        c = self.time_mlp(timestep_embedding(t, self.hidden))[sequence_index]
        pos = timestep_embedding(position_ids.to(x.dtype), self.hidden)
        h = self.patch_embed(x) + pos
        for layer in self.layers:
            h = layer(h, c)
        shift, scale = self.final_modulation(F.silu(c)).chunk(2, dim=-1)
        return self.out(self.final_norm(h) * (1 + scale) + shift)

    def per_token_loss(self, inputs):
        predicted = self(inputs["x"], inputs["position_ids"], inputs["t"],
                         inputs["sequence_index"])
        return (predicted - inputs["noise"]).pow(2).mean(-1)


def llama_sample(sample_id, length, vocab=64):
    """A deterministic token sequence: input_ids and next-token labels."""
    generator = torch.Generator().manual_seed(1000 + sample_id)
    tokens = torch.randint(0, vocab, (length + 1,), generator=generator)
    return {"input_ids": tokens[:-1], "labels": tokens[1:]}


def dit_sample(sample_id, length, patch_dim=6, dtype=torch.float64):
    generator = torch.Generator().manual_seed(2000 + sample_id)
    return {"x": torch.randn(length, patch_dim, generator=generator,
                             dtype=dtype),
            "noise": torch.randn(length, patch_dim, generator=generator,
                                 dtype=dtype),
            "t": torch.tensor(float(sample_id % 7) * 100.0 + 3.0,
                              dtype=dtype)}
