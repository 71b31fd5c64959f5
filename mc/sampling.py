"""Next-token choice from logits: greedy, temperature and top-k, as device tensor ops.

Owns :class:`Sampler`. Nothing here reads a value back to the host: the choice is a 0-d long
tensor, and the caller's one ``int(token)`` per step is the only sync decoding needs (see
obsidian Inference). Sampling uses the exponential race: ``argmax(p / E)`` with ``E ~ Exp(1)``
per id picks id ``i`` with probability ``p_i``, without ``torch.multinomial``.
"""
from __future__ import annotations

import torch
from torch import Tensor


class Sampler:
    """``temperature == 0``: greedy (argmax). Otherwise softmax(logits / T) over the top ``top_k`` ids
    (0 = all), drawn with a seeded generator so a seed reproduces the text."""

    def __init__(self, temperature: float = 0.0, top_k: int = 0, seed: int | None = None, *,
                 device: torch.device | str = "cpu") -> None:
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature >= 0:
            raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {temperature!r}")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = no top-k filter), got {top_k!r}")
        self.greedy = temperature == 0
        self.top_k = top_k
        device = torch.device(device)
        self.temperature = torch.tensor(float(temperature) or 1.0, device=device)  # 0-d: no recompile per value
        self.generator = torch.Generator(device=device)
        if seed is not None:
            self.generator.manual_seed(int(seed))
        else:
            self.generator.seed()

    def __call__(self, logits_v: Tensor) -> Tensor:
        """Logits ``[V]`` -> chosen id, a 0-d long tensor on the logits' device."""
        if self.greedy:
            return logits_v.argmax()
        x = logits_v.float() / self.temperature
        if 0 < self.top_k < x.shape[-1]:
            kth = torch.topk(x, self.top_k).values[-1]
            x = x.masked_fill(x < kth, float("-inf"))
        probs = torch.softmax(x, dim=-1)
        race = torch.empty_like(probs).exponential_(1.0, generator=self.generator)
        return (probs / race).argmax()
