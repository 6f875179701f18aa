"""The PyTorch backend (``--backend torch``; the ``torch`` extra): the NumPy backend's model in PyTorch, on
CUDA when there is a GPU, data-parallel under ``torchrun`` (DistributedDataParallel).

The data order is the NumPy backend's (placement.trainer.numpy_model): the global batch is drawn from one
seeded ``numpy.random.Generator`` that every rank keeps in step, and each rank trains on its slice, so rank
0's checkpoint (parameters, Adam's state, the generator's state) resumes every rank.

**Lost and hung peers.** The process group is made with ``timeout = GPUFLEET_PEER_TIMEOUT_SECONDS``, so a
collective waiting on a stopped peer fails after that long instead of gloo's or NCCL's default (30 or 10
minutes). An error of a step's collectives (DDP's gradient all-reduce in ``backward``, its bucket broadcast in
the first forward, the per-step stop flag): a ``RuntimeError`` from gloo when a peer's connection resets or
times out, ``torch.distributed``'s ``DistError`` family (``DistBackendError`` from NCCL), becomes
:class:`~placement.trainer.loop.PeerLost`, which the loop turns into the retry exit code; out-of-memory errors
stay what they are. With NCCL, ``torchrun`` turns on its watchdog's asynchronous error handling
(``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``): a timed-out collective aborts the process, which the launcher reads as
a lost peer (its marker says ``running``).

A snapshot copies the parameters and Adam's state to host memory on the training thread (the stall an
asynchronous checkpoint cannot avoid: GPU memory keeps changing); ``torch.save`` runs on the writer thread.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

from placement.trainer.checkpoint import FileWriter
from placement.trainer.loop import PeerLost
from placement.trainer.numpy_model import check_seed, corpus
from placement.trainer.settings import ModelConfig, TrainerEnv

T = TypeVar("T")

STATE_FILE = "state.pt"
ACCELERATOR = re.compile(r"\b(GB200|B200|B100|H200|H100|H20|A100|A10G|L40S|L40|L4|V100|T4|MI300X|MI250X)\b")


def peer_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean a peer is gone, besides :class:`PeerLost` (torch >= 2.1 has ``DistError`` and
    its subclasses; a collective outside :meth:`TorchModel._collective` may raise them)."""
    import torch.distributed as dist

    names = ("DistError", "DistBackendError", "DistNetworkError", "DistStoreError")
    return tuple(getattr(dist, n) for n in names if isinstance(getattr(dist, n, None), type))


def accelerator_name(device_name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100``; an unknown name as it is."""
    m = ACCELERATOR.search(device_name)
    return m.group(1) if m else device_name


class TorchModel:
    """Embedding, ``layers`` tanh layers, output projection; Adam; DDP when the gang has more than one process
    (``env.world``: torchrun's ``WORLD_SIZE``, or ``NNODES`` with one process per pod)."""

    name = "torch"

    def __init__(self, cfg: ModelConfig, seed: int, env: TrainerEnv | None = None) -> None:
        import numpy as np
        import torch
        import torch.distributed as dist
        from torch import nn

        env = env or TrainerEnv()
        self.torch, self.np, self.cfg, self.seed = torch, np, cfg, seed
        self.world, self.rank = env.world, env.rank
        self._not_peers: tuple[type[BaseException], ...] = tuple(
            t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
            if isinstance(t, type))
        if self.world > 1 and not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            self._collective(lambda: dist.init_process_group(
                "nccl" if torch.cuda.is_available() else "gloo", init_method="env://", rank=self.rank,
                world_size=self.world, timeout=dt.timedelta(seconds=env.peer_timeout_s)))
        local = env.local_rank
        if torch.cuda.is_available():
            # Exact resumes on CUDA need deterministic kernels (the embedding's backward uses atomics otherwise);
            # cuBLAS reads its workspace setting when it starts. Not on CPU, whose kernels here are: the call
            # imports TorchInductor and Dynamo, seconds of CPU for every process of a gang.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.cuda.set_device(local)
            self.dev = torch.device("cuda", local)
            self.device = "cuda"
            self.accelerator = accelerator_name(torch.cuda.get_device_name(local))
        else:
            self.dev = torch.device("cpu")
            self.device = "cpu"
            self.accelerator = "CPU"
        torch.manual_seed(seed)
        layers: list[nn.Module] = [nn.Embedding(cfg.vocab, cfg.hidden)]
        for _ in range(cfg.layers):
            layers += [nn.Linear(cfg.hidden, cfg.hidden), nn.Tanh()]
        layers.append(nn.Linear(cfg.hidden, cfg.vocab))
        self.net = nn.Sequential(*layers).to(self.dev)
        self.module: Any = self.net
        if self.world > 1:
            self.module = nn.parallel.DistributedDataParallel(
                self.net, device_ids=[local] if self.device == "cuda" else None)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.corpus = torch.from_numpy(corpus(cfg.vocab, seed)).to(self.dev)
        self.data = np.random.default_rng([seed, 2])  # the data order: its state is checkpointed

    def agree_stop(self, mine: bool) -> bool:
        """Whether any rank got SIGTERM (one all-reduce of a flag per step): every rank stops after the
        same step, so rank 0's emergency checkpoint holds the state every rank resumes from."""
        if self.world == 1:
            return mine
        import torch.distributed as dist

        flag = self.torch.tensor([1 if mine else 0], device=self.dev)
        self._collective(lambda: dist.all_reduce(flag, op=dist.ReduceOp.MAX))
        return bool(flag.item())

    def _collective(self, fn: Callable[[], T]) -> T:
        """Run ``fn``, which talks to the peers: its error (a reset or timed-out connection, a failed store,
        NCCL's ``DistBackendError``) is :class:`PeerLost`; out-of-memory stays itself."""
        try:
            return fn()
        except self._not_peers:
            raise
        except RuntimeError as exc:  # DistError and its family are RuntimeErrors too
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise PeerLost(f"{type(exc).__name__}: {first}") from exc

    def train_step(self) -> float:
        torch, cfg = self.torch, self.cfg
        starts = self.data.integers(0, len(self.corpus) - cfg.seq_len - 1, cfg.batch * self.world)
        mine = starts[self.rank * cfg.batch:(self.rank + 1) * cfg.batch]
        idx = torch.as_tensor(mine, device=self.dev)[:, None] + torch.arange(cfg.seq_len + 1, device=self.dev)
        windows = self.corpus[idx]

        def forward_backward() -> Any:  # DDP: the bucket broadcast (first forward) and the gradient all-reduce
            logits = self.module(windows[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), windows[:, 1:].reshape(-1))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            return loss

        loss = self._collective(forward_backward) if self.world > 1 else forward_backward()
        self.opt.step()
        return float(loss.item())

    def snapshot(self) -> tuple[dict[str, FileWriter], dict[str, Any]]:
        torch = self.torch

        def to_host(obj: Any) -> Any:
            if isinstance(obj, torch.Tensor):
                return obj.detach().to("cpu", copy=True)
            if isinstance(obj, dict):
                return {k: to_host(v) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return type(obj)(to_host(v) for v in obj)
            return obj

        payload = {"model": to_host(self.net.state_dict()), "optimizer": to_host(self.opt.state_dict())}

        def write(f: IO[bytes]) -> None:
            torch.save(payload, f)

        return {STATE_FILE: write}, {"data_rng": self.data.bit_generator.state, "seed": self.seed}

    def restore(self, files: Mapping[str, bytes], state: Mapping[str, Any]) -> None:
        check_seed(state, self.seed)
        try:
            payload = self.torch.load(io.BytesIO(files[STATE_FILE]), map_location=self.dev, weights_only=True)
            self.net.load_state_dict(payload["model"])
            self.opt.load_state_dict(payload["optimizer"])
        except (KeyError, ValueError, TypeError):
            raise
        except Exception as exc:  # noqa: BLE001 - torch.load's unpickler and load_state_dict's RuntimeError
            raise ValueError(f"its {STATE_FILE} does not load into this model: {str(exc)[:200]}") from None
        self.data.bit_generator.state = state["data_rng"]
