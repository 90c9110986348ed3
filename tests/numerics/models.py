"""Small models with planted numerical trouble, shared by the numerics tests."""

from __future__ import annotations

import torch
from torch import nn


class Rotary(nn.Module):
    """A rotary embedding whose inv_freq is computed at construction in the default dtype and kept in
    float32, as many implementations do: built under another device or dtype, the buffer differs."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[-2], dtype=torch.float32, device=x.device)
        angles = torch.outer(positions, self.inv_freq).to(x.dtype)
        return x * torch.cat([angles.cos(), angles.sin()], dim=-1)


class Block(nn.Module):
    """Pre-norm residual block; ``cancel`` adds and removes 1e8, which float32 cannot hold to better than 8."""

    def __init__(self, dim: int, cancel: bool = False) -> None:
        super().__init__()
        self.cancel = cancel
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + torch.tanh(self.fc(self.norm(x)))
        if self.cancel:
            h = (h + 1e8) - 1e8
        return h


class Stack(nn.Module):
    def __init__(self, dim: int = 16, depth: int = 4, cancel_in: int = -1) -> None:
        super().__init__()
        self.rotary = Rotary(dim)
        self.blocks = nn.ModuleList(Block(dim, cancel=index == cancel_in) for index in range(depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.rotary(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Mixer(nn.Module):
    """A projection kept in float32 whatever the model's dtype (a buffer made with an explicit dtype)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("proj", torch.eye(dim, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.proj  # bfloat16 @ float32: torch refuses


class Float32Buffer(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(dim, dim)
        self.mix = nn.Sequential(nn.Identity(), Mixer(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(self.embed(x))


class Offset(nn.Module):
    """Adds and removes 1000: bfloat16 holds values near 1000 to 4 only, float32 to 6e-5."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1000) - 1000


def blocks(dim: int = 16, depth: int = 4, offset_at: int = -1) -> nn.Sequential:
    """Pre-norm blocks with no planted trouble, and an Offset at ``offset_at`` when it is set."""
    layers: list[nn.Module] = []
    for index in range(depth):
        layers.append(Offset() if index == offset_at else Block(dim))
    return nn.Sequential(*layers, nn.Linear(dim, 4))
