"""A small decoder-only transformer (random weights from a fixed seed) with RoPE and a KV cache.

Enough to make prefill cost real time on a CPU and to check that KV loaded from gpucache
decodes exactly like recomputed KV. Not a trained model: its outputs are deterministic noise.
"""

import math
from typing import List, Optional, Tuple

import torch

KV = List[Tuple[torch.Tensor, torch.Tensor]]


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab=1024, d_model=256, heads=4, layers=4, rope_theta=10000.0, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.vocab, self.d_model, self.heads, self.layers = vocab, d_model, heads, layers
        self.head_dim = d_model // heads
        self.rope_theta = rope_theta
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln1 = torch.nn.LayerNorm(d_model)
            b.qkv = torch.nn.Linear(d_model, 3 * d_model, bias=False)
            b.out = torch.nn.Linear(d_model, d_model, bias=False)
            b.ln2 = torch.nn.LayerNorm(d_model)
            b.up = torch.nn.Linear(d_model, 4 * d_model, bias=False)
            b.down = torch.nn.Linear(4 * d_model, d_model, bias=False)
            self.blocks.append(b)
        self.ln = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)
        self.eval()

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        # x: [heads, tokens, head_dim]; rotate pairs (even, odd) by position-dependent angles.
        t = x.shape[1]
        half = self.head_dim // 2
        inv = 1.0 / (self.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
        pos = torch.arange(start, start + t, dtype=torch.float64)
        ang = torch.outer(pos, inv)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, past: Optional[KV] = None) -> Tuple[torch.Tensor, KV]:
        """Logits for `tokens` (positions after the past) and the KV of past + tokens."""
        start = 0 if past is None else past[0][0].shape[1]
        x = self.embed(tokens)
        new_kv: KV = []
        for i, b in enumerate(self.blocks):
            h = b.ln1(x)
            q, k, v = b.qkv(h).split(self.d_model, dim=-1)
            shape = (-1, self.heads, self.head_dim)
            q = self._rope(q.view(shape).transpose(0, 1), start)
            k = self._rope(k.view(shape).transpose(0, 1), start)
            v = v.view(shape).transpose(0, 1)
            if past is not None:
                k = torch.cat([past[i][0], k], dim=1)
                v = torch.cat([past[i][1], v], dim=1)
            new_kv.append((k, v))
            scores = (q @ k.transpose(1, 2)) / math.sqrt(self.head_dim)
            t_q, t_k = q.shape[1], k.shape[1]
            mask = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)
            scores = scores.masked_fill(~mask, float("-inf"))
            a = (scores.softmax(dim=-1) @ v).transpose(0, 1).reshape(-1, self.d_model)
            x = x + b.out(a)
            x = x + b.down(torch.nn.functional.gelu(b.up(b.ln2(x))))
        return self.head(self.ln(x)), new_kv

    def generate(self, prompt: List[int], steps: int, past: Optional[KV] = None,
                 cached_tokens: int = 0, chunk: int = 0) -> Tuple[List[int], torch.Tensor, KV]:
        """Greedy decoding. With `past` holding the KV of prompt[:cached_tokens], only the rest
        of the prompt is prefilled. Returns the new tokens, the logits of the first one, and the
        prompt's KV.

        With `chunk`, the prompt is prefilled in chunks whose boundaries are multiples of
        `chunk` in absolute positions (as engines' chunked prefill does). Then a prefix's KV is
        computed by exactly the same operations whether it is recomputed or was computed by an
        earlier request and loaded, so the outputs agree bit for bit whatever the BLAS does
        with different matrix shapes (when `chunk` divides the cached length)."""
        kv = past
        pos = cached_tokens
        while pos < len(prompt):
            end = len(prompt) if not chunk else min(len(prompt), (pos // chunk + 1) * chunk)
            logits, kv = self.forward(torch.tensor(prompt[pos:end], dtype=torch.long), kv)
            pos = end
        prompt_kv = kv
        first_logits = logits[-1]
        out = [int(first_logits.argmax())]
        for _ in range(steps - 1):
            logits, kv = self.forward(torch.tensor([out[-1]], dtype=torch.long), kv)
            out.append(int(logits[-1].argmax()))
        return out, first_logits, prompt_kv
