# Type stubs of pushpull.torch (see torch.py for what each does).
from typing import Any, Dict, Iterable, Optional, Tuple, Union

import torch

from . import Client, OptimizerConfig, Table

Params = Union[torch.nn.Module, Iterable[torch.Tensor], Iterable[Tuple[str, torch.Tensor]]]

class ServerOptimizer:
    ROW: int
    client: Client
    config: OptimizerConfig
    name: str
    table: Table
    steps: int
    def __init__(self, params: Params, optimizer: OptimizerConfig, consistency: Optional[str] = ...,
                 client: Optional[Client] = ..., name: str = ...) -> None: ...
    def zero_grad(self, set_to_none: bool = ...) -> None: ...
    def step(self) -> None: ...
    def state_dict(self) -> Dict[str, Any]: ...

class ShardedEmbedding(torch.nn.Module):
    num_embeddings: int
    dim: int
    mode: str
    client: Client
    table: Table
    def __init__(self, num_embeddings: int, dim: int, optimizer: Optional[OptimizerConfig] = ...,
                 client: Optional[Client] = ..., mode: str = ..., init: Optional[str] = ..., init_scale: float = ...,
                 name: str = ..., consistency: Optional[str] = ..., seed: int = ...) -> None: ...
    def forward(self, input: torch.Tensor, offsets: Optional[torch.Tensor] = ...) -> torch.Tensor: ...
    def wait(self) -> None: ...
